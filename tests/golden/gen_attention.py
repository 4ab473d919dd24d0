#!/usr/bin/python3
"""Golden values for dp::scaled_dot_product_attention (include/dp/ops/attention.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_attention.py
Writes tests/golden/attention.json: {"cases": [...]}.

PyTorch 1.13 has no F.scaled_dot_product_attention, so the values come from the reference code of
PyTorch 2.x's documentation, computed in float64 (with _safe_softmax's rule: a row whose scores are
all -inf gives zeros and zero gradients):

    bias = 0 (L x S); is_causal: -inf where key j > query i (tril, top-left aligned)
    bool mask: -inf where False;  float mask: added
    enable_gqa: k, v = k.repeat_interleave(Hq // H, -3), v.repeat_interleave(Hq // Hv, -3)
    out = softmax(q @ k^T * scale + bias) @ v

Each case: "name", "dtype", "scale" (null: 1/sqrt(E)), "is_causal", "enable_gqa", the inputs
"q", "k", "v", optional "mask" (with "mask_grad": whether a float mask requires grad), "r" (the
loss is sum(out * r)), and the results "out" and "grads" {q, k, v[, mask]}. Inputs are tensors
{"dtype", "shape", "data"} or, for the long sequences (several kernel tiles, ragged last tiles),
formulas the test evaluates the same way: {"formula": "sin", "shape", "phase"} is
sin(0.731 * i + phase) for flat index i, rounded to the case's dtype; {"formula": "mask_mod5",
"shape", "dead_row"} is (7 i + 3 j) % 5 != 0, with row dead_row all False. Results of
float32 cases are rounded to float32 from the float64 computation.
"""
import json
import math
import os

import numpy
import torch

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.bool: "bool"}
INF = float("inf")


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:  # the shortest decimal that reads back as the same float32 (smaller JSON)
        data = [float(repr(numpy.float32(v))) for v in data]
    if t.dtype in (torch.float32, torch.float64):
        data = [v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan") for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


def sin_tensor(shape, phase, dtype):
    n = math.prod(shape)
    vals = [math.sin(0.731 * i + phase) for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(dtype)


def mod5_mask(L, S, dead_row):
    i = torch.arange(L).unsqueeze(1)
    j = torch.arange(S).unsqueeze(0)
    m = (7 * i + 3 * j) % 5 != 0
    m[dead_row] = False
    return m


def reference(q, k, v, mask, causal, scale, gqa):
    """The documentation's reference code in float64, with _safe_softmax."""
    L, S = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = torch.zeros(L, S, dtype=q.dtype)
    if causal:
        bias = bias.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -INF)
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = bias.masked_fill(~mask, -INF)
        else:
            bias = bias + mask
    if gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    w = q @ k.transpose(-2, -1) * scale + bias
    dead = (w == -INF).all(-1, keepdim=True)
    w = torch.softmax(w.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v


cases = []


def add_case(name, q, k, v, mask=None, mask_grad=False, causal=False, scale=None, gqa=False, dtype=torch.float32, formula=None):
    """q, k, v, mask: float64 (or bool) tensors holding values representable in `dtype`."""
    q, k, v = (t.to(dtype).to(torch.float64).requires_grad_(True) for t in (q, k, v))
    m = None
    if mask is not None:
        m = mask if mask.dtype == torch.bool else mask.to(dtype).to(torch.float64).requires_grad_(mask_grad)
    out = reference(q, k, v, m, causal, scale, gqa)
    if formula is not None:
        r = sin_tensor(list(out.shape), 0.4, dtype).to(torch.float64)
    else:
        r = torch.randn(out.shape, dtype=torch.float64).to(dtype).to(torch.float64)
    (out * r).sum().backward()
    c = {"name": name, "dtype": DT[dtype], "scale": scale, "is_causal": causal, "enable_gqa": gqa, "mask_grad": mask_grad}
    if formula is not None:
        c.update(formula)
    else:
        c.update({"q": t2j(q.to(dtype)), "k": t2j(k.to(dtype)), "v": t2j(v.to(dtype)), "r": t2j(r.to(dtype))})
        if m is not None:
            c["mask"] = t2j(m if m.dtype == torch.bool else m.to(dtype))
    c["out"] = t2j(out.to(dtype))
    grads = {"q": t2j(q.grad.to(dtype)), "k": t2j(k.grad.to(dtype)), "v": t2j(v.grad.to(dtype))}
    if mask_grad:
        grads["mask"] = t2j(m.grad.to(dtype))
    c["grads"] = grads
    cases.append(c)


def rn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


N, H, L, S, E, Ev = 2, 2, 4, 6, 4, 3

# Plain, both dtypes, default and explicit scale.
add_case("basic_f32", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev))
add_case("basic_f64_scale", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), scale=0.3, dtype=torch.float64)

# Bool masks of every broadcast form; the [L, S] one has a fully masked row.
m2 = torch.rand(L, S) > 0.3
m2[2] = False
add_case("bool_mask_ls", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=m2)
add_case("bool_mask_n1ls", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=torch.rand(N, 1, L, S) > 0.4)
add_case("bool_mask_1h1s", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=torch.rand(1, H, 1, S) > 0.4, dtype=torch.float64)
add_case("bool_mask_nhls_f64", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=torch.rand(N, H, L, S) > 0.5, dtype=torch.float64)

# Float masks (added, with gradients); -inf entries, one fully masked row.
fm = rn(L, S)
fm[1, 3] = -INF
fm[3] = -INF
add_case("float_mask_ls", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=fm, mask_grad=True)
add_case("float_mask_n1ls", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=rn(N, 1, L, S), mask_grad=True, dtype=torch.float64)
add_case("float_mask_1h1s", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=rn(1, H, 1, S), mask_grad=True)
add_case("float_mask_s", rn(N, H, L, E), rn(N, H, S, E), rn(N, H, S, Ev), mask=rn(S), mask_grad=True, dtype=torch.float64)

# Causal, L < S, L > S, L == S (top-left aligned).
add_case("causal_l_lt_s", rn(N, H, 4, E), rn(N, H, 7, E), rn(N, H, 7, Ev), causal=True)
add_case("causal_l_gt_s", rn(1, H, 7, E), rn(1, H, 4, E), rn(1, H, 4, Ev), causal=True, dtype=torch.float64)
add_case("causal_l_eq_s", rn(N, H, 6, E), rn(N, H, 6, E), rn(N, H, 6, Ev), causal=True)

# Grouped-query attention: 4 query heads over 2 key/value heads, and over 1.
add_case("gqa_4_2", rn(N, 4, L, E), rn(N, 2, S, E), rn(N, 2, S, Ev), gqa=True)
add_case("gqa_4_1_causal_f64", rn(1, 4, L, E), rn(1, 1, S, E), rn(1, 1, S, Ev), gqa=True, causal=True, dtype=torch.float64)

# Ranks: 2-D, 3-D, 5-D (with a mask broadcasting over two leading dims); key/value broadcasting
# over the batch (torch.matmul's rule).
add_case("rank2", rn(L, E), rn(S, E), rn(S, Ev))
add_case("rank3_mask", rn(3, L, E), rn(3, S, E), rn(3, S, Ev), mask=torch.rand(L, S) > 0.3, dtype=torch.float64)
add_case("rank5_mask", rn(2, 1, 2, L, E), rn(2, 1, 2, S, E), rn(2, 1, 2, S, Ev), mask=torch.rand(2, 1, 1, L, S) > 0.3)
add_case("kv_batch_broadcast", rn(N, H, L, E), rn(1, H, S, E), rn(1, H, S, Ev))

# Long sequences (the fused kernel's tiles, ragged last tiles): inputs from formulas.
def formula_case(name, shape_q, shape_k, shape_v, dtype, causal=False, mask_dead_row=None):
    q, k, v = sin_tensor(shape_q, 0.1, dtype), sin_tensor(shape_k, 0.2, dtype), sin_tensor(shape_v, 0.3, dtype)
    spec = {"q": {"formula": "sin", "shape": shape_q, "phase": 0.1}, "k": {"formula": "sin", "shape": shape_k, "phase": 0.2},
            "v": {"formula": "sin", "shape": shape_v, "phase": 0.3}, "r": {"formula": "sin", "phase": 0.4}}
    mask = None
    if mask_dead_row is not None:
        mask = mod5_mask(shape_q[-2], shape_k[-2], mask_dead_row)
        spec["mask"] = {"formula": "mask_mod5", "shape": [shape_q[-2], shape_k[-2]], "dead_row": mask_dead_row}
    add_case(name, q.to(torch.float64), k.to(torch.float64), v.to(torch.float64), mask=mask, causal=causal, dtype=dtype,
             formula=spec)


formula_case("long_f32", [300, 2], [517, 2], [517, 3], torch.float32)
formula_case("long_causal_f32", [1, 1, 300, 2], [1, 1, 517, 2], [1, 1, 517, 3], torch.float32, causal=True)
formula_case("long_causal_l_gt_s_f32", [517, 2], [300, 2], [300, 3], torch.float32, causal=True)
formula_case("long_mask_f64", [300, 2], [517, 2], [517, 2], torch.float64, mask_dead_row=17)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention.json")
with open(path, "w") as f:
    json.dump({"generator": "tests/golden/gen_attention.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {path}")
