#!/usr/bin/python3
"""Golden values for DataParallel's PyTorch-parity cases (tests/parallel/test_data_parallel.cpp).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_data_parallel.py
Writes tests/golden/data_parallel.json: {"cases": [...]}, each case with a "name":
  "buffer_requires_grad": a module y = tanh(fc(x)) * scale whose `scale` is a buffer registered with
      requires_grad=True; "params" (name -> tensor, the buffer included), "input", "output",
      "grad_output", "grads" (name -> gradient, "input" too) of y.backward(grad_output) on one device.
      DataParallel must give the same values on any number of devices, since PyTorch's replicate
      broadcasts buffers that require grad differentiably (DataParallel itself needs GPUs, so the
      single-device values are the reference).
  "replica_zero_grad_warning": "category" and "message" of the warning PyTorch emits when
      zero_grad() is called on a module created by replicate() (Module._replicate_for_data_parallel).
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os
import warnings

import torch
import torch.nn as nn

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def t2j(t):
    t = t.detach()
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": t.reshape(-1).tolist()}


cases = []


class ScaledNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("scale", torch.randn(3).requires_grad_())

    def forward(self, x):
        return torch.tanh(self.fc(x)) * self.scale


net = ScaledNet()
# 10 rows: chunks of 5,5 on 2 devices, 4,4,2 on 3 and 3,3,3,1 on 4.
x = torch.randn(10, 4, requires_grad=True)
y = net(x)
go = torch.randn(10, 3)
y.backward(go)
cases.append({"name": "buffer_requires_grad",
              "params": {"fc.weight": t2j(net.fc.weight), "fc.bias": t2j(net.fc.bias), "scale": t2j(net.scale)},
              "input": t2j(x), "output": t2j(y), "grad_output": t2j(go),
              "grads": {"fc.weight": t2j(net.fc.weight.grad), "fc.bias": t2j(net.fc.bias.grad),
                        "scale": t2j(net.scale.grad), "input": t2j(x.grad)}})

replica = nn.Linear(2, 2)._replicate_for_data_parallel()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    replica.zero_grad()
assert len(caught) == 1, caught
cases.append({"name": "replica_zero_grad_warning", "category": caught[0].category.__name__, "message": str(caught[0].message)})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_parallel.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_data_parallel.py", "torch": torch.__version__, "cases": cases}, f, indent=None)
print("wrote", out, len(cases), "cases")
