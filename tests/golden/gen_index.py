#!/usr/bin/python3
"""Golden values for the indexing ops: index_select, gather, scatter_add, index_add, embedding,
one_hot, masked_fill.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_index.py
Writes tests/golden/index.json: {"cases": [{"name", "inputs": [tensor...], "output": tensor,
"grad_output": tensor, "grads": [tensor or null...], "args": {...}}]} where a tensor is
{"dtype", "shape", "data"} (data flattened row-major). Inputs are stored contiguous; a case whose
name ends in "_t" applies the view noted beside it in the C++ test (tests/ops/test_index.cpp).
"grads" are d(sum(output * grad_output)) / d(input) for the float64 inputs (null for others).
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


def tj(t):
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        data = t.float().reshape(-1).tolist()
    else:
        data = t.reshape(-1).tolist()
    out = []
    for v in data:
        if isinstance(v, float) and not math.isfinite(v):
            v = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        elif isinstance(v, float) and t.dtype != torch.float64:
            v = float("%.9g" % v)
        out.append(v)
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": out}


cases = []


def add(name, fn, inputs, prep=None, args=None, grads=True):
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
        need = [l for l in leaves if l.requires_grad]
        gs = iter(torch.autograd.grad(out, need, go, allow_unused=True))
        grads_out = []
        for l in leaves:
            if l.requires_grad:
                g = next(gs)
                grads_out.append(tj(g if g is not None else torch.zeros_like(l)))
            else:
                grads_out.append(None)
        c["grad_output"] = tj(go)
        c["grads"] = grads_out
    cases.append(c)


D = torch.float64
L = torch.int64


def rnd(*shape, dtype=D):
    return torch.randn(shape, dtype=torch.float64).to(dtype)


def idx(*values, dtype=L):
    return torch.tensor(values, dtype=dtype)


# --------------------------------------------------------------------------------- index_select
add("index_select_dim0", lambda a, i: torch.index_select(a, 0, i), [rnd(4, 3), idx(3, 0, 3, 1)], args={"dim": 0})
add("index_select_dim1", lambda a, i: torch.index_select(a, 1, i), [rnd(2, 5, 3), idx(4, 4, 0)], args={"dim": 1})
add("index_select_dim_neg", lambda a, i: torch.index_select(a, -1, i), [rnd(2, 3, 4), idx(2, 1, dtype=torch.int32)], args={"dim": -1})
add("index_select_t", lambda a, i: torch.index_select(a, 0, i), [rnd(3, 4), idx(1, 2, 1)], prep=lambda a, i: (a.t(), i),
    args={"dim": 0})  # a.t()
add("index_select_empty_index", lambda a, i: torch.index_select(a, 0, i), [rnd(3, 2), torch.zeros(0, dtype=L)], args={"dim": 0})
add("index_select_int64_values", lambda a, i: torch.index_select(a, 0, i), [torch.arange(12).reshape(4, 3), idx(2, 2, 0)],
    args={"dim": 0}, grads=False)
add("index_select_f32", lambda a, i: torch.index_select(a, 1, i), [rnd(3, 6, dtype=torch.float32), idx(5, 0, 2)], args={"dim": 1})

# --------------------------------------------------------------------------------------- gather
add("gather_dim0", lambda a, i: torch.gather(a, 0, i), [rnd(3, 4), torch.tensor([[0, 2, 1, 0], [2, 2, 0, 1]])], args={"dim": 0})
add("gather_dim1", lambda a, i: torch.gather(a, 1, i), [rnd(3, 4), torch.tensor([[3, 0], [1, 1], [0, 2]])], args={"dim": 1})
add("gather_smaller_index", lambda a, i: torch.gather(a, 1, i), [rnd(3, 5), torch.tensor([[4], [0]])], args={"dim": 1})
add("gather_3d", lambda a, i: torch.gather(a, 2, i), [rnd(2, 3, 4), torch.randint(0, 4, (2, 3, 2))], args={"dim": 2})
add("gather_t", lambda a, i: torch.gather(a, 0, i), [rnd(4, 3), torch.tensor([[1, 0, 2, 2], [2, 2, 0, 1]])],
    prep=lambda a, i: (a.t(), i), args={"dim": 0})  # a.t()

# ---------------------------------------------------------------------------------- scatter_add
add("scatter_add_dim0_dups", lambda s, i, src: torch.scatter_add(s, 0, i, src),
    [rnd(3, 4), torch.tensor([[0, 1, 2, 0], [0, 0, 2, 2]]), rnd(2, 4)], args={"dim": 0})
add("scatter_add_dim1", lambda s, i, src: torch.scatter_add(s, 1, i, src),
    [rnd(2, 5), torch.tensor([[4, 4, 1], [0, 3, 0]]), rnd(2, 3)], args={"dim": 1})
add("scatter_add_index_smaller", lambda s, i, src: torch.scatter_add(s, 1, i, src),
    [rnd(3, 4), torch.tensor([[0, 3], [1, 1]]), rnd(2, 2)], args={"dim": 1})
add("scatter_add_int64", lambda s, i, src: torch.scatter_add(s, 0, i, src),
    [torch.arange(6).reshape(2, 3), torch.tensor([[1, 0, 1], [1, 1, 0]]), torch.arange(10, 16).reshape(2, 3)], args={"dim": 0}, grads=False)

# ------------------------------------------------------------------------------------ index_add
add("index_add_dim0_dups", lambda s, i, src: torch.index_add(s, 0, i, src), [rnd(4, 3), idx(1, 3, 1), rnd(3, 3)], args={"dim": 0})
add("index_add_dim1", lambda s, i, src: torch.index_add(s, 1, i, src), [rnd(2, 4, 2), idx(0, 0, 3, 2, 0), rnd(2, 5, 2)], args={"dim": 1})
add("index_add_int32_index", lambda s, i, src: torch.index_add(s, 0, i, src), [rnd(3), idx(2, 2, dtype=torch.int32), rnd(2)], args={"dim": 0})
add("index_add_t", lambda s, i, src: torch.index_add(s, 0, i, src), [rnd(3, 4), idx(2, 0), rnd(3, 2)],
    prep=lambda s, i, src: (s.t(), i, src.t()), args={"dim": 0})  # self.t(), src.t()

# ------------------------------------------------------------------------------------ embedding
add("embedding_2d_indices", lambda w, i: F.embedding(i, w), [rnd(6, 3), torch.tensor([[0, 5, 2], [2, 2, 1]])])
add("embedding_padding", lambda w, i: F.embedding(i, w, padding_idx=2), [rnd(5, 4), torch.tensor([2, 0, 2, 4, 0])],
    args={"padding_idx": 2})
add("embedding_int32", lambda w, i: F.embedding(i, w), [rnd(4, 2, dtype=torch.float32), idx(3, 0, 3, dtype=torch.int32)])
add("embedding_scalar_index", lambda w, i: F.embedding(i, w), [rnd(4, 3), torch.tensor(1)])
add("embedding_wt", lambda w, i: F.embedding(i, w), [rnd(3, 5), idx(4, 0, 4)], prep=lambda w, i: (w.t(), i))  # weight.t()

# -------------------------------------------------------------------------------------- one_hot
add("one_hot_explicit", lambda i: F.one_hot(i, 5), [torch.tensor([[0, 3], [4, 1]])], args={"num_classes": 5}, grads=False)
add("one_hot_inferred", lambda i: F.one_hot(i), [torch.tensor([2, 0, 1, 2])], args={"num_classes": -1}, grads=False)
add("one_hot_empty", lambda i: F.one_hot(i, 3), [torch.zeros(0, dtype=L)], args={"num_classes": 3}, grads=False)

# ---------------------------------------------------------------------------------- masked_fill
add("masked_fill_same", lambda a, m: a.masked_fill(m, -2.5), [rnd(3, 4), torch.rand(3, 4) > 0.5], args={"value": -2.5})
add("masked_fill_bcast_mask", lambda a, m: a.masked_fill(m, 7.0), [rnd(3, 4), torch.tensor([True, False, False, True])], args={"value": 7.0})
add("masked_fill_bcast_self", lambda a, m: a.masked_fill(m, 1.5), [rnd(3, 1), torch.rand(3, 4) > 0.5], args={"value": 1.5})
add("masked_fill_int64", lambda a, m: a.masked_fill(m, 9), [torch.arange(6).reshape(2, 3), torch.tensor([[True], [False]])],
    args={"value": 9}, grads=False)
add("masked_fill_f32_neg_inf", lambda a, m: a.masked_fill(m, float("-inf")), [rnd(2, 3, dtype=torch.float32), torch.tensor([False, True, True])],
    args={"value": "-inf"}, grads=False)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "index.json"), "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases, {os.path.getsize(os.path.join(here, 'index.json'))} bytes")
