#!/usr/bin/python3
"""Golden values for the image transforms (include/dp/data/transforms.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_transforms.py
Writes tests/golden/transforms.json: {"cases": [...]}; each Normalize case has a "name", "mean" and
"std" (lists of floats), "input" and "output" tensors ({"dtype", "shape", "data"}, row-major).
torchvision may be absent, so the reference is its Normalize written in plain torch ops
(torchvision.transforms.functional.normalize for tensors):
    mean = torch.as_tensor(mean, dtype=x.dtype).view(-1, 1, 1)
    std = torch.as_tensor(std, dtype=x.dtype).view(-1, 1, 1)
    out = x.clone().sub_(mean).div_(std)
"""
import json
import os

import torch

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64"}


def t2j(t):
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": t.reshape(-1).tolist()}


def normalize(x, mean, std):
    m = torch.as_tensor(mean, dtype=x.dtype).view(-1, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype).view(-1, 1, 1)
    return x.clone().sub_(m).div_(s)


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
cases = []
for name, shape, dtype, (mean, std) in [
        ("normalize_chw_float32", (3, 4, 5), torch.float32, IMAGENET),
        ("normalize_chw_float64", (3, 4, 5), torch.float64, IMAGENET),
        ("normalize_nchw_float32", (2, 3, 3, 4), torch.float32, IMAGENET),
        ("normalize_one_value_float32", (2, 5, 3), torch.float32, ([0.2860], [0.3530])),
        ("normalize_one_channel_float32", (1, 6, 6), torch.float32, ([0.1307], [0.3081])),
        ("normalize_negative_std_float64", (2, 2, 3), torch.float64, ([1.5, -0.25], [-2.0, 0.5]))]:
    x = torch.rand(*shape, dtype=dtype)
    cases.append({"name": name, "mean": mean, "std": std, "input": t2j(x), "output": t2j(normalize(x, mean, std))})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transforms.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_transforms.py", "torch": torch.__version__, "cases": cases}, f, indent=None)
print("wrote", out, len(cases), "cases")
