#!/usr/bin/python3
"""Golden values for ParameterList, ParameterDict and ModuleDict
(include/dp/nn/modules/parameter_containers.h, module_dict.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_containers.py
Writes tests/golden/containers.json: {"cases": [...]}; each case has a "name" and
  "repr" (PyTorch's printed module tree), "keys" (state_dict keys in order) and "param_names"
  (named_parameters() order), and for "forward_*" cases "params" (name -> tensor), "input",
  "output" and "grads" (name -> gradient of output.pow(2).sum(); "input" too).
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os
from collections import OrderedDict

import torch
import torch.nn as nn

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def t2j(t):
    t = t.detach()
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": t.reshape(-1).tolist()}


class Model(nn.Module):
    """The model of tests/nn/test_containers.cpp: every container, used by forward()."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3, 3))])
        self.gates = nn.ParameterDict(OrderedDict([("input", nn.Parameter(torch.randn(3))), ("output", nn.Parameter(torch.randn(2)))]))
        self.heads = nn.ModuleDict({"cls": nn.Linear(3, 2), "aux": nn.Sequential(nn.Linear(3, 3), nn.Tanh())})

    def forward(self, x):
        h = self.fc(x) * self.scales[0]
        h = h.matmul(self.scales[1]) + self.gates["input"]
        h = self.heads["aux"](h)
        return self.heads["cls"](h) * self.gates["output"]


cases = []

m = Model()
cases.append({"name": "model", "repr": repr(m), "keys": list(m.state_dict().keys()),
              "param_names": [n for n, _ in m.named_parameters()]})

# Forward and backward in float64 (the test loads these parameters and compares).
m64 = Model().double()
x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
y = m64(x)
y.pow(2).sum().backward()
cases.append({"name": "forward_float64",
              "params": {n: t2j(p) for n, p in m64.named_parameters()},
              "input": t2j(x), "output": t2j(y),
              "grads": dict({n: t2j(p.grad) for n, p in m64.named_parameters()}, input=t2j(x.grad))})

# Printing details: a frozen (requires_grad=False) parameter, a 0-d one, float64 and int64 types,
# single-element containers (printed on one line).
plist = nn.ParameterList([nn.Parameter(torch.zeros(2, 3, 4, dtype=torch.float64)),
                          nn.Parameter(torch.tensor(1.0), requires_grad=False)])
# An OrderedDict keeps insertion order (a plain dict would be sorted by ParameterDict.update).
pdict = nn.ParameterDict(OrderedDict([("w", nn.Parameter(torch.zeros(5, dtype=torch.float64))),
                                      ("n", nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False))]))
for name, mod in [("repr_parameter_list", plist), ("repr_parameter_dict", pdict),
                  ("repr_parameter_list_one", nn.ParameterList([nn.Parameter(torch.zeros(7))])),
                  ("repr_parameter_list_empty", nn.ParameterList()),
                  ("repr_parameter_dict_empty", nn.ParameterDict()),
                  ("repr_module_dict_empty", nn.ModuleDict())]:
    cases.append({"name": name, "repr": repr(mod), "keys": list(mod.state_dict().keys()),
                  "param_names": [n for n, _ in mod.named_parameters()]})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "containers.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_containers.py", "torch": torch.__version__, "cases": cases}, f, indent=None)
print("wrote", out, len(cases), "cases")
