#!/usr/bin/python3
"""Golden values for matrix products: mm, bmm, addmm, matmul, linear, dot, outer.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_linalg.py
Writes tests/golden/linalg.json: {"cases": [{"name", "inputs": [tensor...], "output": tensor,
"grad_output": tensor, "grads": [tensor or null...], "args": {...}}]} where a tensor is
{"dtype", "shape", "data"} (data flattened row-major). Inputs are stored contiguous; a case whose
name says "_t" / "_noncontig" / ... applies that view in the C++ test (tests/ops/test_linalg.cpp)
exactly as `prep` does here. "grads" are d(sum(output * grad_output)) / d(input) for the float64
inputs (null for the others). float16 products are computed in float32 and rounded (PyTorch 1.13
has no CPU half GEMM; dparallel computes them the same way).
"""
import json
import math
import os

import torch
import torch.nn.functional as F

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
        return float("%.9g" % v) if not isinstance(v, bool) else v
    return v


def tj(t):
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        data = t.float().reshape(-1).tolist()
    else:
        data = t.reshape(-1).tolist()
    if t.dtype == torch.float64:
        data = [float(repr(v)) if isinstance(v, float) and math.isfinite(v) else num(v) for v in data]
    else:
        data = [num(v) for v in data]
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": data}


cases = []


def rnd(*shape, dtype=torch.float64):
    if dtype in (torch.int64, torch.int32):
        return torch.randint(-5, 6, tuple(shape), dtype=dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, tuple(shape), dtype=dtype)
    return torch.randn(shape, dtype=torch.float64).to(dtype)


def add(name, fn, inputs, prep=None, args=None, grads=True):
    """fn(*prepared_inputs) -> output; prep maps the stored (contiguous) inputs to what fn gets."""
    stored = [i.detach().clone() for i in inputs]
    leaves = []
    for i in stored:
        leaf = i.clone()
        if grads and leaf.dtype == torch.float64:
            leaf.requires_grad_(True)
        leaves.append(leaf)
    used = prep(*leaves) if prep else leaves
    out = fn(*used)
    c = {"name": name, "inputs": [tj(i) for i in stored], "output": tj(out)}
    if args:
        c["args"] = args
    if grads and out.requires_grad:
        go = torch.randn(out.shape, dtype=out.dtype)
        gs = torch.autograd.grad(out, [l for l in leaves if l.requires_grad], go, allow_unused=True)
        it = iter(gs)
        c["grad_output"] = tj(go)
        grads_out = []
        for l in leaves:
            if l.requires_grad:
                g = next(it)
                grads_out.append(tj(g if g is not None else torch.zeros_like(l)))
            else:
                grads_out.append(None)
        c["grads"] = grads_out
    cases.append(c)


D = torch.float64
f32 = torch.float32

# ------------------------------------------------------------------------------------------- mm
add("mm_f32", torch.mm, [rnd(3, 4, dtype=f32), rnd(4, 5, dtype=f32)])
add("mm_f64", torch.mm, [rnd(3, 4), rnd(4, 5)])
add("mm_a_t", torch.mm, [rnd(4, 3), rnd(4, 5)], prep=lambda a, b: (a.t(), b))          # a given as [k, n]
add("mm_b_t", torch.mm, [rnd(3, 4), rnd(5, 4)], prep=lambda a, b: (a, b.t()))
add("mm_both_t", torch.mm, [rnd(4, 3), rnd(5, 4)], prep=lambda a, b: (a.t(), b.t()))
add("mm_f32_both_t", torch.mm, [rnd(40, 30, dtype=f32), rnd(50, 40, dtype=f32)], prep=lambda a, b: (a.t(), b.t()))
add("mm_noncontig", torch.mm, [rnd(3, 8), rnd(4, 10)],                                  # every other column / row
    prep=lambda a, b: (a[:, ::2], b[:, 1::2]))
add("mm_int64", torch.mm, [rnd(3, 4, dtype=torch.int64), rnd(4, 5, dtype=torch.int64)], grads=False)
add("mm_int32", torch.mm, [rnd(3, 4, dtype=torch.int32), rnd(4, 5, dtype=torch.int32)], grads=False)
add("mm_uint8_wrap", torch.mm, [rnd(3, 4, dtype=torch.uint8), rnd(4, 5, dtype=torch.uint8)], grads=False)
a16, b16 = rnd(3, 4, dtype=torch.float16), rnd(4, 5, dtype=torch.float16)
add("mm_f16", lambda a, b: (a.float() @ b.float()).half(), [a16, b16], grads=False)
abf, bbf = rnd(3, 4, dtype=torch.bfloat16), rnd(4, 5, dtype=torch.bfloat16)
add("mm_bf16", lambda a, b: (a.float() @ b.float()).bfloat16(), [abf, bbf], grads=False)
add("mm_empty_rows", torch.mm, [rnd(0, 3), rnd(3, 4)], grads=False)
add("mm_empty_k", torch.mm, [rnd(3, 0), rnd(0, 4)], grads=False)
add("mm_vector_shapes", torch.mm, [rnd(1, 6), rnd(6, 1)])
add("mm_large_f32", torch.mm, [rnd(33, 65, dtype=f32), rnd(65, 17, dtype=f32)])

# ------------------------------------------------------------------------------------------ bmm
add("bmm_f64", torch.bmm, [rnd(2, 3, 4), rnd(2, 4, 5)])
add("bmm_f32_b_t", torch.bmm, [rnd(3, 2, 4, dtype=f32), rnd(3, 5, 4, dtype=f32)], prep=lambda a, b: (a, b.transpose(1, 2)))
add("bmm_a_t", torch.bmm, [rnd(2, 4, 3), rnd(2, 4, 5)], prep=lambda a, b: (a.transpose(1, 2), b))
add("bmm_int64", torch.bmm, [rnd(2, 3, 4, dtype=torch.int64), rnd(2, 4, 2, dtype=torch.int64)], grads=False)
add("bmm_batch_permuted", torch.bmm, [rnd(3, 2, 4), rnd(2, 4, 5)], prep=lambda a, b: (a.permute(1, 0, 2), b))  # a's batch dim is not outermost
add("bmm_empty_k", torch.bmm, [rnd(2, 3, 0), rnd(2, 0, 4)], grads=False)

# ---------------------------------------------------------------------------------------- addmm
add("addmm_bias_row", torch.addmm, [rnd(5), rnd(3, 4), rnd(4, 5)])
add("addmm_full_beta_alpha", lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2.0), [rnd(3, 5), rnd(3, 4), rnd(4, 5)],
    args={"beta": 0.5, "alpha": 2.0})
add("addmm_col_bias", torch.addmm, [rnd(3, 1), rnd(3, 4), rnd(4, 5)])
add("addmm_scalar_bias", torch.addmm, [rnd(), rnd(3, 4), rnd(4, 5)])
add("addmm_beta0", lambda s, a, b: torch.addmm(s, a, b, beta=0.0), [torch.full((3, 5), float("nan"), dtype=D), rnd(3, 4), rnd(4, 5)],
    args={"beta": 0.0, "alpha": 1.0}, grads=False)
add("addmm_f32_wt", torch.addmm, [rnd(5, dtype=f32), rnd(3, 4, dtype=f32), rnd(5, 4, dtype=f32)], prep=lambda s, a, w: (s, a, w.t()))
add("addmm_int64", lambda s, a, b: torch.addmm(s, a, b, beta=2, alpha=3),
    [rnd(5, dtype=torch.int64), rnd(3, 4, dtype=torch.int64), rnd(4, 5, dtype=torch.int64)], args={"beta": 2, "alpha": 3}, grads=False)
add("addmm_empty_k", lambda s, a, b: torch.addmm(s, a, b, beta=0.5), [rnd(3, 4), rnd(3, 0), rnd(0, 4)], args={"beta": 0.5, "alpha": 1.0})

# --------------------------------------------------------------------------------------- matmul
add("matmul_1d_1d", torch.matmul, [rnd(4), rnd(4)])
add("matmul_2d_1d", torch.matmul, [rnd(3, 4), rnd(4)])
add("matmul_1d_2d", torch.matmul, [rnd(4), rnd(4, 5)])
add("matmul_2d_2d", torch.matmul, [rnd(3, 4), rnd(4, 5)])
add("matmul_3d_2d", torch.matmul, [rnd(2, 3, 4), rnd(4, 5)])
add("matmul_3d_2d_t", torch.matmul, [rnd(2, 3, 4), rnd(5, 4)], prep=lambda a, w: (a, w.t()))
add("matmul_3d_2d_noncontig", torch.matmul, [rnd(3, 2, 4), rnd(4, 5)], prep=lambda a, b: (a.transpose(0, 1), b))
add("matmul_2d_3d", torch.matmul, [rnd(3, 4), rnd(2, 4, 5)])
add("matmul_3d_1d", torch.matmul, [rnd(2, 3, 4), rnd(4)])
add("matmul_1d_3d", torch.matmul, [rnd(4), rnd(2, 4, 5)])
add("matmul_3d_3d", torch.matmul, [rnd(2, 3, 4), rnd(2, 4, 5)])
add("matmul_broadcast", torch.matmul, [rnd(2, 1, 3, 4), rnd(5, 4, 2)])
add("matmul_broadcast_batch1", torch.matmul, [rnd(1, 3, 4), rnd(3, 4, 2)])
add("matmul_4d_4d", torch.matmul, [rnd(2, 3, 2, 4), rnd(2, 3, 4, 3)])
add("matmul_4d_1d", torch.matmul, [rnd(2, 2, 3, 4), rnd(4)])
add("matmul_f32_3d_3d_t", torch.matmul, [rnd(2, 3, 4, dtype=f32), rnd(2, 5, 4, dtype=f32)], prep=lambda a, b: (a, b.transpose(-1, -2)))
add("matmul_int64_3d_2d", torch.matmul, [rnd(2, 3, 4, dtype=torch.int64), rnd(4, 2, dtype=torch.int64)], grads=False)
add("matmul_empty_batch", torch.matmul, [rnd(0, 3, 4), rnd(4, 5)], grads=False)

# --------------------------------------------------------------------------------------- linear
add("linear_2d_bias", F.linear, [rnd(3, 4), rnd(5, 4), rnd(5)])
add("linear_2d_nobias", F.linear, [rnd(3, 4), rnd(5, 4)])
add("linear_3d_bias", F.linear, [rnd(2, 3, 4), rnd(5, 4), rnd(5)])
add("linear_1d_bias", F.linear, [rnd(4), rnd(5, 4), rnd(5)])
add("linear_4d_nobias", F.linear, [rnd(2, 1, 3, 4), rnd(2, 4)])
add("linear_noncontig_x", F.linear, [rnd(4, 3), rnd(5, 4), rnd(5)], prep=lambda x, w, b: (x.t(), w, b))
add("linear_wt_view", F.linear, [rnd(3, 4), rnd(4, 5), rnd(5)], prep=lambda x, wt, b: (x, wt.t(), b))  # w is a transposed view
add("linear_f32", F.linear, [rnd(8, 16, dtype=f32), rnd(12, 16, dtype=f32), rnd(12, dtype=f32)])
add("linear_empty_in", F.linear, [rnd(3, 0), rnd(5, 0), rnd(5)], grads=False)

# ---------------------------------------------------------------------------------- dot / outer
add("dot_f64", torch.dot, [rnd(5), rnd(5)])
add("dot_f32_strided", torch.dot, [rnd(10, dtype=f32), rnd(5, dtype=f32)], prep=lambda a, b: (a[::2], b))
add("dot_int64", torch.dot, [rnd(6, dtype=torch.int64), rnd(6, dtype=torch.int64)], grads=False)
add("dot_empty", torch.dot, [rnd(0), rnd(0)], grads=False)
add("outer_f64", torch.outer, [rnd(3), rnd(4)])
add("outer_mixed", torch.outer, [rnd(3, dtype=f32), rnd(4)])
add("outer_int32", torch.outer, [rnd(3, dtype=torch.int32), rnd(4, dtype=torch.int32)], grads=False)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "linalg.json"), "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases, {os.path.getsize(os.path.join(here, 'linalg.json'))} bytes")
