#!/usr/bin/python3
"""Golden values for gradient clipping (include/dp/nn/utils/clip_grad.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_clip_grad.py
Writes tests/golden/clip_grad.json:

    {"params": [tensor...],      four parameters P0..P3 (P2 never has a gradient)
     "grads":  [tensor|null...], their gradients before clipping
     "cases":  [case...]}

A case calls torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type) ("kind": "norm",
recording the returned "total_norm") or clip_grad_value_(params, clip_value) ("kind": "value") on
fresh copies of the gradients, in the case's "dtype", and records the gradients after ("after",
null for P2). "scale" multiplies the gradients first (a large scale makes the norm clip, a small
one leaves it under max_norm); "poison" sets element 0 of P0's gradient to that value (inf, nan),
for the non-finite cases. Floats are written as the exact decimal of their double value;
non-finite ones as the strings "nan", "inf", "-inf".
"""
import json
import math
import os

import torch

GEN = torch.Generator().manual_seed(4321)
SHAPES = [[4, 5], [5], [3], [7]]
NO_GRAD = {2}
DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def num(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def tj(t):
    t = t.detach()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(float(v)) for v in t.reshape(-1).tolist()]}


PARAMS = [torch.randn(s, generator=GEN) for s in SHAPES]
GRADS = [None if i in NO_GRAD else torch.randn(s, generator=GEN) for i, s in enumerate(SHAPES)]


def run(name, kind, dtype=torch.float32, scale=1.0, poison=None, **args):
    params = [p.clone().to(dtype).requires_grad_(True) for p in PARAMS]
    for p, g in zip(params, GRADS):
        p.grad = None if g is None else (g.to(dtype) * scale)
    if poison is not None:
        params[0].grad.view(-1)[0] = poison
    case = {"name": name, "kind": kind, "dtype": DTYPES[dtype], "scale": scale, "args": {k: num(v) for k, v in args.items()}}
    if poison is not None:
        case["poison"] = num(poison)
    if kind == "norm":
        total = torch.nn.utils.clip_grad_norm_(params, args["max_norm"], norm_type=args["norm_type"])
        case["total_norm"] = num(float(total))
    else:
        torch.nn.utils.clip_grad_value_(params, args["clip_value"])
    case["after"] = [None if p.grad is None else tj(p.grad) for p in params]
    return case


def main():
    inf = float("inf")
    cases = []
    for norm_type, tag in [(2.0, "2"), (1.0, "1"), (inf, "inf"), (3.0, "3")]:
        cases.append(run(f"norm{tag}|clipped", "norm", max_norm=1.0, norm_type=norm_type))
        cases.append(run(f"norm{tag}|under", "norm", scale=0.01, max_norm=10.0, norm_type=norm_type))
        cases.append(run(f"norm{tag}|clipped|float64", "norm", dtype=torch.float64, max_norm=0.5, norm_type=norm_type))
    cases.append(run("norm2|inf_gradient", "norm", poison=inf, max_norm=1.0, norm_type=2.0))
    cases.append(run("norm2|nan_gradient", "norm", poison=float("nan"), max_norm=1.0, norm_type=2.0))
    cases.append(run("value|0.5", "value", clip_value=0.5))
    cases.append(run("value|0.1|float64", "value", dtype=torch.float64, clip_value=0.1))
    cases.append(run("value|10", "value", clip_value=10.0))
    out = {"params": [tj(p) for p in PARAMS], "grads": [None if g is None else tj(g) for g in GRADS], "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clip_grad.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"), allow_nan=False)
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
