#!/usr/bin/python3
"""Golden values for layer_norm, batch_norm and the LayerNorm / BatchNorm1d / BatchNorm2d modules
(include/dp/ops/normalization.h, include/dp/nn/modules/{normalization,batchnorm}.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_normalization.py
Writes tests/golden/normalization.json: {"cases": [...]}, each case
  {"name", "op", "args": {...}, "tensors": {name: tensor}}
and a tensor is {"dtype", "shape", "data"} (data flattened row-major).

op "layer_norm": tensors x, weight?, bias?, out, grad_out, grad_x, grad_weight?, grad_bias?;
  args normalized_shape, eps.
op "batch_norm": tensors x, weight?, bias?, running_mean?, running_var? (before the call),
  out, new_running_mean?, new_running_var? (after), grad_out, grad_x, grad_weight?, grad_bias?;
  args training, momentum, eps.
op "batch_norm_module": a BatchNorm{1,2}d (args dims, num_features, momentum (None = cumulative),
  affine, track_running_stats, eps) with weight / bias set to the given tensors (when affine)
  runs `steps` training forwards on x0, x1, ... (outputs y0, y1, ...), then an eval forward on
  x_eval (y_eval); tensors running_mean, running_var, num_batches_tracked hold the final buffers.
"""
import json
import math
import os

import numpy
import torch
import torch.nn.functional as F

torch.manual_seed(0)

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def short(v, np_type):
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    return float(repr(np_type(v)))


def tj(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:
        data = [short(v, numpy.float32) for v in data]
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": data}


cases = []
names = set()


def add(name, op, args, tensors):
    assert name not in names, name
    names.add(name)
    cases.append({"name": name, "op": op, "args": args, "tensors": {k: tj(v) for k, v in tensors.items() if v is not None}})


def rnd(*shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale + shift).to(dtype)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_(True)


# ---------------------------------------------------------------- layer_norm


def layer_norm_case(name, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    xl, wl, bl = leaf(x), leaf(weight), leaf(bias)
    out = F.layer_norm(xl, normalized_shape, wl, bl, eps)
    go = rnd(*out.shape, dtype=out.dtype)
    leaves = [t for t in (xl, wl, bl) if t is not None]
    grads = torch.autograd.grad(out, leaves, go)
    gd = dict(zip(["x"] + (["w"] if wl is not None else []) + (["b"] if bl is not None else []), grads))
    add(name, "layer_norm", {"normalized_shape": list(normalized_shape), "eps": eps},
        {"x": x, "weight": weight, "bias": bias, "out": out, "grad_out": go,
         "grad_x": gd["x"], "grad_weight": gd.get("w"), "grad_bias": gd.get("b")})


def affine(shape, dtype=torch.float32):
    return rnd(*shape, dtype=dtype, scale=0.5, shift=1.0), rnd(*shape, dtype=dtype, scale=0.3)


w, b = affine([10])
layer_norm_case("ln_2d", rnd(4, 10), [10], w, b)
w, b = affine([8])
layer_norm_case("ln_3d", rnd(2, 3, 8, scale=2.0), [8], w, b)
w, b = affine([4, 5])
layer_norm_case("ln_4d_two_dims", rnd(2, 3, 4, 5), [4, 5], w, b)
layer_norm_case("ln_no_affine", rnd(3, 7), [7])
w, _ = affine([6])
layer_norm_case("ln_weight_only", rnd(5, 6), [6], w, None)
w, b = affine([16])
layer_norm_case("ln_eps", rnd(3, 16, scale=0.01), [16], w, b, eps=1e-3)
w, b = affine([33])
layer_norm_case("ln_large_mean", rnd(6, 33, shift=100.0), [33], w, b)
w, b = affine([9], dtype=torch.float64)
layer_norm_case("ln_f64", rnd(4, 9, dtype=torch.float64), [9], w, b)
w, b = affine([2, 3, 4])
layer_norm_case("ln_all_dims", rnd(2, 3, 4), [2, 3, 4], w, b)
w, b = affine([300])
layer_norm_case("ln_long_rows", rnd(5, 300), [300], w, b)

# ---------------------------------------------------------------- batch_norm (functional)


def batch_norm_case(name, x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    xl, wl, bl = leaf(x), leaf(weight), leaf(bias)
    rm = None if running_mean is None else running_mean.clone()
    rv = None if running_var is None else running_var.clone()
    out = F.batch_norm(xl, rm, rv, wl, bl, training, momentum, eps)
    go = rnd(*out.shape, dtype=out.dtype)
    leaves = [t for t in (xl, wl, bl) if t is not None]
    grads = torch.autograd.grad(out, leaves, go)
    gd = dict(zip(["x"] + (["w"] if wl is not None else []) + (["b"] if bl is not None else []), grads))
    add(name, "batch_norm", {"training": training, "momentum": momentum, "eps": eps},
        {"x": x, "weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var,
         "out": out, "new_running_mean": rm, "new_running_var": rv, "grad_out": go,
         "grad_x": gd["x"], "grad_weight": gd.get("w"), "grad_bias": gd.get("b")})


def running(c, dtype=torch.float32):
    return rnd(c, dtype=dtype, scale=0.2), (torch.rand(c, dtype=torch.float64) + 0.5).to(dtype)


for shape, tag in (([8, 5], "2d"), ([4, 3, 6], "3d"), ([2, 4, 3, 5], "4d")):
    c = shape[1]
    w, b = affine([c])
    rm, rv = running(c)
    x = rnd(*shape, scale=1.5, shift=0.5)
    batch_norm_case(f"bn_train_{tag}", x, w, b, rm, rv, True)
    batch_norm_case(f"bn_eval_{tag}", x, w, b, rm, rv, False)
    batch_norm_case(f"bn_train_no_affine_{tag}", x, None, None, rm, rv, True)
    batch_norm_case(f"bn_train_no_running_{tag}", x, w, b, None, None, True)
w, b = affine([3])
rm, rv = running(3)
batch_norm_case("bn_train_momentum", rnd(6, 3, 4), w, b, rm, rv, True, momentum=0.3, eps=1e-3)
batch_norm_case("bn_eval_no_affine", rnd(5, 3), None, None, rm, rv, False)
batch_norm_case("bn_train_two_values", rnd(2, 3), w, b, rm, rv, True)
batch_norm_case("bn_train_large_mean", rnd(16, 3, 5, shift=50.0), w, b, rm, rv, True)
w, b = affine([4], dtype=torch.float64)
rm, rv = running(4, dtype=torch.float64)
batch_norm_case("bn_train_f64", rnd(3, 4, 2, 2, dtype=torch.float64), w, b, rm, rv, True)
batch_norm_case("bn_eval_f64", rnd(3, 4, 5, dtype=torch.float64), w, b, rm, rv, False)
w, b = affine([7])
rm, rv = running(7)
batch_norm_case("bn_train_wide_channels", rnd(12, 7, 20), w, b, rm, rv, True)

# ---------------------------------------------------------------- BatchNorm modules


def module_case(name, dims, num_features, batch_shape, momentum=0.1, affine_=True, track=True, eps=1e-5, steps=3):
    cls = torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d
    bn = cls(num_features, eps=eps, momentum=momentum, affine=affine_, track_running_stats=track)
    tensors = {}
    if affine_:
        w, b = affine([num_features])
        with torch.no_grad():
            bn.weight.copy_(w)
            bn.bias.copy_(b)
        tensors["weight"], tensors["bias"] = w, b
    bn.train()
    for i in range(steps):
        x = rnd(*batch_shape, scale=1.0 + i, shift=0.3 * i)
        tensors[f"x{i}"] = x
        tensors[f"y{i}"] = bn(x)
    bn.eval()
    x = rnd(*batch_shape)
    tensors["x_eval"] = x
    tensors["y_eval"] = bn(x)
    if track:
        tensors["running_mean"] = bn.running_mean
        tensors["running_var"] = bn.running_var
        tensors["num_batches_tracked"] = bn.num_batches_tracked
    add(name, "batch_norm_module", {"dims": dims, "num_features": num_features, "momentum": momentum, "affine": affine_,
                                    "track_running_stats": track, "eps": eps, "steps": steps}, tensors)


module_case("bn1d_module", 1, 5, [8, 5])
module_case("bn1d_module_3d", 1, 4, [3, 4, 6])
module_case("bn1d_module_momentum_none", 1, 5, [6, 5], momentum=None)
module_case("bn1d_module_no_affine", 1, 3, [4, 3, 2], affine_=False)
module_case("bn1d_module_no_tracking", 1, 3, [5, 3], track=False)
module_case("bn2d_module", 2, 3, [2, 3, 4, 5])
module_case("bn2d_module_momentum_none", 2, 3, [2, 3, 3, 3], momentum=None, eps=1e-3)
module_case("bn2d_module_no_tracking", 2, 2, [3, 2, 2, 3], track=False, affine_=False)
module_case("bn2d_module_momentum_05", 2, 4, [2, 4, 3, 2], momentum=0.5)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "normalization.json")
with open(out, "w") as f:
    json.dump({"generator": "tests/golden/gen_normalization.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {out}")
