#!/usr/bin/python3
"""Golden values for the learning-rate schedulers' sequences and their state_dict / resume
(include/dp/optim/lr_scheduler.h, dp::save / dp::load of an optimizer with its scheduler).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_lr_scheduler.py
Writes tests/golden/lr_scheduler.json: {"cases": [case...]}, each case

    {"name": "<scheduler>|<variant>", "scheduler": "MultiStepLR"|..., "args": {...},
     "group_lrs": [lr of group 0, lr of group 1],
     "lrs": [[lr per group] x 31],      get_last_lr() after construction and after each of 30 steps
     "resume_at": k,                    the step after which the run is interrupted
     "state": {"last_epoch", "step_count", "base_lrs", "last_lrs", "settings": {name: [numbers]}},
                                        scheduler.state_dict() at that point (PyTorch's keys
                                        last_epoch, _step_count, base_lrs, _last_lr and the
                                        scheduler's own settings; milestones as a sorted list)
     "resumed_lrs": [[lr per group] x (30 - k)]}

The resumed run builds a new optimizer (every group at lr 1.0) and a new scheduler with the same
arguments, loads both state_dicts (optimizer first, as usual) and steps on; PyTorch's resumed rates
equal the uninterrupted ones, which the script asserts. Floats are written as the exact decimal of
their double value, so the C++ tests can compare bit for bit.
"""
import json
import os

import torch
from torch.optim import lr_scheduler

STEPS = 30
SETTINGS = {
    "StepLR": ["step_size", "gamma"],
    "MultiStepLR": ["milestones", "gamma"],
    "ExponentialLR": ["gamma"],
    "LinearLR": ["start_factor", "end_factor", "total_iters"],
    "CosineAnnealingLR": ["T_max", "eta_min"],
}


def make(sched, args, group_lrs):
    ps = [torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)]
    opt = torch.optim.SGD([{"params": [ps[0]], "lr": group_lrs[0]}, {"params": [ps[1]], "lr": group_lrs[1]}], lr=1.0)
    return opt, getattr(lr_scheduler, sched)(opt, **args)


def step(opt, s):
    opt.step()  # no gradients: a no-op that keeps PyTorch's call-order check quiet
    s.step()
    return list(s.get_last_lr())


def settings_of(state, sched):
    out = {}
    for key in SETTINGS[sched]:
        v = state[key]
        if key == "milestones":
            out[key] = sorted(float(m) for m in v.elements())
        else:
            out[key] = [float(v)]
    return out


def case(name, sched, args, group_lrs, resume_at):
    opt, s = make(sched, args, group_lrs)
    lrs = [list(s.get_last_lr())]
    for _ in range(STEPS):
        lrs.append(step(opt, s))

    opt, s = make(sched, args, group_lrs)
    for _ in range(resume_at):
        step(opt, s)
    sd, osd = s.state_dict(), opt.state_dict()
    state = {"last_epoch": sd["last_epoch"], "step_count": sd["_step_count"], "base_lrs": sd["base_lrs"],
             "last_lrs": sd["_last_lr"], "settings": settings_of(sd, sched)}
    opt2, s2 = make(sched, args, [1.0, 1.0])
    opt2.load_state_dict(osd)
    s2.load_state_dict(sd)
    resumed = [step(opt2, s2) for _ in range(STEPS - resume_at)]
    assert resumed == lrs[resume_at + 1:], name
    return {"name": name, "scheduler": sched, "args": args, "group_lrs": group_lrs, "lrs": lrs, "resume_at": resume_at,
            "state": state, "resumed_lrs": resumed}


def main():
    cases = [
        case("multistep|2_5_5_9", "MultiStepLR", {"milestones": [9, 2, 5, 5], "gamma": 0.5}, [0.1, 0.02], 4),
        case("multistep|default_gamma", "MultiStepLR", {"milestones": [3, 12]}, [0.3, 1.0], 7),
        case("exponential|0.9", "ExponentialLR", {"gamma": 0.9}, [0.1, 0.02], 11),
        case("exponential|0.77", "ExponentialLR", {"gamma": 0.77}, [0.05, 1.0], 1),
        case("linear|default", "LinearLR", {}, [0.1, 0.02], 3),
        case("linear|warmup_0.1_10", "LinearLR", {"start_factor": 0.1, "total_iters": 10}, [0.1, 0.02], 6),
        case("linear|decay_1_0.25_8", "LinearLR", {"start_factor": 1.0, "end_factor": 0.25, "total_iters": 8}, [0.05, 1.0], 12),
        case("steplr|3_0.5", "StepLR", {"step_size": 3, "gamma": 0.5}, [0.1, 0.02], 5),
        case("cosine|10_0.001", "CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}, [0.1, 0.02], 13),
        case("cosine|7_0", "CosineAnnealingLR", {"T_max": 7}, [0.05, 1.0], 0),
    ]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lr_scheduler.json")
    with open(path, "w") as f:
        json.dump({"cases": cases}, f, separators=(",", ":"))
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
