#!/usr/bin/python3
"""Golden values for the element-wise ops (include/dp/ops/elementwise.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_elementwise.py
Writes tests/golden/elementwise.json: {"cases": [case...]}, a case being

    {"name": "<op>|<variant>", "inputs": [tensor...], "output": tensor,
     "args": {...}            (optional: scalars of the op: alpha, s, min, max, w, value, ...),
     "views": [str|null...]   (optional: how the C++ test turns each stored input into the real,
                               non-contiguous, input: "t" = .t(), "step" = [:, ::2],
                               "expand" = .expand(2, n) of a [1, n] input, "flip" = .transpose(0, 1) of a
                               3-D tensor's first dims),
     "grad_output": tensor, "grads": [tensor|null...]   (optional: out.backward(grad_output))}

A tensor is {"dtype", "shape", "data"} (data flattened row-major; non-finite floats as the strings
"nan", "inf", "-inf"). The C++ test (tests/ops/test_elementwise_golden.cpp) maps <op> to the dp call.
float16 / bfloat16 ops that PyTorch 1.13 has no CPU kernel for are computed in float32 and rounded,
which is what dparallel does (16-bit math runs in float, rounded once on store).
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)

DTYPES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}
F16 = (torch.float16, torch.bfloat16)


def num(v, dtype):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if dtype in (torch.float32, torch.float16):
            # The shortest decimal that rounds back to the same float32 keeps the file small.
            return float(repr(np.float32(v)))
    return v


def tj(t):
    t = t.detach()
    data = t.float().reshape(-1).tolist() if t.dtype in F16 else t.reshape(-1).tolist()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v, t.dtype) for v in data]}


cases = []
names = set()


def apply_view(t, v):
    if v is None:
        return t
    if v == "t":
        return t.t()
    if v == "step":
        return t[:, ::2]
    if v == "expand":
        return t.expand(2, t.shape[1])
    if v == "flip":
        return t.transpose(0, 1)
    raise ValueError(v)


def run(fn, inputs, views):
    real = [apply_view(t, v) for t, v in zip(inputs, views)]
    try:
        return fn(*real)
    except RuntimeError as e:
        if "not implemented for 'Half'" in str(e) or "not implemented for 'BFloat16'" in str(e):
            dt = next(t.dtype for t in real if t.dtype in F16)
            up = [t.float() if t.dtype in F16 else t for t in real]
            return fn(*up).to(dt)
        raise


def case(name, fn, inputs, args=None, views=None, grad=False):
    """Records fn(*inputs); with grad, also d(out)/d(floating inputs) for a random grad_output."""
    assert name not in names, name
    names.add(name)
    views = views or [None] * len(inputs)
    inputs = [t.detach().clone() for t in inputs]
    c = {"name": name, "inputs": [tj(t) for t in inputs]}
    if any(v is not None for v in views):
        c["views"] = views
    if args is not None:
        c["args"] = args
    if grad:
        leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
        out = run(fn, leaves, views)
        go = torch.randn(out.shape, dtype=out.dtype)
        out.backward(go)
        c["grad_output"] = tj(go)
        c["grads"] = [tj(l.grad) if l.grad is not None else None for l in leaves]
    else:
        out = run(fn, inputs, views)
    c["output"] = tj(out)
    cases.append(c)


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


def randint(lo, hi, *shape, dtype=torch.int64):
    return torch.randint(lo, hi, shape, dtype=dtype)


def sample(dtype, *shape, positive=False):
    """Typical operands of a dtype."""
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype == torch.uint8:
        return randint(0, 20, *shape, dtype=dtype)
    if dtype in (torch.int32, torch.int64):
        return randint(1 if positive else -9, 10, *shape, dtype=dtype)
    x = randn(*shape, dtype=torch.float64, scale=2.0)
    if positive:
        x = x.abs() + 0.1
    return x.to(dtype)


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
NUMERIC = [torch.uint8, torch.int32, torch.int64] + FLOATS
ALL = [torch.bool] + NUMERIC

# ---------------------------------------------------------------- binary tensor-tensor ops
binary = {
    "add": lambda a, b: torch.add(a, b),
    "sub": lambda a, b: torch.sub(a, b),
    "mul": lambda a, b: torch.mul(a, b),
    "div": lambda a, b: torch.div(a, b),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}
for op, fn in binary.items():
    for dt in ALL:
        if dt == torch.bool and op == "sub":
            continue
        name = DTYPES[dt]
        b = sample(dt, 2, 3, positive=(op == "div" and not dt.is_floating_point))
        case(f"{op}|{name}", fn, [sample(dt, 2, 3), b])
    # broadcasting: row, column, both sides, leading dims, 0-dim, empty
    case(f"{op}|bcast_row", fn, [sample(torch.float32, 3, 4), sample(torch.float32, 4, positive=True)])
    case(f"{op}|bcast_col", fn, [sample(torch.float32, 3, 4), sample(torch.float32, 3, 1, positive=True)])
    case(f"{op}|bcast_both", fn, [sample(torch.float32, 3, 1), sample(torch.float32, 1, 4, positive=True)])
    case(f"{op}|bcast_lead", fn, [sample(torch.float32, 2, 1, 3), sample(torch.float32, 4, 1, positive=True)])
    case(f"{op}|zero_dim", fn, [sample(torch.float32, 2, 3), torch.tensor(1.5)])
    case(f"{op}|zero_dim_both", fn, [torch.tensor(-2.5), torch.tensor(1.5)])
    case(f"{op}|empty", fn, [sample(torch.float32, 0, 3), sample(torch.float32, 3)])
    # non-contiguous operands
    case(f"{op}|transposed", fn, [sample(torch.float32, 3, 2), sample(torch.float32, 2, 3, positive=True)], views=["t", None])
    case(f"{op}|step", fn, [sample(torch.float32, 2, 6), sample(torch.float32, 2, 3, positive=True)], views=["step", None])
    case(f"{op}|expanded", fn, [sample(torch.float32, 1, 3), sample(torch.float32, 2, 3, positive=True)], views=["expand", None])
    case(f"{op}|transposed_both", fn, [sample(torch.float32, 3, 2), sample(torch.float32, 3, 2, positive=True)], views=["t", "t"])
    # mixed dtypes (type promotion)
    case(f"{op}|int_float", fn, [sample(torch.int64, 2, 3), sample(torch.float32, 2, 3, positive=True)])
    case(f"{op}|half_float", fn, [sample(torch.float16, 2, 3), sample(torch.float32, 2, 3, positive=True)])
    case(f"{op}|half_zero_dim_double", fn, [sample(torch.float16, 2, 3), torch.tensor(1.25, dtype=torch.float64)])
    case(f"{op}|int32_int64", fn, [sample(torch.int32, 2, 3), sample(torch.int64, 2, 3, positive=True)])
    if op != "sub":
        case(f"{op}|bool_int", fn, [sample(torch.bool, 2, 3), sample(torch.int32, 2, 3, positive=True)])
    case(f"{op}|half_bf16", fn, [sample(torch.float16, 2, 3), sample(torch.bfloat16, 2, 3, positive=True)])
    # gradients through broadcasting (float64)
    case(f"{op}|grad_bcast", fn, [sample(torch.float64, 3, 4), sample(torch.float64, 3, 1, positive=True)], grad=True)
    case(f"{op}|grad_mixed", fn, [sample(torch.float32, 2, 3), sample(torch.float64, 3, positive=True)], grad=True)

case("add_alpha|float32", lambda a, b: torch.add(a, b, alpha=2.5), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3)], args={"alpha": 2.5})
case("add_alpha|int64", lambda a, b: torch.add(a, b, alpha=-3), [sample(torch.int64, 2, 3), sample(torch.int64, 2, 3)], args={"alpha": -3})
case("add_alpha|bool", lambda a, b: torch.add(a, b, alpha=True), [sample(torch.bool, 2, 3), sample(torch.bool, 2, 3)], args={"alpha": True})
case("add_alpha|grad", lambda a, b: torch.add(a, b, alpha=-0.5), [sample(torch.float64, 2, 3), sample(torch.float64, 3)], args={"alpha": -0.5}, grad=True)
case("sub_alpha|float32", lambda a, b: torch.sub(a, b, alpha=0.5), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3)], args={"alpha": 0.5})
case("sub_alpha|int32", lambda a, b: torch.sub(a, b, alpha=2), [sample(torch.int32, 2, 3), sample(torch.int32, 2, 3)], args={"alpha": 2})
case("sub_alpha|grad", lambda a, b: torch.sub(a, b, alpha=3.0), [sample(torch.float64, 2, 3), sample(torch.float64, 2, 1)], args={"alpha": 3.0}, grad=True)
# integer wrap-around
case("add|uint8_wrap", binary["add"], [torch.tensor([200, 255, 7], dtype=torch.uint8), torch.tensor([100, 1, 250], dtype=torch.uint8)])
case("mul|int32_wrap", binary["mul"], [torch.tensor([65536, -70000, 3], dtype=torch.int32), torch.tensor([65536, 70000, 5], dtype=torch.int32)])
case("sub|uint8_wrap", binary["sub"], [torch.tensor([0, 5], dtype=torch.uint8), torch.tensor([1, 10], dtype=torch.uint8)])
# special values
inf, nan = float("inf"), float("nan")
special = torch.tensor([0.0, -0.0, 1.0, -1.0, inf, -inf, nan, 2.5])
special2 = torch.tensor([0.0, 1.0, -0.0, inf, inf, 2.0, 1.0, nan])
for op in ["add", "sub", "mul", "div", "maximum", "minimum"]:
    case(f"{op}|special", binary[op], [special, special2])
case("div|int_zero", binary["div"], [torch.tensor([1, 0, -3, 7]), torch.tensor([0, 0, 0, 2])])

# ---------------------------------------------------------------- pow
for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
    case(f"pow|{DTYPES[dt]}", torch.pow, [sample(dt, 2, 3, positive=True), sample(dt, 2, 3)])
case("pow|int64", torch.pow, [randint(-3, 4, 2, 4), randint(0, 4, 2, 4)])
case("pow|int64_negexp", torch.pow, [torch.tensor([1, -1, -1, 2, 0, 3]), torch.tensor([-1, -2, -3, -1, 2, 0])])
case("pow|uint8", torch.pow, [randint(0, 5, 2, 3, dtype=torch.uint8), randint(0, 4, 2, 3, dtype=torch.uint8)])
case("pow|bcast", torch.pow, [sample(torch.float32, 3, 1, positive=True), sample(torch.float32, 4)])
case("pow|int_float", torch.pow, [randint(1, 5, 2, 3), sample(torch.float32, 2, 3)])
case("pow|special", torch.pow, [torch.tensor([0.0, 0.0, -2.0, -2.0, inf, 1.0, nan, 4.0]), torch.tensor([0.0, -1.0, 2.0, 0.5, -1.0, nan, 0.0, -0.5])])
case("pow|grad", torch.pow, [sample(torch.float64, 2, 3, positive=True), sample(torch.float64, 3)], grad=True)
for e in [2, 3, 0.5, -0.5, -1, -2, 1.7, 0, 1]:
    nm = str(e).replace("-", "m").replace(".", "p")
    case(f"pow_scalar|float32_{nm}", lambda a, e=e: torch.pow(a, e), [sample(torch.float32, 2, 3, positive=True)], args={"s": e})
    case(f"pow_scalar|grad_{nm}", lambda a, e=e: torch.pow(a, e), [sample(torch.float64, 2, 3, positive=True)], args={"s": e}, grad=True)
case("pow_scalar|int64_2", lambda a: torch.pow(a, 2), [sample(torch.int64, 2, 3)], args={"s": 2})
case("pow_scalar|int64_3", lambda a: torch.pow(a, 3), [sample(torch.int64, 2, 3)], args={"s": 3})
case("pow_scalar|int64_half", lambda a: torch.pow(a, 0.5), [sample(torch.int64, 2, 3, positive=True)], args={"s": 0.5})
case("pow_scalar|half_2p5", lambda a: torch.pow(a, 2.5), [sample(torch.float16, 2, 3, positive=True)], args={"s": 2.5})
case("pow_scalar|bf16_2", lambda a: torch.pow(a, 2), [sample(torch.bfloat16, 2, 3)], args={"s": 2})
case("pow_scalar|bool_2", lambda a: torch.pow(a, 2), [sample(torch.bool, 2, 3)], args={"s": 2})
for base in [2, 2.5, 0]:
    nm = str(base).replace(".", "p")
    case(f"rpow_scalar|float32_{nm}", lambda a, b=base: torch.pow(b, a), [sample(torch.float32, 2, 3)], args={"s": base})
case("rpow_scalar|int64_2", lambda a: torch.pow(2, a), [randint(0, 8, 2, 3)], args={"s": 2})
case("rpow_scalar|int64_2p5", lambda a: torch.pow(2.5, a), [randint(-2, 4, 2, 3)], args={"s": 2.5})
case("rpow_scalar|grad", lambda a: torch.pow(1.5, a), [sample(torch.float64, 2, 3)], args={"s": 1.5}, grad=True)

# ---------------------------------------------------------------- tensor-scalar ops
scalar_ops = {
    "add_scalar": lambda a, s: torch.add(a, s),
    "sub_scalar": lambda a, s: torch.sub(a, s),
    "mul_scalar": lambda a, s: torch.mul(a, s),
    "div_scalar": lambda a, s: torch.div(a, s),
    "rsub_scalar": lambda a, s: torch.rsub(a, s),
    "rdiv_scalar": lambda a, s: s / a,
}
for op, fn in scalar_ops.items():
    for dt in NUMERIC + [torch.bool]:
        if dt == torch.bool and op in ("sub_scalar", "rsub_scalar"):
            continue
        for s in ([3, -0.75] if dt != torch.bool else [True, 2, 0.5]):
            nm = f"{DTYPES[dt]}_{'f' if isinstance(s, float) else 'b' if isinstance(s, bool) else 'i'}"
            if dt == torch.float16 and isinstance(s, int):
                nm += ""  # half + int scalar stays half
            x = sample(dt, 2, 3, positive=(op == "rdiv_scalar"))
            case(f"{op}|{nm}", lambda a, s=s, fn=fn: fn(a, s), [x], args={"s": s})
    case(f"{op}|grad", lambda a, fn=fn: fn(a, 1.5), [sample(torch.float64, 2, 3, positive=True)], args={"s": 1.5}, grad=True)
    case(f"{op}|transposed", lambda a, fn=fn: fn(a, 2.5), [sample(torch.float32, 3, 2, positive=True)], args={"s": 2.5}, views=["t"])
    case(f"{op}|zero_dim", lambda a, fn=fn: fn(a, 2), [torch.tensor(3.5)], args={"s": 2})

# ---------------------------------------------------------------- unary ops
unary = {
    "neg": (torch.neg, "any", False),
    "abs": (torch.abs, "any", False),
    "sign": (torch.sign, "any", False),
    "square": (torch.square, "any", False),
    "exp": (torch.exp, "float", False),
    "log": (torch.log, "float", True),
    "log1p": (torch.log1p, "float", True),
    "sqrt": (torch.sqrt, "float", True),
    "rsqrt": (torch.rsqrt, "float", True),
    "sin": (torch.sin, "float", False),
    "cos": (torch.cos, "float", False),
    "reciprocal": (torch.reciprocal, "float", True),
    "relu": (torch.relu, "any", False),
    "sigmoid": (torch.sigmoid, "float", False),
    "tanh": (torch.tanh, "float", False),
    "gelu": (F.gelu, "floatonly", False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "floatonly", False),
    "silu": (F.silu, "floatonly", False),
    "softplus": (F.softplus, "floatonly", False),
    "logical_not": (torch.logical_not, "any", False),
}
for op, (fn, kind, positive) in unary.items():
    dts = list(FLOATS)
    if kind in ("any", "float"):
        dts += [torch.int32, torch.int64, torch.uint8]
    if op in ("sign", "logical_not"):
        dts += [torch.bool]
    for dt in dts:
        case(f"{op}|{DTYPES[dt]}", fn, [sample(dt, 2, 3, positive=positive)])
    case(f"{op}|transposed", fn, [sample(torch.float32, 3, 2, positive=positive)], views=["t"])
    case(f"{op}|step", fn, [sample(torch.float32, 2, 8, positive=positive)], views=["step"])
    case(f"{op}|zero_dim", fn, [torch.tensor(0.75)])
    case(f"{op}|empty", fn, [torch.zeros(0, 2)])
    if op != "logical_not":
        case(f"{op}|grad", fn, [sample(torch.float64, 2, 3, positive=positive)], grad=True)
    case(f"{op}|special", fn, [special])
# wide range for the activations (softplus threshold at 20, saturation, large |x|)
wide = torch.tensor([-30.0, -20.0, -5.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 5.0, 19.5, 20.0, 20.5, 30.0, 90.0])
for op in ["exp", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "softplus", "relu"]:
    case(f"{op}|wide", unary[op][0], [wide])
    case(f"{op}|wide_f64", unary[op][0], [wide.double()])
    if op != "exp":
        case(f"{op}|grad_wide", unary[op][0], [wide.double()], grad=True)
case("relu|grad_zero", torch.relu, [torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)], grad=True)
case("abs|grad_zero", torch.abs, [torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)], grad=True)
case("exp|bcast_view", torch.exp, [sample(torch.float32, 1, 4)], views=["expand"])

# ---------------------------------------------------------------- clamp
clamps = [("both", -0.5, 0.8), ("min", -0.5, None), ("max", None, 0.8), ("inverted", 1.0, -1.0)]
for nm, lo, hi in clamps:
    for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        case(f"clamp|{DTYPES[dt]}_{nm}", lambda a, lo=lo, hi=hi: torch.clamp(a, lo, hi), [sample(dt, 2, 4)], args={"min": lo, "max": hi})
    case(f"clamp|grad_{nm}", lambda a, lo=lo, hi=hi: torch.clamp(a, lo, hi), [sample(torch.float64, 2, 4)], args={"min": lo, "max": hi}, grad=True)
case("clamp|int64", lambda a: torch.clamp(a, -3, 4), [sample(torch.int64, 2, 4)], args={"min": -3, "max": 4})
case("clamp|int64_float_bound", lambda a: torch.clamp(a, min=1.5), [sample(torch.int64, 2, 4)], args={"min": 1.5, "max": None})
case("clamp|uint8", lambda a: torch.clamp(a, 3, 10), [sample(torch.uint8, 2, 4)], args={"min": 3, "max": 10})
case("clamp|bool_int", lambda a: torch.clamp(a, min=0), [sample(torch.bool, 2, 4)], args={"min": 0, "max": None})
case("clamp|special", lambda a: torch.clamp(a, -1.0, 1.0), [special], args={"min": -1.0, "max": 1.0})
case("clamp|transposed", lambda a: torch.clamp(a, -0.5, 0.5), [sample(torch.float32, 4, 2)], args={"min": -0.5, "max": 0.5}, views=["t"])
case("clamp|grad_edges", lambda a: torch.clamp(a, -1.0, 1.0), [torch.tensor([-2.0, -1.0, 0.0, 1.0, 3.0], dtype=torch.float64)],
     args={"min": -1.0, "max": 1.0}, grad=True)
case("clamp_min|float32", lambda a: torch.clamp_min(a, 0.25), [sample(torch.float32, 2, 4)], args={"s": 0.25})
case("clamp_min|int32", lambda a: torch.clamp_min(a, 2), [sample(torch.int32, 2, 4)], args={"s": 2})
case("clamp_min|grad", lambda a: torch.clamp_min(a, 0.25), [sample(torch.float64, 2, 4)], args={"s": 0.25}, grad=True)
case("clamp_max|float32", lambda a: torch.clamp_max(a, 0.25), [sample(torch.float32, 2, 4)], args={"s": 0.25})
case("clamp_max|int64", lambda a: torch.clamp_max(a, 2), [sample(torch.int64, 2, 4)], args={"s": 2})
case("clamp_max|grad", lambda a: torch.clamp_max(a, 0.25), [sample(torch.float64, 2, 4)], args={"s": 0.25}, grad=True)

# ---------------------------------------------------------------- where, lerp
for dt in ALL:
    case(f"where|{DTYPES[dt]}", torch.where, [sample(torch.bool, 2, 3), sample(dt, 2, 3), sample(dt, 2, 3)])
case("where|bcast3", torch.where, [sample(torch.bool, 3, 1), sample(torch.float32, 1, 4), sample(torch.float32, 4)])
case("where|bcast_cond", torch.where, [sample(torch.bool, 4), sample(torch.float32, 3, 4), sample(torch.float32, 3, 4)])
case("where|promote", torch.where, [sample(torch.bool, 2, 3), sample(torch.int64, 2, 3), sample(torch.float32, 2, 3)])
case("where|transposed", torch.where, [sample(torch.bool, 2, 3), sample(torch.float32, 3, 2), sample(torch.float32, 2, 3)], views=[None, "t", None])
case("where|grad", torch.where, [sample(torch.bool, 3, 4), sample(torch.float64, 3, 4), sample(torch.float64, 4)], grad=True)
case("where_scalar|float32", lambda c, a: torch.where(c, a, 0.5), [sample(torch.bool, 2, 3), sample(torch.float32, 2, 3)], args={"s": 0.5})
case("where_scalar|int_float", lambda c, a: torch.where(c, a, 0.5), [sample(torch.bool, 2, 3), sample(torch.int64, 2, 3)], args={"s": 0.5})
case("where_scalar|int64", lambda c, a: torch.where(c, a, 7), [sample(torch.bool, 2, 3), sample(torch.int64, 2, 3)], args={"s": 7})
case("where_scalar|bcast", lambda c, a: torch.where(c, a, -1.0), [sample(torch.bool, 3, 1), sample(torch.float32, 4)], args={"s": -1.0})
case("where_scalar|grad", lambda c, a: torch.where(c, a, 0.0), [sample(torch.bool, 3, 4), sample(torch.float64, 4)], args={"s": 0.0}, grad=True)
for w in [0.3, 0.75, 0.0, 1.0, -0.5, 1.5]:
    nm = str(w).replace("-", "m").replace(".", "p")
    case(f"lerp|float32_{nm}", lambda a, b, w=w: torch.lerp(a, b, w), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3)], args={"w": w})
case("lerp|float64", lambda a, b: torch.lerp(a, b, 0.3), [sample(torch.float64, 2, 3), sample(torch.float64, 2, 3)], args={"w": 0.3})
case("lerp|float16", lambda a, b: torch.lerp(a, b, 0.3), [sample(torch.float16, 2, 3), sample(torch.float16, 2, 3)], args={"w": 0.3})
case("lerp|bfloat16", lambda a, b: torch.lerp(a, b, 0.6), [sample(torch.bfloat16, 2, 3), sample(torch.bfloat16, 2, 3)], args={"w": 0.6})
case("lerp|bcast", lambda a, b: torch.lerp(a, b, 0.3), [sample(torch.float32, 3, 1), sample(torch.float32, 4)], args={"w": 0.3})
case("lerp|grad", lambda a, b: torch.lerp(a, b, 0.3), [sample(torch.float64, 3, 4), sample(torch.float64, 4)], args={"w": 0.3}, grad=True)

# ---------------------------------------------------------------- comparisons
cmps = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
for op, fn in cmps.items():
    for dt in ALL:
        a = sample(dt, 3, 4)
        b = a.clone()
        b.view(-1)[::2] = sample(dt, 6)  # half equal, half random
        case(f"{op}|{DTYPES[dt]}", fn, [a, b])
    case(f"{op}|bcast", fn, [sample(torch.float32, 3, 1), sample(torch.float32, 4)])
    case(f"{op}|int_float", fn, [randint(-2, 3, 2, 4), torch.tensor([-1.5, 0.0, 1.0, 2.0])])
    case(f"{op}|special", fn, [special, special2])
    case(f"{op}|transposed", fn, [sample(torch.int64, 3, 2), sample(torch.int64, 2, 3)], views=["t", None])
    case(f"{op}_scalar|float32", lambda a, fn=fn: fn(a, 0.5), [sample(torch.float32, 2, 4)], args={"s": 0.5})
    case(f"{op}_scalar|int64", lambda a, fn=fn: fn(a, 2), [sample(torch.int64, 2, 4)], args={"s": 2})
    case(f"{op}_scalar|int64_f", lambda a, fn=fn: fn(a, 1.5), [sample(torch.int64, 2, 4)], args={"s": 1.5})
    case(f"{op}_scalar|bool", lambda a, fn=fn: fn(a, True), [sample(torch.bool, 2, 4)], args={"s": True})
    case(f"{op}_scalar|half", lambda a, fn=fn: fn(a, 0.1), [torch.tensor([0.1, 0.2, -1.0], dtype=torch.float16)], args={"s": 0.1})

# ---------------------------------------------------------------- in-place ops (output = self afterwards)
def inplace(fn):
    def f(self, *rest):
        s = self.clone()
        fn(s, *rest)
        return s
    return f

case("add_|float32", inplace(lambda s, b: s.add_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 3)])
case("add_|alpha", inplace(lambda s, b: s.add_(b, alpha=-2.0)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 1)], args={"alpha": -2.0})
case("add_|int_from_int64_zero_dim", inplace(lambda s, b: s.add_(b)), [sample(torch.int32, 2, 3), torch.tensor(7)])
case("add_|half_from_float", inplace(lambda s, b: s.add_(b)), [sample(torch.float16, 2, 3), sample(torch.float32, 2, 3)])
case("add_|float_from_int", inplace(lambda s, b: s.add_(b)), [sample(torch.float32, 2, 3), sample(torch.int64, 2, 3)])
case("add_|transposed_self", inplace(lambda s, b: s.add_(b)), [sample(torch.float32, 3, 2), sample(torch.float32, 2, 3)], views=["t", None])
case("add_scalar_|int64", inplace(lambda s: s.add_(5)), [sample(torch.int64, 2, 3)], args={"s": 5})
case("add_scalar_|float32", inplace(lambda s: s.add_(0.25, alpha=2)), [sample(torch.float32, 2, 3)], args={"s": 0.25, "alpha": 2})
case("sub_|float64", inplace(lambda s, b: s.sub_(b, alpha=0.5)), [sample(torch.float64, 2, 3), sample(torch.float64, 2, 3)], args={"alpha": 0.5})
case("sub_scalar_|int32", inplace(lambda s: s.sub_(3)), [sample(torch.int32, 2, 3)], args={"s": 3})
case("mul_|float32", inplace(lambda s, b: s.mul_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 1)])
case("mul_|int64", inplace(lambda s, b: s.mul_(b)), [sample(torch.int64, 2, 3), sample(torch.int64, 3)])
case("mul_scalar_|bf16", inplace(lambda s: s.mul_(1.5)), [sample(torch.bfloat16, 2, 3)], args={"s": 1.5})
case("div_|float32", inplace(lambda s, b: s.div_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 3, positive=True)])
case("div_scalar_|float64", inplace(lambda s: s.div_(4)), [sample(torch.float64, 2, 3)], args={"s": 4})
case("neg_|int32", inplace(lambda s: s.neg_()), [sample(torch.int32, 2, 3)])
case("sqrt_|float32", inplace(lambda s: s.sqrt_()), [sample(torch.float32, 2, 3, positive=True)])
case("relu_|float32", inplace(lambda s: s.relu_()), [sample(torch.float32, 2, 3)])
case("relu_|int64", inplace(lambda s: s.relu_()), [sample(torch.int64, 2, 3)])
case("clamp_|float32", inplace(lambda s: s.clamp_(-0.5, 0.5)), [sample(torch.float32, 2, 3)], args={"min": -0.5, "max": 0.5})
case("clamp_|int64", inplace(lambda s: s.clamp_(min=0)), [sample(torch.int64, 2, 3)], args={"min": 0, "max": None})
case("addcmul_|float32", inplace(lambda s, a, b: s.addcmul_(a, b, value=0.5)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3), sample(torch.float32, 3)], args={"value": 0.5})
case("addcmul_|float64", inplace(lambda s, a, b: s.addcmul_(a, b, value=-2)), [sample(torch.float64, 2, 3), sample(torch.float64, 2, 1), sample(torch.float64, 2, 3)], args={"value": -2})
case("addcmul_|int64", inplace(lambda s, a, b: s.addcmul_(a, b, value=3)), [sample(torch.int64, 2, 3), sample(torch.int64, 2, 3), sample(torch.int64, 2, 3)], args={"value": 3})
case("addcmul_|half", inplace(lambda s, a, b: s.addcmul_(a, b)), [sample(torch.float16, 2, 3), sample(torch.float16, 2, 3), sample(torch.float16, 2, 3)], args={"value": 1})
case("addcdiv_|float32", inplace(lambda s, a, b: s.addcdiv_(a, b, value=0.1)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3), sample(torch.float32, 2, 3, positive=True)], args={"value": 0.1})
case("addcdiv_|float64", inplace(lambda s, a, b: s.addcdiv_(a, b, value=-1)), [sample(torch.float64, 2, 3), sample(torch.float64, 3), sample(torch.float64, 2, 1, positive=True)], args={"value": -1})
case("lerp_|float32", inplace(lambda s, e: s.lerp_(e, 0.9)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3)], args={"w": 0.9})
case("lerp_|bcast", inplace(lambda s, e: s.lerp_(e, 0.1)), [sample(torch.float64, 2, 3), sample(torch.float64, 3)], args={"w": 0.1})
case("fill_|float32", inplace(lambda s: s.fill_(2.5)), [sample(torch.float32, 2, 3)], args={"s": 2.5})
case("fill_|int64_from_float", inplace(lambda s: s.fill_(2.7)), [sample(torch.int64, 2, 3)], args={"s": 2.7})
case("fill_|bool", inplace(lambda s: s.fill_(True)), [sample(torch.bool, 2, 3)], args={"s": True})
case("fill_|step", inplace(lambda s: s.fill_(-1)), [sample(torch.float32, 2, 6)], args={"s": -1}, views=["step"])
case("zero_|float32", inplace(lambda s: s.zero_()), [sample(torch.float32, 2, 3)])
case("copy_|float32", inplace(lambda s, b: s.copy_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 2, 3)])
case("copy_|bcast", inplace(lambda s, b: s.copy_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 3)])
case("copy_|int_from_float", inplace(lambda s, b: s.copy_(b)), [sample(torch.int64, 2, 3), sample(torch.float32, 2, 3)])
case("copy_|half_from_double", inplace(lambda s, b: s.copy_(b)), [sample(torch.float16, 2, 3), sample(torch.float64, 2, 3)])
case("copy_|bool_from_float", inplace(lambda s, b: s.copy_(b)), [sample(torch.bool, 2, 3), torch.tensor([[0.0, 0.5, -1.0], [2.0, 0.0, nan]])])
case("copy_|transposed_src", inplace(lambda s, b: s.copy_(b)), [sample(torch.float32, 2, 3), sample(torch.float32, 3, 2)], views=[None, "t"])

# ---------------------------------------------------------------- type promotion: torch.result_type
# inputs: [a, b]; a scalar operand is given in args {"s": value} instead of b.
promo = [
    (torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int64)),
    (torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.float16)),
    (torch.zeros(2, dtype=torch.float16), torch.zeros(2, dtype=torch.bfloat16)),
    (torch.zeros(2, dtype=torch.float16), torch.tensor(1.0, dtype=torch.float32)),
    (torch.zeros(2, dtype=torch.int32), torch.tensor(1.0, dtype=torch.float64)),
    (torch.zeros(2, dtype=torch.uint8), torch.tensor(1000, dtype=torch.int64)),
    (torch.zeros(2, dtype=torch.bool), torch.tensor(1, dtype=torch.int32)),
    (torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.uint8)),
    (torch.tensor(1, dtype=torch.uint8), torch.tensor(1.0, dtype=torch.float64)),
    (torch.tensor(1, dtype=torch.int32), torch.tensor(1, dtype=torch.int64)),
    (torch.zeros(2, dtype=torch.uint8), torch.zeros(2, dtype=torch.int32)),
    (torch.zeros(2, dtype=torch.float32), torch.zeros(2, dtype=torch.float64)),
    (torch.zeros(2, dtype=torch.bfloat16), torch.tensor(1, dtype=torch.int64)),
    (torch.tensor(True), torch.tensor(2.0, dtype=torch.float16)),
]
for i, (a, b) in enumerate(promo):
    r = torch.result_type(a, b)
    case(f"result_type|t{i}_{DTYPES[a.dtype]}{'' if a.dim() else '0d'}_{DTYPES[b.dtype]}{'' if b.dim() else '0d'}",
         lambda a, b, r=r: torch.zeros(0, dtype=r), [a, b])
promo_s = [
    (torch.zeros(2, dtype=torch.int32), 0.5), (torch.zeros(2, dtype=torch.int32), 2), (torch.zeros(2, dtype=torch.bool), 2),
    (torch.zeros(2, dtype=torch.bool), 2.5), (torch.zeros(2, dtype=torch.uint8), True), (torch.zeros(2, dtype=torch.float16), 2.5),
    (torch.zeros(2, dtype=torch.bfloat16), 3), (torch.tensor(1, dtype=torch.int32), 2.5), (torch.tensor(1.0, dtype=torch.float64), 2),
    (torch.zeros(2, dtype=torch.bool), False), (torch.tensor(True), 1), (torch.zeros(2, dtype=torch.int64), 1e10),
]
for i, (a, s) in enumerate(promo_s):
    r = torch.result_type(a, s)
    kind = "f" if isinstance(s, float) else "b" if isinstance(s, bool) else "i"
    case(f"result_type_scalar|s{i}_{DTYPES[a.dtype]}{'' if a.dim() else '0d'}_{kind}", lambda a, r=r: torch.zeros(0, dtype=r), [a], args={"s": s})

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elementwise.json")
with open(out_path, "w") as f:
    json.dump({"generator": "tests/golden/gen_elementwise.py", "torch_version": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"{len(cases)} cases -> {out_path} ({os.path.getsize(out_path) // 1024} KB)")
