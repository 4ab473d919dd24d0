#!/usr/bin/python3
"""Golden values for the sequence-model ops (include/dp/ops/sequence.h) and the tanh GELU.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_sequence_ops.py
Writes tests/golden/sequence_ops.json: {"cases": [...]}. Each case has
  "name", "op" (which dp function: tests/ops/test_sequence_ops.cpp's table), "args" (the op's
  arguments besides the tensors), "inputs" (tensors), "outputs" (the op's results, in order), and,
  when some output is differentiable: "weights" (one per differentiable output, null for the others)
  and "grads" (one per input, null for the non-floating ones): the gradients of
  loss = sum_i sum(outputs[i] * weights[i]) w.r.t. the inputs.
sort and argsort are recorded with stable=True (dp's sort is always stable). masked_fill_ runs on a
copy (x * 1) of its floating input, so the gradient is the leaf's.
A tensor is {"dtype", "shape", "data"} (data row-major; non-finite floats as "nan", "inf", "-inf").
"""
import json
import math
import os

import numpy
import torch
import torch.nn.functional as F

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool",
      torch.uint8: "uint8"}


def num(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:  # the shortest decimal that reads back as the same float32
        data = [float(repr(numpy.float32(v))) for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data]}


cases = []
names = set()


def case(name, op, fn, inputs, args=None):
    """Records fn(*inputs) -> tensor or tuple, and the gradients of a weighted sum of its floating outputs."""
    assert name not in names, name
    names.add(name)
    inputs = [t.detach().clone() for t in inputs]
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    outs = fn(*leaves)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    c = {"name": name, "op": op, "args": args or {}, "inputs": [t2j(t) for t in inputs], "outputs": [t2j(o) for o in outs]}
    weights = [torch.randn(o.shape, dtype=o.dtype) if o.is_floating_point() and o.requires_grad else None for o in outs]
    if any(w is not None for w in weights):
        loss = sum((o * w).sum() for o, w in zip(outs, weights) if w is not None)
        grads = torch.autograd.grad(loss, [l for l in leaves if l.requires_grad], allow_unused=True)
        it = iter(grads)
        c["weights"] = [t2j(w) if w is not None else None for w in weights]
        gl = []
        for l in leaves:
            if l.requires_grad:
                g = next(it)
                gl.append(t2j(g if g is not None else torch.zeros_like(l)))
            else:
                gl.append(None)
        c["grads"] = gl
    cases.append(c)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=torch.float64).to(dtype)


def ties(*shape, dtype=torch.float32, values=3):
    """Small integers as floats: many equal values (sort stability)."""
    return torch.randint(0, values, shape).to(dtype)


FLOATS = [torch.float32, torch.float64]
NAN = float("nan")

# ---------------------------------------------------------------- tril / triu
for dt in FLOATS:
    n = DT[dt]
    for d in [0, 1, -1, 2, -3, 10, -10]:
        case(f"tril|{n}_d{d}", "tril", lambda x, d=d: torch.tril(x, d), [randn(4, 5, dtype=dt)], {"diagonal": d})
        case(f"triu|{n}_d{d}", "triu", lambda x, d=d: torch.triu(x, d), [randn(4, 5, dtype=dt)], {"diagonal": d})
    case(f"tril|{n}_batched", "tril", lambda x: torch.tril(x, -1), [randn(2, 3, 4, 3, dtype=dt)], {"diagonal": -1})
    case(f"triu|{n}_batched", "triu", lambda x: torch.triu(x, 1), [randn(2, 3, 3, 4, dtype=dt)], {"diagonal": 1})
case("tril|tall", "tril", lambda x: torch.tril(x), [randn(6, 3)], {"diagonal": 0})
case("triu|tall", "triu", lambda x: torch.triu(x), [randn(6, 3)], {"diagonal": 0})
case("tril|int64", "tril", lambda x: torch.tril(x, 1), [torch.randint(-9, 9, (3, 4))], {"diagonal": 1})
case("triu|int64", "triu", lambda x: torch.triu(x, -1), [torch.randint(-9, 9, (2, 3, 4))], {"diagonal": -1})
case("tril|bool", "tril", lambda x: torch.tril(x), [torch.ones(4, 4, dtype=torch.bool)], {"diagonal": 0})
case("triu|bool", "triu", lambda x: torch.triu(x, 1), [torch.ones(3, 5, dtype=torch.bool)], {"diagonal": 1})
case("tril|empty", "tril", lambda x: torch.tril(x), [torch.zeros(2, 0, 3)], {"diagonal": 0})
case("tril|transposed", "tril", lambda x: torch.tril(x.t()), [randn(5, 4)], {"diagonal": 0, "view": "t"})

# ---------------------------------------------------------------- sort / argsort
for dt in FLOATS:
    n = DT[dt]
    for desc in [False, True]:
        s = "desc" if desc else "asc"
        case(f"sort|{n}_ties_{s}", "sort", lambda x, desc=desc: torch.sort(x, dim=-1, descending=desc, stable=True), [ties(3, 9, dtype=dt)],
             {"dim": -1, "descending": desc})
        case(f"sort|{n}_dim1_{s}", "sort", lambda x, desc=desc: torch.sort(x, dim=1, descending=desc, stable=True), [ties(2, 7, 3, dtype=dt)],
             {"dim": 1, "descending": desc})
        case(f"sort|{n}_dim0_{s}", "sort", lambda x, desc=desc: torch.sort(x, dim=0, descending=desc, stable=True), [randn(5, 4, dtype=dt)],
             {"dim": 0, "descending": desc})
    special = torch.tensor([1.0, NAN, -math.inf, 3.0, 0.0, -0.0, NAN, math.inf, -2.0, 1.0], dtype=dt)
    for desc in [False, True]:
        s = "desc" if desc else "asc"
        case(f"sort|{n}_special_{s}", "sort", lambda x, desc=desc: torch.sort(x, descending=desc, stable=True), [special],
             {"dim": -1, "descending": desc})
case("sort|long_row", "sort", lambda x: torch.sort(x, stable=True), [ties(2, 300, values=20)], {"dim": -1, "descending": False})
case("sort|int64", "sort", lambda x: torch.sort(x, dim=0, stable=True), [torch.randint(-3, 3, (8, 3))], {"dim": 0, "descending": False})
case("sort|int64_desc", "sort", lambda x: torch.sort(x, descending=True, stable=True), [torch.randint(-3, 3, (3, 8))],
     {"dim": -1, "descending": True})
case("sort|int32", "sort", lambda x: torch.sort(x, stable=True), [torch.randint(-5, 5, (2, 6), dtype=torch.int32)], {"dim": -1, "descending": False})
case("sort|bool", "sort", lambda x: torch.sort(x, stable=True), [torch.randint(0, 2, (2, 7)).bool()], {"dim": -1, "descending": False})
case("sort|zero_dim", "sort", lambda x: torch.sort(x, stable=True), [torch.tensor(2.5)], {"dim": -1, "descending": False})
case("sort|empty", "sort", lambda x: torch.sort(x, dim=1, stable=True), [torch.zeros(2, 0)], {"dim": 1, "descending": False})
for desc in [False, True]:
    case(f"argsort|ties_{'desc' if desc else 'asc'}", "argsort", lambda x, desc=desc: torch.sort(x, dim=0, descending=desc, stable=True).indices,
         [ties(8, 3)], {"dim": 0, "descending": desc})

# ---------------------------------------------------------------- topk (no ties: PyTorch does not fix their order)
for dt in FLOATS:
    n = DT[dt]
    for k in [1, 3, 6]:
        for largest in [True, False]:
            lg = "largest" if largest else "smallest"
            case(f"topk|{n}_k{k}_{lg}", "topk", lambda x, k=k, largest=largest: torch.topk(x, k, dim=-1, largest=largest), [randn(3, 6, dtype=dt)],
                 {"k": k, "dim": -1, "largest": largest, "sorted": True})
    case(f"topk|{n}_dim0", "topk", lambda x: torch.topk(x, 2, dim=0), [randn(5, 3, dtype=dt)], {"k": 2, "dim": 0, "largest": True, "sorted": True})
    case(f"topk|{n}_dim1_3d", "topk", lambda x: torch.topk(x, 3, dim=1, largest=False), [randn(2, 6, 4, dtype=dt)],
         {"k": 3, "dim": 1, "largest": False, "sorted": True})
    case(f"topk|{n}_nan", "topk", lambda x: torch.topk(x, 3), [torch.tensor([1.0, NAN, 3.0, -math.inf, 2.0], dtype=dt)],
         {"k": 3, "dim": -1, "largest": True, "sorted": True})
    case(f"topk|{n}_nan_smallest", "topk", lambda x: torch.topk(x, 4, largest=False),
         [torch.tensor([1.0, NAN, 3.0, -math.inf, 2.0], dtype=dt)], {"k": 4, "dim": -1, "largest": False, "sorted": True})
case("topk|long_row", "topk", lambda x: torch.topk(x, 10), [randn(2, 500)], {"k": 10, "dim": -1, "largest": True, "sorted": True})
case("topk|int64", "topk", lambda x: torch.topk(x, 2), [torch.randperm(12).reshape(3, 4)], {"k": 2, "dim": -1, "largest": True, "sorted": True})
case("topk|k0", "topk", lambda x: torch.topk(x, 0), [randn(3, 4)], {"k": 0, "dim": -1, "largest": True, "sorted": True})
case("topk|zero_dim", "topk", lambda x: torch.topk(x, 1), [torch.tensor(1.5)], {"k": 1, "dim": -1, "largest": True, "sorted": True})

# ---------------------------------------------------------------- cumsum
for dt in FLOATS:
    n = DT[dt]
    case(f"cumsum|{n}_1d", "cumsum", lambda x: torch.cumsum(x, 0), [randn(7, dtype=dt)], {"dim": 0})
    case(f"cumsum|{n}_dim0", "cumsum", lambda x: torch.cumsum(x, 0), [randn(4, 5, dtype=dt)], {"dim": 0})
    case(f"cumsum|{n}_dim1", "cumsum", lambda x: torch.cumsum(x, 1), [randn(4, 5, dtype=dt)], {"dim": 1})
    case(f"cumsum|{n}_dim_m2", "cumsum", lambda x: torch.cumsum(x, -2), [randn(2, 3, 4, dtype=dt)], {"dim": -2})
case("cumsum|wide_inner", "cumsum", lambda x: torch.cumsum(x, 0), [randn(2, 260)], {"dim": 0})  # 256-column blocks
case("cumsum|long_row", "cumsum", lambda x: torch.cumsum(x, -1), [randn(1, 400)], {"dim": -1})
case("cumsum|transposed", "cumsum", lambda x: torch.cumsum(x.t(), 1), [randn(5, 4)], {"dim": 1, "view": "t"})
case("cumsum|int32", "cumsum", lambda x: torch.cumsum(x, 1), [torch.randint(-9, 9, (3, 4), dtype=torch.int32)], {"dim": 1})
case("cumsum|int64", "cumsum", lambda x: torch.cumsum(x, 0), [torch.randint(-9, 9, (3, 4))], {"dim": 0})
case("cumsum|bool", "cumsum", lambda x: torch.cumsum(x, -1), [torch.randint(0, 2, (2, 6)).bool()], {"dim": -1})
case("cumsum|uint8", "cumsum", lambda x: torch.cumsum(x, 0), [torch.full((300,), 200, dtype=torch.uint8)], {"dim": 0})
case("cumsum|special", "cumsum", lambda x: torch.cumsum(x, 0), [torch.tensor([1.0, math.inf, 2.0, -math.inf, 3.0])], {"dim": 0})
case("cumsum|empty", "cumsum", lambda x: torch.cumsum(x, 1), [torch.zeros(3, 0)], {"dim": 1})

# ---------------------------------------------------------------- baddbmm
for dt in FLOATS:
    n = DT[dt]
    for beta, alpha in [(1, 1), (0.5, 2.0), (1, -1.5)]:
        nm = f"b{beta}_a{alpha}".replace(".", "p").replace("-", "m")
        case(f"baddbmm|{n}_{nm}", "baddbmm", lambda s, a, b, beta=beta, alpha=alpha: torch.baddbmm(s, a, b, beta=beta, alpha=alpha),
             [randn(3, 4, 5, dtype=dt), randn(3, 4, 6, dtype=dt), randn(3, 6, 5, dtype=dt)], {"beta": beta, "alpha": alpha})
    case(f"baddbmm|{n}_bcast_row", "baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, alpha=0.25),
         [randn(5, dtype=dt), randn(2, 3, 4, dtype=dt), randn(2, 4, 5, dtype=dt)], {"beta": 1, "alpha": 0.25})
    case(f"baddbmm|{n}_bcast_mat", "baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=2.0),
         [randn(3, 1, dtype=dt), randn(2, 3, 4, dtype=dt), randn(2, 4, 5, dtype=dt)], {"beta": 2.0, "alpha": 1})
nan_self = torch.full((2, 3, 4), NAN)
case("baddbmm|beta0_nan_self", "baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=0, alpha=0.5), [nan_self, randn(2, 3, 5), randn(2, 5, 4)],
     {"beta": 0, "alpha": 0.5})
case("baddbmm|transposed", "baddbmm", lambda s, a, b: torch.baddbmm(s, a.transpose(1, 2), b, alpha=0.5),
     [randn(2, 3, 4), randn(2, 5, 3), randn(2, 5, 4)], {"beta": 1, "alpha": 0.5, "view": "t1"})
case("baddbmm|k0", "baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5), [randn(2, 3, 4), randn(2, 3, 0), randn(2, 0, 4)],
     {"beta": 0.5, "alpha": 1})
case("baddbmm|int64", "baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=2, alpha=3),
     [torch.randint(-5, 5, (2, 2, 3)), torch.randint(-5, 5, (2, 2, 4)), torch.randint(-5, 5, (2, 4, 3))], {"beta": 2, "alpha": 3})

# ---------------------------------------------------------------- einsum
EINSUM = [
    ("mm", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("attn_scores", "bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("attn_values", "bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("outer", "i,j->ij", [(4,), (5,)]),
    ("transpose", "ij->ji", [(3, 4)]),
    ("row_sum", "ij->i", [(3, 4)]),
    ("col_sum", "ij->j", [(3, 4)]),
    ("total", "ij->", [(3, 4)]),
    ("bmm", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ellipsis_mm", "...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)]),
    ("ellipsis_bcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ellipsis_left", "...ij,jk->...ik", [(2, 3, 4, 5), (5, 6)]),
    ("ellipsis_transpose", "...ij->...ji", [(2, 3, 4)]),
    ("ellipsis_sum", "...ij->ij", [(2, 3, 4)]),
    ("implicit_mm", "ij,jk", [(3, 4), (4, 5)]),
    ("implicit_transpose", "ba", [(3, 4)]),
    ("implicit_ellipsis", "...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("implicit_upper_first", "Ba,ab", [(2, 3), (3, 4)]),
    ("hadamard", "ij,ij->ij", [(3, 4), (3, 4)]),
    ("batch_dot", "bi,bi->b", [(4, 5), (4, 5)]),
    ("dot", "i,i->", [(6,), (6,)]),
    ("implicit_dot", "i,i", [(6,), (6,)]),
    ("mm_bt", "ij,kj->ik", [(3, 4), (5, 4)]),
    ("permute3", "bij->jbi", [(2, 3, 4)]),
    ("sum_one_side", "ij,jk->k", [(3, 4), (4, 5)]),
    ("left_only_summed", "bij,bjk->bk", [(2, 3, 4), (2, 4, 5)]),
    ("batch_outer", "bi,bj->bij", [(2, 3), (2, 4)]),
    ("size1_bcast", "ij,jk->ik", [(3, 1), (4, 5)]),
    ("three", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("three_batch", "bij,bjk,bk->bi", [(2, 3, 4), (2, 4, 5), (2, 5)]),
    ("spaces", " ij , jk -> ik ", [(3, 4), (4, 5)]),
    ("multi_contract", "abcd,cdbe->ae", [(2, 3, 4, 5), (4, 5, 3, 6)]),
    ("scalar_operand", ",ij->ij", [(), (2, 3)]),
    ("empty_dim", "ij,jk->ik", [(3, 0), (0, 4)]),
]
for dt in FLOATS:
    for nm, eq, shapes in EINSUM:
        case(f"einsum|{DT[dt]}_{nm}", "einsum", lambda *xs, eq=eq: torch.einsum(eq, *xs), [randn(*s, dtype=dt) for s in shapes], {"equation": eq})

# ---------------------------------------------------------------- repeat_interleave
for dt in FLOATS:
    n = DT[dt]
    x = randn(2, 3, dtype=dt)
    case(f"repeat_interleave|{n}_int_dim0", "repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=0), [x], {"repeats": 2, "dim": 0})
    case(f"repeat_interleave|{n}_int_dim1", "repeat_interleave", lambda x: torch.repeat_interleave(x, 3, dim=1), [x], {"repeats": 3, "dim": 1})
    case(f"repeat_interleave|{n}_int_dim_m1", "repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=-1), [x],
         {"repeats": 2, "dim": -1})
    case(f"repeat_interleave|{n}_int_flat", "repeat_interleave", lambda x: torch.repeat_interleave(x, 2), [x], {"repeats": 2, "dim": None})
    case(f"repeat_interleave|{n}_int_one", "repeat_interleave", lambda x: torch.repeat_interleave(x, 1, dim=1), [x], {"repeats": 1, "dim": 1})
    case(f"repeat_interleave|{n}_int_zero", "repeat_interleave", lambda x: torch.repeat_interleave(x, 0, dim=0), [x], {"repeats": 0, "dim": 0})
    case(f"repeat_interleave|{n}_gqa", "repeat_interleave", lambda x: torch.repeat_interleave(x, 3, dim=-3), [randn(2, 2, 3, 4, dtype=dt)],
         {"repeats": 3, "dim": -3})
    r = torch.tensor([1, 0, 2])
    case(f"repeat_interleave|{n}_tensor_dim1", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r, dim=1), [x, r], {"dim": 1})
    case(f"repeat_interleave|{n}_tensor_dim0", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r, dim=0),
         [x, torch.tensor([3, 1])], {"dim": 0})
    case(f"repeat_interleave|{n}_tensor_flat", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r),
         [x, torch.tensor([1, 2, 0, 1, 3, 1])], {"dim": None})
    case(f"repeat_interleave|{n}_tensor_one_count", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r, dim=1),
         [x, torch.tensor([2])], {"dim": 1})
    case(f"repeat_interleave|{n}_tensor_zero_dim", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r, dim=0),
         [x, torch.tensor(2)], {"dim": 0})
case("repeat_interleave|int64", "repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=1), [torch.randint(0, 9, (2, 3))],
     {"repeats": 2, "dim": 1})
case("repeat_interleave|scalar", "repeat_interleave", lambda x: torch.repeat_interleave(x, 3), [torch.tensor(1.5)], {"repeats": 3, "dim": None})
case("repeat_interleave|int32_repeats", "repeat_interleave_tensor", lambda x, r: torch.repeat_interleave(x, r, dim=0),
     [randn(3, 2), torch.tensor([2, 0, 1], dtype=torch.int32)], {"dim": 0})

# ---------------------------------------------------------------- masked_fill (out of place, broadcasting) and masked_fill_
for dt in FLOATS:
    n = DT[dt]
    case(f"masked_fill|{n}_same", "masked_fill", lambda x, m: x.masked_fill(m, -1.5), [randn(3, 4, dtype=dt), torch.rand(3, 4) > 0.5],
         {"value": -1.5})
    case(f"masked_fill|{n}_mask_bcast", "masked_fill", lambda x, m: x.masked_fill(m, 2.0), [randn(3, 4, dtype=dt), torch.rand(4) > 0.5],
         {"value": 2.0})
    case(f"masked_fill|{n}_self_bcast", "masked_fill", lambda x, m: x.masked_fill(m, 0.5), [randn(4, dtype=dt), torch.rand(3, 4) > 0.5],
         {"value": 0.5})
    case(f"masked_fill|{n}_causal_inf", "masked_fill", lambda x, m: x.masked_fill(m, -math.inf),
         [randn(2, 4, 4, dtype=dt), torch.ones(4, 4, dtype=torch.bool).triu(1)], {"value": "-inf"})
    case(f"masked_fill_|{n}_bcast", "masked_fill_", lambda x, m: (x * 1).masked_fill_(m, 3.0), [randn(2, 3, 4, dtype=dt), torch.rand(3, 1) > 0.5],
         {"value": 3.0})
case("masked_fill|int64", "masked_fill", lambda x, m: x.masked_fill(m, 7), [torch.randint(0, 5, (3, 4)), torch.rand(3, 4) > 0.5], {"value": 7})
case("masked_fill_|int64_float_value", "masked_fill_", lambda x, m: x.clone().masked_fill_(m, 1.5),
     [torch.randint(0, 5, (3, 4)), torch.rand(4) > 0.5], {"value": 1.5})
case("masked_fill_|bool", "masked_fill_", lambda x, m: x.clone().masked_fill_(m, True), [torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.5],
     {"value": True})

# ---------------------------------------------------------------- tanh-approximate GELU (GPT-2's), forward and gradient
wide = torch.tensor([-30.0, -8.0, -3.0, -1.5, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.5, 3.0, 8.0, 30.0])
for dt in FLOATS:
    case(f"gelu_tanh|{DT[dt]}_randn", "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [randn(4, 6, dtype=dt) * 2])
    case(f"gelu_tanh|{DT[dt]}_wide", "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [wide.to(dt)])

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sequence_ops.json")
with open(out, "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {out} ({os.path.getsize(out)} bytes)")
