#!/usr/bin/python3
"""Golden values for Tensor's comparison and logical operators (include/dp/core/tensor.h) and the
logical_* / bitwise_* ops (include/dp/ops/elementwise.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_compare_operators.py
Writes tests/golden/compare_operators.json: {"cases": [case...]}, a case being

    {"name": "<op>|<form>|<variant>", "inputs": [tensor...], "output": tensor,
     "args": {"s": scalar}   (forms ts and st: the Python scalar operand)}

<op> is eq ne lt le gt ge (the operators == != < <= > >=), and or xor (& | ^), invert (~), or a
function name (logical_and, ...); <form> is tt (tensor OP tensor), ts (tensor OP scalar), st (scalar
OP tensor, Python's reflected operator), t (unary). The output is what Python's operator gives, so
the C++ test (tests/ops/test_compare_operators.cpp) checks the same expression written in C++.
A tensor is {"dtype", "shape", "data"} (data row-major; non-finite floats as "nan", "inf", "-inf").
"""
import json
import math
import operator
import os

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


def tj(t):
    data = t.float().reshape(-1).tolist() if t.dtype in (torch.float16, torch.bfloat16) else t.reshape(-1).tolist()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data]}


cases = []
names = set()


def case(name, fn, inputs, s=None):
    assert name not in names, name
    names.add(name)
    out = fn(*inputs) if s is None else fn(*inputs, s)
    assert out.dtype == torch.bool, name
    c = {"name": name, "inputs": [tj(t) for t in inputs], "output": tj(out)}
    if s is not None:
        c["args"] = {"s": num(s)}
    cases.append(c)


def randn(*shape, dtype=torch.float32):
    return (torch.randn(*shape, dtype=torch.float64) * 2).to(dtype)


def with_ties(a, b):
    """b with every other element replaced by a's, so equality is exercised."""
    b = b.clone()
    b.view(-1)[::2] = a.reshape(-1)[::2].to(b.dtype)
    return b


special = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, float("nan"), -2.5])
special2 = torch.tensor([float("nan"), float("inf"), 1.0, -0.0, 0.0, float("nan"), 3.0, -2.5])

CMPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
for op, fn in CMPS.items():
    a = randn(3, 4)
    case(f"{op}|tt|float32", fn, [a, with_ties(a, randn(3, 4))])
    case(f"{op}|tt|bcast", fn, [randn(3, 1), randn(4)])
    case(f"{op}|tt|bcast_0d", fn, [torch.tensor(0.25), randn(2, 3)])
    case(f"{op}|tt|nan", fn, [special, special2])
    ai = torch.randint(-2, 3, (2, 4))
    case(f"{op}|tt|int64_float32", fn, [ai, torch.tensor([-1.5, 0.0, 1.0, 2.0])])
    case(f"{op}|tt|bool_int64", fn, [torch.rand(2, 3) > 0.5, torch.randint(-1, 2, (2, 3))])
    case(f"{op}|tt|uint8_int32_bcast", fn, [torch.randint(0, 4, (4, 1), dtype=torch.uint8),
                                           torch.randint(-2, 4, (3,), dtype=torch.int32)])
    case(f"{op}|tt|float16_float64", fn, [torch.tensor([0.1, 0.5, -1.0], dtype=torch.float16),
                                        torch.tensor([0.1, 0.5, -1.0000001], dtype=torch.float64)])
    case(f"{op}|ts|float32", fn, [randn(2, 4)], s=0)
    case(f"{op}|ts|float32_half", fn, [torch.tensor([0.25, 0.5, 0.75, -0.5])], s=0.5)
    case(f"{op}|ts|int64_f", fn, [torch.randint(-2, 4, (2, 4))], s=1.5)
    case(f"{op}|ts|nan", fn, [special], s=0.0)
    case(f"{op}|ts|nan_scalar", fn, [special], s=float("nan"))
    case(f"{op}|ts|bool", fn, [torch.rand(2, 3) > 0.5], s=True)
    case(f"{op}|ts|float16", fn, [torch.tensor([0.1, 0.2, -1.0], dtype=torch.float16)], s=0.1)
    # Scalar on the left: Python calls the tensor's reflected operator (0 < t is t > 0).
    case(f"{op}|st|float32", lambda t, s, fn=fn: fn(s, t), [randn(2, 4)], s=0)
    case(f"{op}|st|int64", lambda t, s, fn=fn: fn(s, t), [torch.randint(-2, 3, (5,))], s=1)
    case(f"{op}|st|nan", lambda t, s, fn=fn: fn(s, t), [special], s=1.0)

BOOL_OPS = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}
for op, fn in BOOL_OPS.items():
    case(f"{op}|tt|bool", fn, [torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.5])
    case(f"{op}|tt|bcast", fn, [torch.rand(3, 1) > 0.5, torch.tensor([True, False, True, False])])
    case(f"{op}|tt|masks", lambda a, fn=fn: fn(a > 0, a < 1), [torch.tensor([-1.0, 0.5, 2.0, float("nan"), 0.0, 1.0])])
case("invert|t|bool", operator.invert, [torch.rand(2, 5) > 0.5])
case("invert|t|mask", lambda a: ~(a >= 0), [special])

LOGICAL = {"logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor}
for op, fn in LOGICAL.items():
    case(f"{op}|tt|bool", fn, [torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.5])
    case(f"{op}|tt|nan", fn, [special, special2])
    case(f"{op}|tt|int64_float32_bcast", fn, [torch.randint(-1, 2, (3, 1)), torch.tensor([0.0, 2.0, float("nan"), -0.0])])
    case(f"{op}|tt|uint8_bool", fn, [torch.tensor([0, 1, 2, 0], dtype=torch.uint8), torch.tensor([True, True, False, False])])
case("logical_not|t|float32", torch.logical_not, [special])
case("logical_not|t|int64", torch.logical_not, [torch.tensor([0, 1, -3, 0])])

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_operators.json")
with open(out_path, "w") as f:
    json.dump({"generator": "tests/golden/gen_compare_operators.py", "torch_version": torch.__version__, "cases": cases}, f,
              separators=(",", ":"))
print(f"{len(cases)} cases -> {out_path} ({os.path.getsize(out_path) // 1024} KB)")
