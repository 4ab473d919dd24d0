#!/usr/bin/python3
"""Golden values for the optimizers and LR schedulers (include/dp/optim/*.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_optim.py
Writes tests/golden/optim.json:

    {"init":  [tensor...],                 initial parameters P0..P3 (float32 values)
     "grads": [[tensor|null...] x 20],     gradient of each parameter at each step (P3 never has one)
     "cases": [case...]}

An optimizer case runs 20 steps of torch.optim.<optimizer>(groups, **defaults) (foreach=False,
PyTorch's default) over the parameters in two param groups, group 0 = [P0, P1] and group 1 =
[P2, P3], each group's "options" overriding some of the defaults (the rest are inherited):

    {"name": "<config>|<dtype>", "optimizer": "SGD"|"Adam"|"AdamW", "dtype": "float32"|"float64",
     "defaults": {...}, "groups": [{"params": [0, 1], "options": {...}}, ...],
     "scheduler": {"type": "CosineAnnealingLR", "T_max": .., "eta_min": ..}   (optional: stepped
                                                                            after every optimizer step)
     "after": [[tensor per parameter] x 20]}      parameters after each step

Parameters and gradients hold float32 values, so the float64 runs start from exactly the same
numbers. A scheduler case records get_last_lr() after construction and after each of 30 steps:

    {"name": "<scheduler>|<variant>", "scheduler": "StepLR"|"CosineAnnealingLR", "args": {...},
     "group_lrs": [lr of group 0, lr of group 1], "lrs": [[lr per group] x 31]}

Floats are written as the exact decimal of their double value, so the C++ tests can compare bit
for bit.
"""
import json
import os

import torch

GEN = torch.Generator().manual_seed(1234)
SHAPES = [[4, 5], [5], [37], [3]]  # P2 has 37 elements: ATen's vector loop plus a scalar tail
NO_GRAD = {3}
STEPS = 20
DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def tj(t):
    t = t.detach()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


INIT = [torch.randn(s, generator=GEN) for s in SHAPES]
GRADS = [[None if i in NO_GRAD else torch.randn(s, generator=GEN) for i, s in enumerate(SHAPES)] for _ in range(STEPS)]

CONFIGS = [
    ("sgd_plain", "SGD", {"lr": 0.1}, {"lr": 0.05}),
    ("sgd_momentum_dampening", "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, {"lr": 0.03, "momentum": 0.5}),
    ("sgd_nesterov_weight_decay", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
     {"weight_decay": 0.1, "momentum": 0.7}),
    ("sgd_maximize", "SGD", {"lr": 0.05, "maximize": True, "weight_decay": 0.01}, {"momentum": 0.8, "dampening": 0.2}),
    ("adam_plain", "Adam", {"lr": 0.01}, {"lr": 0.005, "betas": [0.8, 0.99]}),
    ("adam_weight_decay", "Adam", {"lr": 0.01, "weight_decay": 0.1}, {"eps": 1e-6, "weight_decay": 0.01}),
    ("adam_amsgrad", "Adam", {"lr": 0.01, "amsgrad": True}, {"lr": 0.02, "maximize": True}),
    ("adamw", "AdamW", {"lr": 0.01}, {"weight_decay": 0.1, "amsgrad": True}),
    ("sgd_momentum_cosine", "SGD", {"lr": 0.1, "momentum": 0.9}, {"lr": 0.05},
     {"type": "CosineAnnealingLR", "T_max": 7, "eta_min": 0.001}),
]


def torch_kwargs(opts):
    return {k: (tuple(v) if k == "betas" else v) for k, v in opts.items()}


def run(config, dtype):
    name, opt_name, defaults, group1 = config[:4]
    sched = config[4] if len(config) > 4 else None
    params = [p.clone().to(dtype).requires_grad_(True) for p in INIT]
    groups = [{"params": params[0:2]}, dict({"params": params[2:4]}, **torch_kwargs(group1))]
    opt = getattr(torch.optim, opt_name)(groups, **torch_kwargs(defaults))
    scheduler = None
    if sched is not None:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=sched["T_max"], eta_min=sched["eta_min"])
    after = []
    for step in range(STEPS):
        for p, g in zip(params, GRADS[step]):
            p.grad = None if g is None else g.to(dtype)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        after.append([tj(p) for p in params])
    case = {"name": f"{name}|{DTYPES[dtype]}", "optimizer": opt_name, "dtype": DTYPES[dtype], "defaults": defaults,
            "groups": [{"params": [0, 1], "options": {}}, {"params": [2, 3], "options": group1}], "after": after}
    if sched is not None:
        case["scheduler"] = sched
    return case


def run_scheduler(name, sched, args, group_lrs):
    ps = [torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)]
    opt = torch.optim.SGD([{"params": [ps[0]], "lr": group_lrs[0]}, {"params": [ps[1]], "lr": group_lrs[1]}], lr=1.0)
    s = getattr(torch.optim.lr_scheduler, sched)(opt, **args)
    lrs = [list(s.get_last_lr())]
    for _ in range(30):
        opt.step()  # no gradients: a no-op that keeps PyTorch's call-order check quiet
        s.step()
        lrs.append(list(s.get_last_lr()))
    return {"name": name, "scheduler": sched, "args": args, "group_lrs": group_lrs, "lrs": lrs}


def main():
    cases = [run(c, dt) for c in CONFIGS for dt in (torch.float32, torch.float64)]
    cases += [
        run_scheduler("steplr|3_0.5", "StepLR", {"step_size": 3, "gamma": 0.5}, [0.1, 0.02]),
        run_scheduler("steplr|4_default_gamma", "StepLR", {"step_size": 4}, [0.3, 1.0]),
        run_scheduler("cosine|10_0.001", "CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}, [0.1, 0.02]),
        run_scheduler("cosine|7_0", "CosineAnnealingLR", {"T_max": 7}, [0.05, 1.0]),
    ]
    out = {"init": [tj(p) for p in INIT], "grads": [[None if g is None else tj(g) for g in gs] for gs in GRADS],
           "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
