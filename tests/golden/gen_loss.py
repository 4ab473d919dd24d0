#!/usr/bin/python3
"""Golden values for the loss functions (include/dp/ops/loss.h) and their gradients.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_loss.py
Writes tests/golden/loss.json: {"cases": [...]} where each case is
  {"name", "op", "args": {"reduction", "ignore_index", "label_smoothing"},
   "input", "target", optional "weight", "pos_weight" (tensors),
   "output": tensor, optional "grad_output": tensor, "grads": {"input": tensor, "target": tensor}}
and a tensor is {"dtype", "shape", "data"} (data flattened row-major; non-finite floats as strings).
"grads" are d(sum(output * grad_output)) / d(input or target), for the arguments PyTorch
differentiates (target: mse_loss, l1_loss, binary_cross_entropy(_with_logits), cross_entropy with
class probabilities).
"""
import json
import math
import os

import numpy
import torch
import torch.nn.functional as F

torch.manual_seed(0)

DTYPES = {torch.uint8: "uint8", torch.int64: "int64", torch.float32: "float32", torch.float64: "float64"}
REDUCTIONS = ("none", "mean", "sum")


def num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def short(v):
    # The shortest decimal that reads back as the same float32 value (keeps the JSON small).
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    return float(repr(numpy.float32(v)))


def tj(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:
        data = [short(v) for v in data]
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data]}


def call(op, x, t, w, pw, args):
    r = args["reduction"]
    if op == "mse_loss":
        return F.mse_loss(x, t, reduction=r)
    if op == "l1_loss":
        return F.l1_loss(x, t, reduction=r)
    if op == "binary_cross_entropy":
        return F.binary_cross_entropy(x, t, weight=w, reduction=r)
    if op == "binary_cross_entropy_with_logits":
        return F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw, reduction=r)
    if op == "nll_loss":
        return F.nll_loss(x, t, weight=w, ignore_index=args["ignore_index"], reduction=r)
    if op == "cross_entropy":
        return F.cross_entropy(x, t, weight=w, ignore_index=args["ignore_index"], reduction=r,
                               label_smoothing=args["label_smoothing"])
    raise ValueError(op)


cases = []
names = set()


def gen_input(shape, scale):
    # x[i] = float32((((i * 7919) % 10007) / 10007 - 0.3) * scale): both sides build it.
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    return (((i * 7919) % 10007 / 10007 - 0.3) * scale).float().reshape(shape)


def gen_target(shape, kind, classes):
    # index: t[i] = (i * 31) % classes (int64); prob: t[i] = float32(((i * 31) % 101) / 5050).
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.int64)
    if kind == "index":
        return ((i * 31) % classes).reshape(shape)
    return (((i * 31) % 101).double() / 5050).float().reshape(shape)


def add(name, op, x, t, w=None, pw=None, reduction="mean", ignore_index=-100, label_smoothing=0.0, grad=True, gen=None,
        stride=1):
    """gen = {"input": {"shape", "scale"}, "target": {"shape", "kind", "classes"}}: x and t come from the
    formulas above and are not stored; stride > 1 stores every stride-th element of the gradients."""
    assert name not in names, name
    names.add(name)
    args = {"reduction": reduction, "ignore_index": ignore_index, "label_smoothing": label_smoothing}
    c = {"name": name, "op": op, "args": args}
    if gen is None:
        c["input"] = tj(x)
        c["target"] = tj(t)
    else:
        c["gen"] = gen
        x = gen_input(gen["input"]["shape"], gen["input"]["scale"])
        g = gen["target"]
        t = gen_target(g["shape"], g["kind"], g["classes"])
    if stride > 1:
        c["grads_stride"] = stride
    if w is not None:
        c["weight"] = tj(w)
    if pw is not None:
        c["pos_weight"] = tj(pw)
    x = x.detach().clone().requires_grad_(grad)
    t_grad = grad and t.is_floating_point() and op != "nll_loss" and not (op == "cross_entropy" and t.shape != x.shape)
    t = t.detach().clone().requires_grad_(t_grad)
    out = call(op, x, t, w, pw, args)
    c["output"] = tj(out)
    if grad:
        go = torch.randn(out.shape, dtype=out.dtype)
        wrt = [x] + ([t] if t_grad else [])
        gs = torch.autograd.grad(out, wrt, go)
        c["grad_output"] = tj(go)
        pick = (lambda g: g.reshape(-1)[::stride]) if stride > 1 else (lambda g: g)
        c["grads"] = {"input": tj(pick(gs[0]))}
        if t_grad:
            c["grads"]["target"] = tj(pick(gs[1]))
    cases.append(c)


def rnd(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dtype)


def prob(*shape, dtype=torch.float32):
    return torch.rand(*shape, dtype=torch.float64).clamp(0.02, 0.98).to(dtype)


def tag(dtype):
    return "f64" if dtype == torch.float64 else "f32"


# ---------------------------------------------------------------- mse / l1
for op in ("mse_loss", "l1_loss"):
    for dt in (torch.float32, torch.float64):
        for r in REDUCTIONS:
            add(f"{op}_{tag(dt)}_{r}", op, rnd(3, 4, dtype=dt), rnd(3, 4, dtype=dt), reduction=r)
    add(f"{op}_3d", op, rnd(2, 3, 5), rnd(2, 3, 5), reduction="mean")
    add(f"{op}_0dim", op, rnd(), rnd(), reduction="none")
    add(f"{op}_0dim_mean", op, rnd(), rnd(), reduction="mean")
    add(f"{op}_long", op, rnd(300), rnd(300), reduction="sum")
    add(f"{op}_large", op, rnd(37, 29, scale=1e4), rnd(37, 29, scale=1e4), reduction="mean")
    add(f"{op}_empty_mean", op, rnd(0, 3), rnd(0, 3), reduction="mean", grad=False)
    add(f"{op}_empty_sum", op, rnd(0, 3), rnd(0, 3), reduction="sum", grad=False)
# |x - t| = 0: the gradient is sign(0) = 0.
add("l1_loss_ties", "l1_loss", torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.0, 3.0]), reduction="sum")

# ---------------------------------------------------------------- binary_cross_entropy
for dt in (torch.float32, torch.float64):
    for r in REDUCTIONS:
        add(f"bce_{tag(dt)}_{r}", "binary_cross_entropy", prob(4, 5, dtype=dt), prob(4, 5, dtype=dt), reduction=r)
        add(f"bce_{tag(dt)}_{r}_w", "binary_cross_entropy", prob(4, 5, dtype=dt), prob(4, 5, dtype=dt),
            w=torch.rand(5, dtype=dt), reduction=r)
add("bce_hard_targets", "binary_cross_entropy", prob(6, 3), torch.randint(0, 2, (6, 3)).float(), reduction="mean")
add("bce_w_full", "binary_cross_entropy", prob(3, 4), prob(3, 4), w=torch.rand(3, 4), reduction="sum")
add("bce_w_col", "binary_cross_entropy", prob(3, 4), prob(3, 4), w=torch.rand(3, 1), reduction="none")
add("bce_w_scalar", "binary_cross_entropy", prob(3, 4), prob(3, 4), w=torch.tensor(0.7), reduction="mean")
add("bce_w_mid", "binary_cross_entropy", prob(2, 3, 4), prob(2, 3, 4), w=torch.rand(3, 1), reduction="mean")
add("bce_3d", "binary_cross_entropy", prob(2, 3, 4), prob(2, 3, 4), reduction="none")
add("bce_long", "binary_cross_entropy", prob(301), prob(301), reduction="sum")
# Inputs at exactly 0 and 1: each log is clamped at -100; the gradient divides by max(x(1-x), 1e-12);
# the target gradient -logit(x) is infinite.
ext_x = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1e-30, 1 - 1e-7])
ext_t = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5, 0.5, 1.0, 0.0])
add("bce_extremes_none", "binary_cross_entropy", ext_x, ext_t, reduction="none")
add("bce_extremes_sum", "binary_cross_entropy", ext_x, ext_t, reduction="sum")
add("bce_extremes_f64", "binary_cross_entropy", ext_x.double(), ext_t.double(), reduction="mean")

# ---------------------------------------------------------------- binary_cross_entropy_with_logits
BL = "binary_cross_entropy_with_logits"
for dt in (torch.float32, torch.float64):
    for r in REDUCTIONS:
        add(f"bcel_{tag(dt)}_{r}", BL, rnd(4, 5, dtype=dt, scale=3), prob(4, 5, dtype=dt), reduction=r)
        add(f"bcel_{tag(dt)}_{r}_w", BL, rnd(4, 5, dtype=dt, scale=3), prob(4, 5, dtype=dt), w=torch.rand(5, dtype=dt), reduction=r)
        add(f"bcel_{tag(dt)}_{r}_pw", BL, rnd(4, 5, dtype=dt, scale=3), prob(4, 5, dtype=dt),
            pw=torch.rand(5, dtype=dt) * 3, reduction=r)
        add(f"bcel_{tag(dt)}_{r}_w_pw", BL, rnd(4, 5, dtype=dt, scale=3), prob(4, 5, dtype=dt), w=torch.rand(4, 1, dtype=dt),
            pw=torch.rand(5, dtype=dt) * 3, reduction=r)
add("bcel_pw_3d", BL, rnd(2, 3, 4), prob(2, 3, 4), pw=torch.rand(4) * 2, reduction="none")
add("bcel_w_full_pw_scalar", BL, rnd(2, 3), prob(2, 3), w=torch.rand(2, 3), pw=torch.tensor([2.5]), reduction="sum")
add("bcel_long", BL, rnd(300, scale=4), prob(300), reduction="mean")
# Large logits: the softplus form stays finite and exact.
big_x = torch.tensor([100.0, -100.0, 1e4, -1e4, 30.0, -30.0, 88.0, -88.0, 0.0])
big_t = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.7, 1.0, 0.0, 0.5])
add("bcel_large_none", BL, big_x, big_t, reduction="none")
add("bcel_large_pw", BL, big_x, big_t, pw=torch.tensor(3.0), reduction="sum")
add("bcel_large_f64", BL, big_x.double(), big_t.double(), reduction="none")

# ---------------------------------------------------------------- nll_loss
NL = "nll_loss"


def logp(*shape, dtype=torch.float32, dim=1):
    return torch.log_softmax(torch.randn(*shape, dtype=torch.float64), dim=dim).to(dtype)


tgt5 = torch.tensor([0, 3, 1, 4, 2, 3])
tgt5_ign = torch.tensor([0, -100, 1, 4, -100, 3])
for dt in (torch.float32, torch.float64):
    for r in REDUCTIONS:
        add(f"nll_{tag(dt)}_{r}", NL, logp(6, 5, dtype=dt), tgt5, reduction=r)
        add(f"nll_{tag(dt)}_{r}_w", NL, logp(6, 5, dtype=dt), tgt5, w=torch.rand(5, dtype=dt), reduction=r)
        add(f"nll_{tag(dt)}_{r}_ign", NL, logp(6, 5, dtype=dt), tgt5_ign, reduction=r)
        add(f"nll_{tag(dt)}_{r}_w_ign", NL, logp(6, 5, dtype=dt), tgt5_ign, w=torch.rand(5, dtype=dt), reduction=r)
add("nll_ignore_class", NL, logp(6, 5), tgt5, w=torch.rand(5), ignore_index=3, reduction="mean")
add("nll_ignore_neg1", NL, logp(6, 5), torch.tensor([0, -1, 1, 4, -1, 3]), ignore_index=-1, reduction="none")
add("nll_all_ignored", NL, logp(3, 4), torch.tensor([-100, -100, -100]), reduction="mean")
add("nll_all_ignored_sum", NL, logp(3, 4), torch.tensor([-100, -100, -100]), reduction="sum")
add("nll_uint8_target", NL, logp(4, 3), torch.tensor([0, 2, 1, 1], dtype=torch.uint8), reduction="mean")
for r in REDUCTIONS:
    add(f"nll_1d_{r}", NL, logp(5, dim=0), torch.tensor(3), reduction=r)
    add(f"nll_3d_{r}", NL, logp(2, 4, 3), torch.randint(0, 4, (2, 3)), w=torch.rand(4), reduction=r)
    add(f"nll_4d_{r}", NL, logp(2, 3, 4, 5), torch.randint(0, 3, (2, 4, 5)), reduction=r)
add("nll_5d_ign_w", NL, logp(2, 3, 2, 3, 2), torch.randint(0, 3, (2, 2, 3, 2)).masked_fill(torch.rand(2, 2, 3, 2) < 0.3, -100),
    w=torch.rand(3), reduction="mean")
add("nll_4d_f64_sum", NL, logp(2, 3, 4, 5, dtype=torch.float64), torch.randint(0, 3, (2, 4, 5)), reduction="sum")
add("nll_empty_mean", NL, logp(0, 4), torch.zeros(0, dtype=torch.int64), reduction="mean", grad=False)
add("nll_empty_sum", NL, logp(0, 4), torch.zeros(0, dtype=torch.int64), reduction="sum", grad=False)

# ---------------------------------------------------------------- cross_entropy, class indices
CE = "cross_entropy"
for dt in (torch.float32, torch.float64):
    for r in REDUCTIONS:
        for ls in (0.0, 0.1):
            lt = f"_ls{int(ls * 100)}" if ls else ""
            add(f"ce_{tag(dt)}_{r}{lt}", CE, rnd(6, 5, dtype=dt, scale=2), tgt5, reduction=r, label_smoothing=ls)
            add(f"ce_{tag(dt)}_{r}{lt}_w", CE, rnd(6, 5, dtype=dt, scale=2), tgt5, w=torch.rand(5, dtype=dt), reduction=r,
                label_smoothing=ls)
            add(f"ce_{tag(dt)}_{r}{lt}_ign", CE, rnd(6, 5, dtype=dt, scale=2), tgt5_ign, reduction=r, label_smoothing=ls)
            add(f"ce_{tag(dt)}_{r}{lt}_w_ign", CE, rnd(6, 5, dtype=dt, scale=2), tgt5_ign, w=torch.rand(5, dtype=dt), reduction=r,
                label_smoothing=ls)
add("ce_ls30_w_ignore_class", CE, rnd(6, 5), tgt5, w=torch.rand(5), ignore_index=3, reduction="mean", label_smoothing=0.3)
add("ce_ls100", CE, rnd(6, 5), tgt5, reduction="mean", label_smoothing=1.0)
add("ce_ls100_w_sum", CE, rnd(6, 5), tgt5_ign, w=torch.rand(5), reduction="sum", label_smoothing=1.0)
add("ce_all_ignored", CE, rnd(3, 4), torch.tensor([-100, -100, -100]), reduction="mean")
add("ce_all_ignored_ls", CE, rnd(3, 4), torch.tensor([-100, -100, -100]), reduction="mean", label_smoothing=0.2)
add("ce_all_ignored_sum_ls", CE, rnd(3, 4), torch.tensor([-100, -100, -100]), reduction="sum", label_smoothing=0.2)
add("ce_uint8_target", CE, rnd(4, 3), torch.tensor([0, 2, 1, 1], dtype=torch.uint8), reduction="mean", label_smoothing=0.1)
for r in REDUCTIONS:
    add(f"ce_1d_{r}", CE, rnd(5), torch.tensor(3), reduction=r)
    add(f"ce_1d_{r}_ls_w", CE, rnd(5), torch.tensor(1), w=torch.rand(5), reduction=r, label_smoothing=0.2)
    add(f"ce_3d_{r}", CE, rnd(2, 4, 3), torch.randint(0, 4, (2, 3)), w=torch.rand(4), reduction=r)
    add(f"ce_4d_{r}", CE, rnd(2, 3, 4, 5), torch.randint(0, 3, (2, 4, 5)), reduction=r)
    add(f"ce_4d_{r}_ls_w_ign", CE, rnd(2, 3, 4, 5), torch.randint(0, 3, (2, 4, 5)).masked_fill(torch.rand(2, 4, 5) < 0.3, -100),
        w=torch.rand(3), reduction=r, label_smoothing=0.15)
add("ce_5d_ls", CE, rnd(2, 3, 2, 3, 2), torch.randint(0, 3, (2, 2, 3, 2)), reduction="mean", label_smoothing=0.1)
add("ce_3d_long_spatial_ls_w", CE, rnd(2, 4, 300), torch.randint(0, 4, (2, 300)), w=torch.rand(4), reduction="mean",
    label_smoothing=0.1)
add("ce_4d_f64_ls_ign", CE, rnd(2, 3, 4, 5, dtype=torch.float64), torch.randint(0, 3, (2, 4, 5)).masked_fill(torch.rand(2, 4, 5) < 0.3, -100),
    reduction="sum", label_smoothing=0.25)
add("ce_256x10", CE, rnd(256, 10, scale=2), torch.randint(0, 10, (256,)), reduction="mean")
add("ce_128x1000_ls", CE, None, None, reduction="mean", label_smoothing=0.1, stride=53,
    gen={"input": {"shape": [128, 1000], "scale": 6.0}, "target": {"shape": [128], "kind": "index", "classes": 1000}})
add("ce_37x33_w_ls_none", CE, rnd(37, 33, scale=2), torch.randint(0, 33, (37,)), w=torch.rand(33), reduction="none",
    label_smoothing=0.1)
# Large logits (log_softmax subtracts the max) and -inf masks.
add("ce_large_logits", CE, rnd(4, 6, scale=1e4), torch.tensor([0, 5, 2, 3]), reduction="none", label_smoothing=0.1)
add("ce_large_logits_f64", CE, rnd(4, 6, scale=1e4, dtype=torch.float64), torch.tensor([0, 5, 2, 3]), reduction="mean")
mask_x = rnd(3, 5)
mask_x[0, 1] = float("-inf")
mask_x[2, 0] = float("-inf")
mask_x[2, 4] = float("-inf")
add("ce_neg_inf_mask", CE, mask_x, torch.tensor([0, 3, 2]), reduction="none")
add("ce_empty_mean", CE, rnd(0, 4), torch.zeros(0, dtype=torch.int64), reduction="mean", grad=False)

# ---------------------------------------------------------------- cross_entropy, class probabilities
def soft(*shape, dtype=torch.float32, dim=1):
    return torch.softmax(torch.randn(*shape, dtype=torch.float64) * 2, dim=dim).to(dtype)


for dt in (torch.float32, torch.float64):
    for r in REDUCTIONS:
        add(f"cep_{tag(dt)}_{r}", CE, rnd(6, 5, dtype=dt, scale=2), soft(6, 5, dtype=dt), reduction=r)
        add(f"cep_{tag(dt)}_{r}_w_ls", CE, rnd(6, 5, dtype=dt, scale=2), soft(6, 5, dtype=dt), w=torch.rand(5, dtype=dt), reduction=r,
            label_smoothing=0.2)
add("cep_1d", CE, rnd(5), soft(5, dim=0), reduction="mean", label_smoothing=0.1)
add("cep_1d_w_none", CE, rnd(5), soft(5, dim=0), w=torch.rand(5), reduction="none")
add("cep_4d_w_ls", CE, rnd(2, 3, 4, 5), soft(2, 3, 4, 5), w=torch.rand(3), reduction="mean", label_smoothing=0.1)
add("cep_4d_none", CE, rnd(2, 3, 4, 5), soft(2, 3, 4, 5), reduction="none")
add("cep_3d_long_spatial_sum", CE, rnd(2, 4, 300), soft(2, 4, 300), reduction="sum")
add("cep_unnormalised_targets", CE, rnd(4, 6), torch.rand(4, 6) * 3 - 1, reduction="mean", label_smoothing=0.05)
add("cep_128x1000", CE, None, None, reduction="mean", stride=53,
    gen={"input": {"shape": [128, 1000], "scale": 6.0}, "target": {"shape": [128, 1000], "kind": "prob", "classes": 1000}})
add("cep_empty_mean", CE, rnd(0, 4), torch.zeros(0, 4), reduction="mean", grad=False)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loss.json")
with open(path, "w") as f:
    json.dump({"generator": "tests/golden/gen_loss.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {path}")
