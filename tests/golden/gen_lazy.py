#!/usr/bin/python3
"""Golden values for LazyLinear (include/dp/nn/modules/lazy.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_lazy.py
Writes tests/golden/lazy.json: {"cases": [...]}; each case has a "name", the model's "repr",
"keys" (state_dict keys in order), "param_names" and "param_shapes" (named_parameters() order;
an uninitialized parameter has no shape: null), before ("*_before") and after ("*_after") one
forward of an input with "in_features" features, and the DataParallel refusal's "message".
"""
import json
import os
import warnings

import torch
import torch.nn as nn
from torch.nn.parameter import is_lazy

warnings.simplefilter("ignore")  # "Lazy modules are a new feature under heavy development"
torch.manual_seed(0)


class Model(nn.Module):
    """The model of tests/nn/test_lazy.cpp: a lazy layer between two ordinary ones."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(5, 6)
        self.fc = nn.LazyLinear(4)
        self.head = nn.LazyLinear(2, bias=False)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(self.pre(x))))


def describe(m):
    return {"repr": repr(m), "keys": list(m.state_dict().keys()),
            "param_names": [n for n, _ in m.named_parameters()],
            "param_shapes": [None if is_lazy(p) else list(p.shape) for _, p in m.named_parameters()]}


cases = []
for name, make, in_features in [("lazy_linear", lambda: nn.LazyLinear(4), 3),
                                ("lazy_linear_nobias", lambda: nn.LazyLinear(7, bias=False), 2),
                                ("model", Model, 5)]:
    m = make()
    case = {"name": name, "in_features": in_features}
    case.update({k + "_before": v for k, v in describe(m).items()})
    # replicate() calls _replicate_for_data_parallel() on every module; a lazy one refuses (this
    # CPU-only PyTorch can't run DataParallel itself, so the method is called directly).
    try:
        (m.fc if name == "model" else m)._replicate_for_data_parallel()
    except RuntimeError as e:
        case["message"] = str(e)
    m(torch.randn(2, in_features))
    case.update({k + "_after": v for k, v in describe(m).items()})
    cases.append(case)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lazy.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_lazy.py", "torch": torch.__version__, "cases": cases}, f, indent=None)
print("wrote", out, len(cases), "cases")
