#!/usr/bin/python3
"""Golden values for the basic nn modules (include/dp/nn/modules/{linear,activation,embedding,container}.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_nn_basic.py
Writes tests/golden/nn_basic.json: {"cases": [...]}; each case has a "name" and, depending on kind,
  "repr" (PyTorch's printed module tree) and "keys" (state_dict keys in order), or
  "params" (name -> tensor), "input", "output", "grad_output", "grads" (name -> gradient, "input" too).
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os

import torch
import torch.nn as nn

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def t2j(t):
    t = t.detach()
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": t.reshape(-1).tolist()}


cases = []


class Model(nn.Module):  # the tutorial's model
    def __init__(self, input_size, output_size):
        super().__init__()
        self.fc = nn.Linear(input_size, output_size)

    def forward(self, x):
        return self.fc(x)


class Block2Model(nn.Module):  # the tutorial's model wrapping only block2 (here unwrapped)
    def __init__(self):
        super().__init__()
        self.block1 = nn.Linear(10, 20)
        self.block2 = nn.Sequential(nn.Linear(20, 20), nn.ReLU())
        self.block3 = nn.Linear(20, 5)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 10)
        self.layers = nn.ModuleList([nn.Linear(10, 10), nn.Linear(10, 4, bias=False)])
        self.head = nn.Sequential(nn.GELU(), nn.Flatten(), nn.Sigmoid(), nn.Tanh(), nn.ReLU(inplace=True),
                                  nn.Softmax(dim=1), nn.LogSoftmax(dim=-1), nn.Identity(),
                                  nn.Embedding(5, 3, padding_idx=-2), nn.GELU(approximate="tanh"))


for name, m in [("repr_model", Model(5, 2)), ("repr_block2", Block2Model()), ("repr_net", Net()),
                ("repr_linear_nobias", nn.Linear(3, 4, bias=False)), ("repr_empty_sequential", nn.Sequential())]:
    cases.append({"name": name, "repr": repr(m), "keys": list(m.state_dict().keys()),
                  "param_names": [n for n, _ in m.named_parameters()]})

# Linear forward/backward, float32 and float64, 2-D and 3-D input.
for dtype in (torch.float32, torch.float64):
    for shape in ((7, 5), (2, 3, 5)):
        lin = nn.Linear(5, 3).to(dtype)
        x = torch.randn(*shape, dtype=dtype, requires_grad=True)
        y = lin(x)
        go = torch.randn_like(y)
        y.backward(go)
        cases.append({"name": f"linear_{DT[dtype]}_{len(shape)}d",
                      "params": {"weight": t2j(lin.weight), "bias": t2j(lin.bias)},
                      "input": t2j(x), "output": t2j(y), "grad_output": t2j(go),
                      "grads": {"input": t2j(x.grad), "weight": t2j(lin.weight.grad), "bias": t2j(lin.bias.grad)}})

# Embedding with padding_idx: forward and weight gradient (padding row gets none).
emb = nn.Embedding(6, 4, padding_idx=2)
idx = torch.tensor([[0, 2, 5], [2, 2, 1]])
y = emb(idx)
go = torch.randn_like(y)
y.backward(go)
cases.append({"name": "embedding_padding", "params": {"weight": t2j(emb.weight)}, "input": t2j(idx),
              "output": t2j(y), "grad_output": t2j(go), "grads": {"weight": t2j(emb.weight.grad)}})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_basic.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_nn_basic.py", "torch": torch.__version__, "cases": cases}, f, indent=None)
print("wrote", out, len(cases), "cases")
