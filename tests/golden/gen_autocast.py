#!/usr/bin/python3
"""Golden values for autocast and GradScaler (include/dp/amp/).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_autocast.py
Writes tests/golden/autocast.json:
  "dtypes":   [{"name", "op", "inputs": [dtype...], "shapes": [shape...], "output": dtype}]: an op run
              under torch.autocast("cpu", torch.bfloat16) on arguments of those dtypes and shapes
              (tests/amp/test_autocast_dtypes.cpp runs dparallel's op of that name on the same);
  "training": {"<name>": {"params": {name: tensor}, "x", "y", "out", "loss", "grads": {name: tensor}}}:
              one forward + backward of a small MLP under bf16 autocast;
  "scaler":   {"<name>": {"options", "params", "x", "y", "forced", "steps": [...], "state_dict"}}: the
              sequence of scales of torch.cuda.amp.GradScaler over a few SGD steps with forced inf/nan
              gradients.
A tensor is {"dtype", "shape", "data"} (data row-major; bfloat16 values written as float32 numbers).

GradScaler on the CPU: torch 1.13's GradScaler disables itself without CUDA, and its two kernels
(_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) exist only for CUDA. The script
runs GradScaler's own Python logic (the state machine of unscale_/step/update) with the scaler
forced on, scale() and _MultiDeviceReplicator without their is_cuda assertions, and the two kernels replaced by Python
transcriptions of aten/src/ATen/native/cuda/AmpKernels.cu (float32 scale, double factors).
"""
import json
import math
import os
import re

import numpy
import torch
import torch.cuda.amp.grad_scaler as grad_scaler_module
import torch.nn.functional as F

torch.manual_seed(0)
BF = torch.bfloat16
NAMES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.int64: "int64",
         torch.float16: "float16"}


def short(v):
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    return float(repr(numpy.float32(v)))


def tj(t):
    t = t.detach()
    data = t.float().reshape(-1).tolist() if t.dtype in (BF, torch.float16) else t.reshape(-1).tolist()
    if t.dtype in (torch.float32, BF, torch.float16):
        data = [short(v) for v in data]
    return {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data": data}


# ---------------------------------------------------------------------------------------------
# Output dtypes. Arguments: "f" float32, "b" bfloat16, "d" float64; the C++ test makes the same.

def arg(kind, *shape):
    t = torch.randn(*shape)
    return {"f": t, "b": t.to(BF), "d": t.double()}[kind]


def img(kind):
    return arg(kind, 2, 3, 6, 6)


def probs(kind):
    return torch.sigmoid(arg("f", 4, 5)).to(arg(kind, 1).dtype)


T = torch.tensor([0, 2, 1, 4])
CASES = {}
for k in "fbd":
    # float32 parameters, as a model's (float64 ones for float64 input: float64 is never cast)
    CASES[f"linear_{k}"] = lambda k=k: (F.linear, [arg(k, 4, 6), arg("d" if k == "d" else "f", 5, 6), arg("d" if k == "d" else "f", 5)])
    CASES[f"mm_{k}"] = lambda k=k: (torch.mm, [arg(k, 4, 6), arg(k, 6, 3)])
    CASES[f"dot_{k}"] = lambda k=k: (torch.dot, [arg(k, 6), arg(k, 6)])
    CASES[f"mse_loss_{k}"] = lambda k=k: (F.mse_loss, [arg(k, 4, 5), arg(k, 4, 5)])
    CASES[f"softmax_{k}"] = lambda k=k: (lambda a: F.softmax(a, 1), [arg(k, 4, 5)])
CASES.update({
    "linear_b_weight_b": lambda: (F.linear, [arg("f", 4, 6), arg("b", 5, 6), arg("f", 5)]),
    "matmul_f": lambda: (torch.matmul, [arg("f", 2, 4, 6), arg("f", 6, 3)]),
    "addmm_f": lambda: (torch.addmm, [arg("f", 3), arg("f", 4, 6), arg("f", 6, 3)]),
    "bmm_f": lambda: (torch.bmm, [arg("f", 2, 4, 6), arg("f", 2, 6, 3)]),
    "conv2d_f": lambda: (F.conv2d, [img("f"), arg("f", 4, 3, 3, 3), arg("f", 4)]),
    "mse_loss_bf": lambda: (F.mse_loss, [arg("b", 4, 5), arg("f", 4, 5)]),
    "l1_loss_b": lambda: (F.l1_loss, [arg("b", 4, 5), arg("b", 4, 5)]),
    "nll_loss_b": lambda: (F.nll_loss, [F.log_softmax(arg("f", 4, 5), 1).to(BF), T]),
    "cross_entropy_b": lambda: (F.cross_entropy, [arg("b", 4, 5), T]),
    "binary_cross_entropy_b": lambda: (F.binary_cross_entropy, [probs("b"), probs("b")]),
    "binary_cross_entropy_with_logits_b": lambda: (F.binary_cross_entropy_with_logits, [arg("b", 4, 5), probs("b")]),
    "cat_bf": lambda: (lambda a, b: torch.cat([a, b]), [arg("b", 2, 3), arg("f", 2, 3)]),
    "cat_bb": lambda: (lambda a, b: torch.cat([a, b]), [arg("b", 2, 3), arg("b", 2, 3)]),
    "cat_bd": lambda: (lambda a, b: torch.cat([a, b]), [arg("b", 2, 3), arg("d", 2, 3)]),
    "stack_bf": lambda: (lambda a, b: torch.stack([a, b]), [arg("b", 2, 3), arg("f", 2, 3)]),
    "log_softmax_b": lambda: (lambda a: F.log_softmax(a, 1), [arg("b", 4, 5)]),
    "exp_b": lambda: (torch.exp, [arg("b", 4, 5)]),
    "sum_b": lambda: (torch.sum, [arg("b", 4, 5)]),
    "logsumexp_b": lambda: (lambda a: torch.logsumexp(a, [1]), [arg("b", 4, 5)]),
    "relu_b": lambda: (F.relu, [arg("b", 4, 5)]),
    "add_bf": lambda: (torch.add, [arg("b", 4, 5), arg("f", 4, 5)]),
    "layer_norm_b": lambda: (lambda a: F.layer_norm(a, [5]), [arg("b", 4, 5)]),
    "lstm_cell_f": lambda: (lambda x, h, c, wi, wh, bi, bh: torch.lstm_cell(x, (h, c), wi, wh, bi, bh)[0],
                            [arg("f", 3, 4), arg("f", 3, 5), arg("f", 3, 5), arg("f", 20, 4), arg("f", 20, 5),
                             arg("f", 20), arg("f", 20)]),
})


def dtype_cases():
    out = []
    for name, make in CASES.items():
        fn, args = make()
        with torch.autocast("cpu", dtype=BF):
            r = fn(*args)
        op = re.sub(r"_(f|b|d|bf|bb|bd|b_weight_b)$", "", name)
        out.append({"name": name, "op": op, "inputs": [NAMES[a.dtype] for a in args], "shapes": [list(a.shape) for a in args],
                    "output": NAMES[r.dtype]})
    return out


# ---------------------------------------------------------------------------------------------
# A training step of an MLP under bf16 autocast: Linear(8, 16) -> ReLU -> Linear(16, 4), then a loss.

def training_case(loss_name):
    torch.manual_seed(1)
    params = {"fc1.weight": torch.randn(16, 8) * 0.3, "fc1.bias": torch.randn(16) * 0.1,
              "fc2.weight": torch.randn(4, 16) * 0.3, "fc2.bias": torch.randn(4) * 0.1}
    x = torch.randn(6, 8)
    y = torch.randn(6, 4) if loss_name == "mse_loss" else torch.tensor([0, 3, 1, 2, 3, 0])
    p = {k: v.clone().requires_grad_() for k, v in params.items()}
    with torch.autocast("cpu", dtype=BF):
        h = F.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
        out = F.linear(h, p["fc2.weight"], p["fc2.bias"])
        loss = F.mse_loss(out, y) if loss_name == "mse_loss" else F.cross_entropy(out, y)
    loss.backward()
    return {"params": {k: tj(v) for k, v in params.items()}, "x": tj(x), "y": tj(y), "out": tj(out), "loss": tj(loss),
            "grads": {k: tj(v.grad) for k, v in p.items()}}


# ---------------------------------------------------------------------------------------------
# GradScaler sequences.

def foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # AmpKernels.cu: found_inf = 1 if any element is inf or nan; every element *= inv_scale.
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # AmpKernels.cu's amp_update_scale_cuda_kernel: float32 scale, double factors.
    if found_inf.item():
        scale.fill_(float(numpy.float32(scale.item() * backoff_factor)))
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker.item() + 1
        if successful == growth_interval:
            with numpy.errstate(over="ignore"):  # float32 overflow to inf is the case being tested
                new_scale = numpy.float32(scale.item() * growth_factor)
            if math.isfinite(new_scale):
                scale.fill_(float(new_scale))
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


class CpuReplicator(grad_scaler_module._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # _MultiDeviceReplicator minus its is_cuda assertion
        self.master = master_tensor
        self._per_device_tensors = {}


torch._amp_foreach_non_finite_check_and_unscale_ = foreach_non_finite_check_and_unscale_
torch._amp_update_scale_ = amp_update_scale_
grad_scaler_module._MultiDeviceReplicator = CpuReplicator


class CpuGradScaler(torch.cuda.amp.GradScaler):
    def __init__(self, **kw):
        # GradScaler.__init__ disables itself when CUDA is missing: tell it CUDA is there.
        available = grad_scaler_module.amp_definitely_not_available
        grad_scaler_module.amp_definitely_not_available = lambda: False
        try:
            super().__init__(**kw)
        finally:
            grad_scaler_module.amp_definitely_not_available = available

    def scale(self, outputs):  # GradScaler.scale minus its is_cuda assertion
        if self._scale is None:
            self._lazy_init_scale_growth_tracker(outputs.device)
        return outputs * self._scale.to(device=outputs.device)


def scaler_case(options, iterations, forced):
    """forced: {iteration: "inf" | "nan"}: that iteration's fc.weight.grad[0, 1] is overwritten."""
    torch.manual_seed(2)
    w0, b0 = torch.randn(2, 4) * 0.5, torch.randn(2) * 0.1
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    opt = torch.optim.SGD([w, b], lr=0.05)
    scaler = CpuGradScaler(**options)
    steps = []
    for it in range(iterations):
        opt.zero_grad()
        loss = F.mse_loss(F.linear(x, w, b), y)
        scale_before = scaler.get_scale()
        scaled = scaler.scale(loss)
        scaled.backward()
        if it in forced:
            with torch.no_grad():
                w.grad[0, 1] = float(forced[it])
        before = w.detach().clone()
        scaler.step(opt)
        stepped = not torch.equal(before, w.detach())
        scaler.update()
        steps.append({"scale_before": scale_before, "scaled_loss": tj(scaled), "stepped": stepped,
                      "scale_after": scaler.get_scale(), "growth_tracker": scaler._get_growth_tracker(),
                      "weight": tj(w), "bias": tj(b)})
    return {"options": options, "params": {"weight": tj(w0), "bias": tj(b0)}, "x": tj(x), "y": tj(y),
            "forced": {str(k): v for k, v in forced.items()}, "steps": steps, "state_dict": scaler.state_dict()}


def main():
    golden = {
        "dtypes": dtype_cases(),
        "training": {n: training_case(n) for n in ("mse_loss", "cross_entropy")},
        "scaler": {
            "default": scaler_case({}, 6, {1: "inf", 4: "nan"}),
            "growth": scaler_case({"init_scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 3},
                                  14, {2: "inf", 3: "-inf", 9: "nan"}),
            # growth past float32's range: the grown scale is not finite, so the old one is kept
            "overflow": scaler_case({"init_scale": 2.0 ** 120, "growth_factor": 256.0, "growth_interval": 1}, 4, {}),
        },
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "autocast.json")
    with open(path, "w") as f:
        json.dump(golden, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
