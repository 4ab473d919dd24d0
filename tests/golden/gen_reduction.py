#!/usr/bin/python3
"""Golden values for reductions and the softmax family (include/dp/ops/reduction.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_reduction.py
Writes tests/golden/reduction.json: {"cases": [...]} where each case is
  {"name", "op", "args": {...}, "inputs": [tensor], "output": tensor or [tensors],
   "view": optional {"permute": [...]} or {"step": [dim, step]},
   "grad_output": optional tensor, "grads": optional [tensor]}
and a tensor is {"dtype", "shape", "data"} (data flattened row-major; non-finite floats as strings).

"view" makes the input non-contiguous before the op: a permutation of its dims, or every step-th
element along a dim. The C++ side (tests/ops/test_reduction_golden.cpp) builds the same view over
the same storage. "grads" are d(sum(output * grad_output)) / d(view), the view being the leaf.
"generated" cases (large tensors) carry no input data: both sides build the input from the formula
x[i] = float32(((i * 7919) % 10007) / 10007 - 0.3).
"""
import json
import math
import os

import numpy
import torch

torch.manual_seed(0)

DTYPES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}


def num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def short(v, np_type):
    # The shortest decimal that reads back as the same float32 / float16 value (keeps the JSON small).
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    return float(repr(np_type(v)))


def tj(t):
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        data = t.float().reshape(-1).tolist()
    else:
        data = t.reshape(-1).tolist()
    if t.dtype in (torch.float32, torch.bfloat16):
        data = [short(v, numpy.float32) for v in data]
    elif t.dtype == torch.float16:
        data = [short(v, numpy.float16) for v in data]
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data]}


def make_view(x, view):
    if view is None:
        return x
    if "permute" in view:
        return x.permute(*view["permute"])
    dim, step = view["step"]
    idx = [slice(None)] * x.dim()
    idx[dim] = slice(None, None, step)
    return x[tuple(idx)]


def run(op, x, args):
    a = args
    if op == "sum":
        if a.get("dims") is None:
            return x.sum(dtype=a.get("dtype_t"))
        return x.sum(dim=a["dims"], keepdim=a["keepdim"], dtype=a.get("dtype_t"))
    if op == "mean":
        if a.get("dims") is None:
            return x.mean()
        return x.mean(dim=a["dims"], keepdim=a["keepdim"])
    if op == "sum_to":
        shape = a["shape"]
        lead = x.dim() - len(shape)
        dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1]
        r = x.sum(dim=dims, keepdim=True) if dims else x
        return r.reshape(shape)
    if op == "max_all":
        return x.max()
    if op == "min_all":
        return x.min()
    if op == "max_dim":
        r = x.max(dim=a["dim"], keepdim=a["keepdim"])
        return [r.values, r.indices]
    if op == "min_dim":
        r = x.min(dim=a["dim"], keepdim=a["keepdim"])
        return [r.values, r.indices]
    if op == "amax":
        return x.amax(dim=a["dims"], keepdim=a["keepdim"])
    if op == "argmax":
        return x.argmax(dim=a.get("dim"), keepdim=a["keepdim"])
    if op == "argmin":
        return x.argmin(dim=a.get("dim"), keepdim=a["keepdim"])
    if op == "var":
        return x.var(dim=a["dims"], correction=a["correction"], keepdim=a["keepdim"])
    if op == "std":
        return x.std(dim=a["dims"], correction=a["correction"], keepdim=a["keepdim"])
    if op == "logsumexp":
        # dims = [] means every dim (dparallel's convention; torch 1.13's logsumexp mishandles []).
        return x.logsumexp(dim=a["dims"] or list(range(x.dim())), keepdim=a["keepdim"])
    if op == "norm":
        return x.norm(p=a["p"])
    if op in ("softmax", "log_softmax"):
        f = torch.softmax if op == "softmax" else torch.log_softmax
        if x.dtype == torch.float16:  # no float16 CPU kernel in torch 1.13: compute in float32, round
            return f(x.float(), a["dim"]).half()
        return f(x, a["dim"])
    raise ValueError(op)


cases = []
names = set()


def add(name, op, x, view=None, grad=False, **args):
    assert name not in names, name
    names.add(name)
    json_args = {k: num(v) for k, v in args.items() if k != "dtype_t"}
    if "dtype_t" in args and args["dtype_t"] is not None:
        json_args["dtype"] = DTYPES[args["dtype_t"]]
    c = {"name": name, "op": op, "args": json_args, "inputs": [tj(x)]}
    if view is not None:
        c["view"] = view
    v = make_view(x, view)
    if grad:
        v = v.detach().clone().requires_grad_(True) if view is None else make_view(x.detach(), view).requires_grad_(True)
    out = run(op, v, args)
    c["output"] = [tj(o) for o in out] if isinstance(out, list) else tj(out)
    if grad:
        value = out[0] if isinstance(out, list) else out
        go = torch.randn(value.shape, dtype=value.dtype)
        (g,) = torch.autograd.grad(value, v, go)
        c["grad_output"] = tj(go)
        c["grads"] = [tj(g)]
    cases.append(c)


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def ties(*shape, dtype=torch.float32):
    # Small integers as floats: many equal extremes.
    return torch.randint(-2, 3, shape).to(dtype)


# ---------------------------------------------------------------- sum / mean
x34 = rnd(3, 4)
x234 = rnd(2, 3, 4)
x2345 = rnd(2, 3, 4, 5)
add("sum_all_f32", "sum", x234, grad=True, dims=None)
add("sum_all_f64", "sum", rnd(5, 7, dtype=torch.float64), grad=True, dims=None)
for dims in ([0], [1], [2], [-1], [0, 2], [-1, 0], [1, 2], [0, 1, 2]):
    for keepdim in (False, True):
        tag = "_".join(str(d).replace("-", "m") for d in dims)
        add(f"sum_{tag}_k{int(keepdim)}", "sum", x234, grad=True, dims=dims, keepdim=keepdim)
add("sum_4d_13", "sum", x2345, grad=True, dims=[1, 3], keepdim=False)
add("sum_4d_02_k1", "sum", x2345, grad=True, dims=[0, 2], keepdim=True)
add("sum_empty_dims_is_all", "sum", x34, dims=[], keepdim=False)
add("sum_perm_dim1", "sum", x234, view={"permute": [2, 0, 1]}, grad=True, dims=[1], keepdim=False)
add("sum_perm_dim0", "sum", x234, view={"permute": [2, 0, 1]}, grad=True, dims=[0], keepdim=True)
add("sum_perm_all", "sum", x234, view={"permute": [1, 2, 0]}, dims=None)
add("sum_step_dim1", "sum", rnd(4, 7), view={"step": [1, 2]}, grad=True, dims=[1], keepdim=False)
add("sum_step_dim0", "sum", rnd(6, 5), view={"step": [0, 3]}, grad=True, dims=[0], keepdim=False)
add("sum_t_dim1", "sum", rnd(5, 3), view={"permute": [1, 0]}, dims=[1], keepdim=False)
add("sum_t_dim0", "sum", rnd(5, 3), view={"permute": [1, 0]}, dims=[0], keepdim=False)
add("sum_long_rows", "sum", rnd(2, 100), dims=[1], keepdim=False)
add("sum_long_cols", "sum", rnd(100, 2), dims=[0], keepdim=False)
add("sum_int64", "sum", torch.randint(-50, 50, (3, 5)), dims=[1], keepdim=False)
add("sum_int64_all", "sum", torch.randint(-50, 50, (3, 5)), dims=None)
add("sum_int32_to_int64", "sum", torch.randint(-50, 50, (3, 5), dtype=torch.int32), dims=[0], keepdim=False)
add("sum_uint8_to_int64", "sum", torch.randint(0, 255, (4, 6), dtype=torch.uint8), dims=None)
add("sum_bool_to_int64", "sum", torch.rand(4, 6) > 0.5, dims=[1], keepdim=True)
add("sum_dtype_f64", "sum", x34, dims=[1], keepdim=False, dtype_t=torch.float64)
add("sum_int_dtype_f32", "sum", torch.randint(-5, 5, (3, 4)), dims=None, dtype_t=torch.float32)
add("sum_f16", "sum", rnd(4, 8, dtype=torch.float16), dims=[1], keepdim=False)
add("sum_0dim", "sum", torch.tensor(2.5), grad=True, dims=None)
add("sum_0dim_dim0", "sum", torch.tensor(-1.5), grad=True, dims=[0], keepdim=True)
add("sum_empty", "sum", torch.zeros(0, 3), dims=None)
add("sum_empty_dim0", "sum", torch.zeros(0, 3), dims=[0], keepdim=False)
add("sum_empty_dim1", "sum", torch.zeros(0, 3), dims=[1], keepdim=True)
add("sum_nan_inf", "sum", torch.tensor([[1.0, float("nan"), 2.0], [1.0, float("inf"), 3.0], [float("inf"), float("-inf"), 0.0]]), dims=[1], keepdim=False)

add("mean_all_f32", "mean", x234, grad=True, dims=None)
add("mean_all_f64", "mean", rnd(4, 6, dtype=torch.float64), grad=True, dims=None)
for dims in ([0], [-1], [0, 2], [1, 2]):
    for keepdim in (False, True):
        tag = "_".join(str(d).replace("-", "m") for d in dims)
        add(f"mean_{tag}_k{int(keepdim)}", "mean", x234, grad=True, dims=dims, keepdim=keepdim)
add("mean_perm", "mean", x2345, view={"permute": [3, 1, 0, 2]}, grad=True, dims=[0, 3], keepdim=False)
add("mean_step", "mean", rnd(5, 6), view={"step": [1, 2]}, dims=[1], keepdim=True)
add("mean_empty", "mean", torch.zeros(0, 4), dims=None)
add("mean_empty_dim0", "mean", torch.zeros(0, 4), dims=[0], keepdim=False)
add("mean_0dim", "mean", torch.tensor(4.0), dims=None)

# ---------------------------------------------------------------- sum_to
add("sum_to_lead", "sum_to", rnd(4, 3, 5), grad=True, shape=[3, 5])
add("sum_to_bias", "sum_to", rnd(8, 6), grad=True, shape=[6])
add("sum_to_ones", "sum_to", rnd(2, 3, 4), grad=True, shape=[3, 1])
add("sum_to_keep1", "sum_to", rnd(3, 4, 5), grad=True, shape=[1, 4, 1])
add("sum_to_scalar", "sum_to", rnd(3, 4), grad=True, shape=[])
add("sum_to_same", "sum_to", rnd(3, 4), shape=[3, 4])
add("sum_to_perm", "sum_to", rnd(3, 4, 5), view={"permute": [2, 0, 1]}, grad=True, shape=[3, 1])

# ---------------------------------------------------------------- max / min / amax / argmax
add("max_all", "max_all", rnd(4, 5), grad=True)
add("min_all", "min_all", rnd(4, 5), grad=True)
add("max_all_ties", "max_all", torch.tensor([[1.0, 3.0, 3.0], [2.0, 3.0, 0.0]]), grad=True)
add("min_all_ties", "min_all", torch.tensor([[1.0, -3.0, 3.0], [-3.0, 3.0, 0.0]]), grad=True)
add("max_all_nan", "max_all", torch.tensor([1.0, float("nan"), 5.0, float("nan")]))
add("min_all_nan", "min_all", torch.tensor([1.0, float("nan"), -5.0]))
add("max_all_int", "max_all", torch.randint(-100, 100, (5, 6)))
add("min_all_int32", "min_all", torch.randint(-100, 100, (5, 6), dtype=torch.int32))
add("max_all_bool", "max_all", torch.tensor([False, True, False]))
add("max_all_perm", "max_all", rnd(3, 4, 5), view={"permute": [2, 1, 0]})
add("max_all_0dim", "max_all", torch.tensor(-7.0), grad=True)
add("max_all_long", "max_all", rnd(300), grad=True)
for dim in (0, 1, -1, 2):
    for keepdim in (False, True):
        tag = str(dim).replace("-", "m")
        add(f"max_dim{tag}_k{int(keepdim)}", "max_dim", x234, grad=True, dim=dim, keepdim=keepdim)
        add(f"min_dim{tag}_k{int(keepdim)}", "min_dim", x234, grad=True, dim=dim, keepdim=keepdim)
add("max_dim_ties", "max_dim", ties(4, 6), grad=True, dim=1, keepdim=False)
add("min_dim_ties", "min_dim", ties(6, 4), grad=True, dim=0, keepdim=False)
add("max_dim_ties_long", "max_dim", ties(2, 70), dim=1, keepdim=False)
add("max_dim_nan", "max_dim", torch.tensor([[1.0, float("nan"), 2.0, float("nan")], [3.0, 1.0, 3.0, 0.0]]), dim=1, keepdim=False)
add("min_dim_nan", "min_dim", torch.tensor([[1.0, 4.0], [float("nan"), 2.0], [0.0, float("nan")]]), dim=0, keepdim=False)
add("max_dim_perm", "max_dim", x234, view={"permute": [2, 0, 1]}, grad=True, dim=1, keepdim=False)
add("max_dim_step", "max_dim", rnd(5, 8), view={"step": [1, 3]}, grad=True, dim=0, keepdim=True)
add("max_dim_int", "max_dim", torch.randint(-3, 3, (4, 5)), dim=1, keepdim=False)
add("min_dim_uint8", "min_dim", torch.randint(0, 5, (4, 5), dtype=torch.uint8), dim=0, keepdim=False)
add("max_dim_bool", "max_dim", torch.rand(3, 4) > 0.5, dim=1, keepdim=False)
add("max_dim_0dim", "max_dim", torch.tensor(3.0), grad=True, dim=0, keepdim=False)
add("max_dim_empty_other", "max_dim", torch.zeros(0, 3), dim=1, keepdim=False)
add("max_dim_f64", "max_dim", rnd(3, 5, dtype=torch.float64), grad=True, dim=-1, keepdim=True)

add("amax_0", "amax", x234, grad=True, dims=[0], keepdim=False)
add("amax_12_k1", "amax", x234, grad=True, dims=[1, 2], keepdim=True)
add("amax_m1", "amax", x234, grad=True, dims=[-1], keepdim=False)
add("amax_all", "amax", x234, grad=True, dims=[], keepdim=False)
add("amax_ties", "amax", ties(4, 5), grad=True, dims=[1], keepdim=False)
add("amax_ties_02", "amax", ties(3, 2, 4), grad=True, dims=[0, 2], keepdim=True)
add("amax_perm", "amax", x2345, view={"permute": [3, 2, 1, 0]}, grad=True, dims=[0, 2], keepdim=False)
add("amax_int", "amax", torch.randint(-9, 9, (3, 4)), dims=[0], keepdim=False)
add("amax_nan", "amax", torch.tensor([[1.0, float("nan")], [2.0, 3.0]]), dims=[1], keepdim=False)
add("amax_empty_other", "amax", torch.zeros(2, 0), dims=[0], keepdim=False)

add("argmax_all", "argmax", rnd(4, 5), keepdim=False)
add("argmax_all_k1", "argmax", rnd(4, 5), keepdim=True)
add("argmin_all", "argmin", rnd(4, 5), keepdim=False)
add("argmax_all_perm", "argmax", rnd(4, 5), view={"permute": [1, 0]}, keepdim=False)
add("argmax_all_ties", "argmax", torch.tensor([[1.0, 5.0, 2.0], [5.0, 0.0, 5.0]]), keepdim=False)
add("argmax_all_nan", "argmax", torch.tensor([1.0, float("nan"), 7.0, float("nan")]), keepdim=False)
add("argmin_all_int", "argmin", torch.randint(-9, 9, (3, 7)), keepdim=False)
add("argmax_dim1", "argmax", ties(5, 6), dim=1, keepdim=False)
add("argmax_dim0_k1", "argmax", ties(5, 6), dim=0, keepdim=True)
add("argmin_dimm1", "argmin", ties(3, 4, 5), dim=-1, keepdim=False)
add("argmin_dim1_step", "argmin", rnd(4, 9), view={"step": [1, 2]}, dim=1, keepdim=False)
add("argmax_dim_long", "argmax", rnd(2, 150), dim=1, keepdim=False)
add("argmax_0dim", "argmax", torch.tensor(2.0), dim=0, keepdim=False)

# ---------------------------------------------------------------- var / std
for op in ("var", "std"):
    add(f"{op}_all", op, x234, grad=True, dims=[], correction=1, keepdim=False)
    add(f"{op}_0", op, x234, grad=True, dims=[0], correction=1, keepdim=False)
    add(f"{op}_m1_k1", op, x234, grad=True, dims=[-1], correction=1, keepdim=True)
    add(f"{op}_02_c0", op, x234, grad=True, dims=[0, 2], correction=0, keepdim=False)
    add(f"{op}_12_c2_k1", op, x234, grad=True, dims=[1, 2], correction=2, keepdim=True)
    add(f"{op}_perm", op, x2345, view={"permute": [1, 3, 0, 2]}, grad=True, dims=[1, 2], correction=1, keepdim=False)
    add(f"{op}_step", op, rnd(6, 8), view={"step": [1, 2]}, dims=[0], correction=1, keepdim=False)
    add(f"{op}_f64", op, rnd(4, 9, dtype=torch.float64), grad=True, dims=[1], correction=1, keepdim=False)
    add(f"{op}_long_rows", op, rnd(2, 150) * 3 + 10, dims=[1], correction=1, keepdim=False)
    add(f"{op}_long_cols", op, rnd(150, 2) * 3 - 5, dims=[0], correction=1, keepdim=False)
    add(f"{op}_single", op, rnd(3, 1), dims=[1], correction=1, keepdim=False)
    add(f"{op}_empty", op, torch.zeros(2, 0), dims=[1], correction=0, keepdim=False)
    add(f"{op}_over_correction", op, torch.tensor([1.0, 2.0]), dims=[0], correction=3, keepdim=False)
    add(f"{op}_0dim", op, torch.tensor(3.0), dims=[], correction=1, keepdim=False)
add("var_large_mean", "var", torch.randn(200) + 1e4, dims=[0], correction=1, keepdim=False)

# ---------------------------------------------------------------- logsumexp
add("logsumexp_1", "logsumexp", x234, grad=True, dims=[1], keepdim=False)
add("logsumexp_m1_k1", "logsumexp", x234, grad=True, dims=[-1], keepdim=True)
add("logsumexp_02", "logsumexp", x234, grad=True, dims=[0, 2], keepdim=False)
add("logsumexp_all", "logsumexp", x234, grad=True, dims=[], keepdim=False)
add("logsumexp_big", "logsumexp", torch.tensor([[1000.0, 1000.5, 999.0], [-1000.0, -1001.0, -999.5]]), grad=True, dims=[1], keepdim=False)
add("logsumexp_inf", "logsumexp", torch.tensor([[float("inf"), 1.0], [float("-inf"), 2.0], [float("-inf"), float("-inf")], [float("nan"), 1.0]]), dims=[1], keepdim=False)
add("logsumexp_perm", "logsumexp", x2345, view={"permute": [0, 3, 2, 1]}, grad=True, dims=[1, 3], keepdim=True)
add("logsumexp_long", "logsumexp", rnd(2, 300) * 5, dims=[1], keepdim=False)
add("logsumexp_cols", "logsumexp", rnd(40, 3) * 5, dims=[0], keepdim=False)
add("logsumexp_f64", "logsumexp", rnd(3, 7, dtype=torch.float64) * 10, grad=True, dims=[1], keepdim=False)
add("logsumexp_int", "logsumexp", torch.randint(-5, 5, (3, 4)), dims=[1], keepdim=False)
add("logsumexp_empty", "logsumexp", torch.zeros(3, 0), dims=[1], keepdim=False)

# ---------------------------------------------------------------- norm
for p, tag in ((2.0, "2"), (1.0, "1"), (float("inf"), "inf"), (float("-inf"), "neginf"), (3.0, "3"), (0.5, "half"), (0.0, "0")):
    grad = tag not in ("0",)
    add(f"norm_{tag}", "norm", rnd(4, 5) + 0.1, grad=grad, p=p)
add("norm_2_perm", "norm", rnd(3, 4, 5), view={"permute": [2, 0, 1]}, grad=True, p=2.0)
add("norm_inf_ties", "norm", torch.tensor([[3.0, -3.0, 1.0], [2.0, 0.5, -3.0]]), grad=True, p=float("inf"))
add("norm_2_f64", "norm", rnd(6, dtype=torch.float64), grad=True, p=2.0)
add("norm_2_long", "norm", rnd(400) * 0.01, p=2.0)
add("norm_empty", "norm", torch.zeros(0), p=2.0)
add("norm_0dim", "norm", torch.tensor(-3.0), grad=True, p=2.0)

# ---------------------------------------------------------------- softmax / log_softmax
for op in ("softmax", "log_softmax"):
    add(f"{op}_last", op, x234, grad=True, dim=-1)
    add(f"{op}_mid", op, x234, grad=True, dim=1)
    add(f"{op}_first", op, x234, grad=True, dim=0)
    add(f"{op}_4d_2", op, x2345, grad=True, dim=2)
    add(f"{op}_perm_last", op, x234, view={"permute": [1, 2, 0]}, grad=True, dim=-1)
    add(f"{op}_perm_first", op, x234, view={"permute": [2, 0, 1]}, grad=True, dim=0)
    add(f"{op}_step", op, rnd(5, 8), view={"step": [1, 3]}, grad=True, dim=1)
    add(f"{op}_f64", op, rnd(3, 6, dtype=torch.float64), grad=True, dim=1)
    add(f"{op}_f64_dim0", op, rnd(5, 3, dtype=torch.float64), grad=True, dim=0)
    add(f"{op}_large", op, rnd(2, 37) * 30, grad=True, dim=1)
    add(f"{op}_long_rows", op, rnd(2, 150) * 4, dim=1)
    add(f"{op}_long_cols", op, rnd(100, 2) * 4, dim=0)
    add(f"{op}_big_values", op, torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]]), grad=True, dim=1)
    add(f"{op}_neg_inf", op, torch.tensor([[float("-inf"), 1.0, 2.0], [0.0, float("-inf"), float("-inf")]]), dim=1)
    add(f"{op}_nan_inf", op, torch.tensor([[1.0, float("nan"), 2.0], [1.0, float("inf"), 0.0], [float("-inf"), float("-inf"), float("-inf")]]), dim=1)
    add(f"{op}_f16", op, rnd(3, 10, dtype=torch.float16), dim=1)
    add(f"{op}_bf16_dim0", op, rnd(6, 3, dtype=torch.bfloat16), dim=0)
    add(f"{op}_0dim", op, torch.tensor(1.5), grad=True, dim=0)
    add(f"{op}_size1", op, rnd(4, 1), grad=True, dim=1)
    add(f"{op}_empty", op, torch.zeros(0, 4), dim=1)


# ---------------------------------------------------------------- large generated inputs (formula)
def generated(n):
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7919) % 10007).to(torch.float64) / 10007.0 - 0.3).to(torch.float32)


def add_generated(name, op, shape, **args):
    x = generated(math.prod(shape)).reshape(shape)
    out = run(op, x, args)
    exact = run(op, x.double(), args) if op in ("sum", "mean", "norm", "var") else None
    c = {"name": name, "op": op, "args": args, "generated": list(shape), "inputs": [], "output": tj(out)}
    if exact is not None:
        c["exact"] = tj(exact)
    assert name not in names
    names.add(name)
    cases.append(c)


add_generated("gen_sum_1m", "sum", [1 << 20], dims=None)
add_generated("gen_mean_1m", "mean", [1 << 20], dims=None)
add_generated("gen_sum_rows", "sum", [64, 16384], dims=[1], keepdim=False)
add_generated("gen_sum_cols", "sum", [16384, 64], dims=[0], keepdim=False)
add_generated("gen_norm_1m", "norm", [1 << 20], p=2.0)
add_generated("gen_var_rows", "var", [16, 65536], dims=[1], correction=1, keepdim=False)
add_generated("gen_logsumexp_rows", "logsumexp", [32, 4096], dims=[1], keepdim=False)

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reduction.json")
with open(out_path, "w") as f:
    json.dump({"generator": "tests/golden/gen_reduction.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"),
              allow_nan=False)
print(f"wrote {len(cases)} cases to {out_path} ({os.path.getsize(out_path)} bytes)")
