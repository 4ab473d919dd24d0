#!/usr/bin/python3
"""Golden values for the dp::nn::functional functions written with dp ops rather than forwarded to
one (leaky_relu, normalize, pad; include/dp/nn/functional/*.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_functional.py
Writes tests/golden/functional.json: {"cases": [case...]}, a case being

    {"name": "<function>|<variant>", "inputs": [tensor], "args": {...}, "output": tensor,
     "grad_output": tensor, "grads": [tensor]   (optional: out.backward(grad_output), float64 cases)}

args: leaky_relu {"negative_slope"}, normalize {"p", "dim", "eps"} (p "inf" for infinity), pad
{"pad": [ints], "value"}. The C++ test is tests/nn/test_functional.cpp. A tensor is {"dtype",
"shape", "data"} (data row-major; non-finite floats as "nan", "inf", "-inf").
"""
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)

DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def tj(t):
    t = t.detach()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v) for v in t.reshape(-1).tolist()]}


cases = []
names = set()


def case(name, fn, x, args, grad=False):
    assert name not in names, name
    names.add(name)
    c = {"name": name, "inputs": [tj(x)], "args": args}
    if grad:
        leaf = x.clone().requires_grad_(True)
        out = fn(leaf)
        go = torch.randn(out.shape, dtype=out.dtype)
        out.backward(go)
        c["grad_output"] = tj(go)
        c["grads"] = [tj(leaf.grad)]
    else:
        out = fn(x)
    c["output"] = tj(out)
    cases.append(c)


special = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.5, -2.0, 3.0])

# ---- leaky_relu
case("leaky_relu|special", lambda x: F.leaky_relu(x), special, {"negative_slope": 0.01})
x = torch.randn(3, 4, dtype=torch.float64)
x[0, 0] = 0.0  # the kink: PyTorch's gradient there is negative_slope
case("leaky_relu|grad", lambda x: F.leaky_relu(x, 0.2), x, {"negative_slope": 0.2}, grad=True)
case("leaky_relu|float32", lambda x: F.leaky_relu(x, 0.1), torch.randn(2, 5), {"negative_slope": 0.1})

# ---- normalize
x = torch.randn(3, 4, dtype=torch.float64)
x[1] = 0.0  # a zero vector: the eps floor gives it a finite gradient
case("normalize|p2_dim1", lambda x: F.normalize(x), x, {"p": 2.0, "dim": 1, "eps": 1e-12}, grad=True)
case("normalize|p2_dim0", lambda x: F.normalize(x, dim=0), torch.randn(3, 4, dtype=torch.float64), {"p": 2.0, "dim": 0, "eps": 1e-12},
     grad=True)
case("normalize|p1_dim-1", lambda x: F.normalize(x, p=1.0, dim=-1), torch.randn(2, 3, 4, dtype=torch.float64),
     {"p": 1.0, "dim": -1, "eps": 1e-12}, grad=True)
case("normalize|p3_dim1", lambda x: F.normalize(x, p=3.0, dim=1), torch.randn(2, 3, 4, dtype=torch.float64),
     {"p": 3.0, "dim": 1, "eps": 1e-12}, grad=True)
case("normalize|inf_dim1", lambda x: F.normalize(x, p=float("inf"), dim=1), torch.randn(4, 3, dtype=torch.float64),
     {"p": "inf", "dim": 1, "eps": 1e-12}, grad=True)
case("normalize|eps_floor", lambda x: F.normalize(x, dim=1, eps=0.5), torch.randn(3, 2) * 0.1, {"p": 2.0, "dim": 1, "eps": 0.5})
case("normalize|float32", lambda x: F.normalize(x), torch.randn(4, 6), {"p": 2.0, "dim": 1, "eps": 1e-12})

# ---- pad (constant)
case("pad|last_dim", lambda x: F.pad(x, (1, 2)), torch.randn(2, 3), {"pad": [1, 2], "value": 0.0})
case("pad|two_dims_value", lambda x: F.pad(x, (1, 1, 2, 0), value=-1.5), torch.randn(2, 3, 4), {"pad": [1, 1, 2, 0], "value": -1.5})
case("pad|crop", lambda x: F.pad(x, (-1, 2, 0, -1)), torch.randn(3, 4), {"pad": [-1, 2, 0, -1], "value": 0.0})
case("pad|all_dims", lambda x: F.pad(x, (0, 1, 1, 0, 2, 1), value=0.5), torch.randn(1, 2, 2), {"pad": [0, 1, 1, 0, 2, 1], "value": 0.5})
case("pad|grad", lambda x: F.pad(x, (2, -1, 1, 1), value=3.0), torch.randn(2, 3, 4, dtype=torch.float64),
     {"pad": [2, -1, 1, 1], "value": 3.0}, grad=True)

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "functional.json")
with open(out_path, "w") as f:
    json.dump({"generator": "tests/golden/gen_functional.py", "torch_version": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"{len(cases)} cases -> {out_path} ({os.path.getsize(out_path) // 1024} KB)")
