#!/usr/bin/python3
"""Golden values for convolution and pooling (include/dp/ops/{conv,pooling}.h, include/dp/nn/modules/{conv,pooling}.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_conv.py
Writes tests/golden/conv.json: {"cases": [...]}; each case has a "name", an "op" and:
  conv2d:               "args" {stride, padding, dilation, groups}, "inputs" [x, w, b or null], "output",
                        "grad_output", "grads" [dx, dw, db or null]  (grads of sum(output * grad_output))
  max_pool2d:           "args" {kernel_size, stride (null = kernel), padding, dilation, ceil_mode},
                        "inputs" [x], "output", "indices", "grad_output", "grads" [dx]
  avg_pool2d:           "args" {kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override},
                        "inputs" [x], "output", "grad_output", "grads" [dx]
  adaptive_avg_pool2d:  "args" {output_size}, "inputs" [x], "output", "grad_output", "grads" [dx]
  module:               "repr" (PyTorch's printed module), "keys" (state_dict keys, in order),
                        "shapes" (state_dict shapes)
A tensor is {"dtype", "shape", "data"} (data flattened row-major). Integer pairs are lists of one
or two values, exactly as passed to PyTorch (an int is a one-element list).
"""
import json
import math
import os

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def short(v):
    # The shortest decimal that reads back as the same float32 value (keeps the JSON small).
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(repr(numpy.float32(v)))


def t2j(t):
    if t is None:
        return None
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:
        data = [short(v) for v in data]
    elif t.dtype == torch.float64:
        data = [("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else v for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


def lst(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


cases = []


def grads_of(out, inputs, seed):
    g = torch.Generator().manual_seed(seed)
    go = torch.randn(out.shape, generator=g, dtype=out.dtype)
    leaves = [t for t in inputs if t is not None]
    got = torch.autograd.grad(out, leaves, go)
    it = iter(got)
    return go, [next(it) if t is not None else None for t in inputs]


def conv_case(name, x_shape, w_shape, bias=True, stride=1, padding=0, dilation=1, groups=1, dtype=torch.float32):
    x = torch.randn(x_shape, dtype=dtype, requires_grad=True)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(w_shape[0], dtype=dtype, requires_grad=True) if bias else None
    out = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    go, grads = grads_of(out, [x, w, b], len(cases))
    cases.append({"name": name, "op": "conv2d",
                  "args": {"stride": lst(stride), "padding": lst(padding), "dilation": lst(dilation), "groups": groups},
                  "inputs": [t2j(x), t2j(w), t2j(b)], "output": t2j(out), "grad_output": t2j(go),
                  "grads": [t2j(g) for g in grads]})


conv_case("conv_basic", [2, 3, 7, 6], [4, 3, 3, 3])
conv_case("conv_stride2_pad1", [2, 3, 8, 8], [4, 3, 3, 3], stride=2, padding=1)
conv_case("conv_nonsquare", [2, 3, 9, 7], [5, 3, 2, 4], stride=(2, 1), padding=(1, 2))
conv_case("conv_dilation", [2, 2, 9, 8], [3, 2, 3, 3], dilation=(2, 1), padding=(2, 1))
conv_case("conv_mixed_stride_dilation", [1, 2, 10, 9], [3, 2, 3, 2], stride=(1, 2), dilation=(2, 3), padding=(0, 1))
conv_case("conv_groups2", [2, 4, 6, 6], [6, 2, 3, 3], groups=2, padding=1)
conv_case("conv_depthwise", [2, 4, 6, 6], [4, 1, 3, 3], groups=4, padding=1)
conv_case("conv_depthwise_multiplier", [2, 3, 5, 7], [6, 1, 3, 3], groups=3, stride=2)
conv_case("conv_pointwise", [2, 5, 4, 4], [3, 5, 1, 1])
conv_case("conv_pointwise_groups", [2, 6, 3, 5], [4, 6 // 2, 1, 1], groups=2)
conv_case("conv_pointwise_stride2", [2, 5, 5, 4], [3, 5, 1, 1], stride=2)
conv_case("conv_pointwise_pad1", [2, 5, 3, 4], [3, 5, 1, 1], padding=1)
conv_case("conv_batch1", [1, 2, 5, 5], [3, 2, 3, 3], padding=1)
conv_case("conv_unbatched", [2, 5, 6], [3, 2, 3, 3], padding=(1, 0))
conv_case("conv_nobias", [2, 3, 6, 6], [4, 3, 3, 3], bias=False, padding=1)
conv_case("conv_same5", [2, 3, 7, 8], [4, 3, 5, 5], padding=2)
conv_case("conv_stride_gt_kernel", [2, 2, 10, 11], [3, 2, 2, 2], stride=3)
conv_case("conv_kernel_fills_padded", [2, 2, 4, 3], [3, 2, 6, 5], padding=1)
conv_case("conv_pad_gt_kernel", [1, 2, 4, 4], [3, 2, 2, 2], padding=3)
conv_case("conv_wide_dilation_pad", [2, 2, 5, 2], [3, 2, 3, 3], padding=(1, 4), dilation=(1, 4))
conv_case("conv_cnn_layer", [2, 16, 10, 10], [24, 16, 3, 3], padding=1)
conv_case("conv_cnn_first", [3, 1, 12, 12], [8, 1, 3, 3], padding=1)
conv_case("conv_f64", [2, 3, 7, 6], [4, 3, 3, 3], stride=(2, 1), padding=1, dtype=torch.float64)
conv_case("conv_f64_groups_dilation", [2, 4, 8, 8], [4, 2, 3, 3], groups=2, dilation=2, padding=2, dtype=torch.float64)


def max_case(name, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    x = x.detach().requires_grad_(True)
    out, idx = F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    go, grads = grads_of(out, [x], len(cases))
    cases.append({"name": name, "op": "max_pool2d",
                  "args": {"kernel_size": lst(kernel_size), "stride": None if stride is None else lst(stride),
                           "padding": lst(padding), "dilation": lst(dilation), "ceil_mode": ceil_mode},
                  "inputs": [t2j(x)], "output": t2j(out), "indices": t2j(idx), "grad_output": t2j(go),
                  "grads": [t2j(g) for g in grads]})


r = torch.randn
max_case("max_k2", r(2, 3, 6, 6), 2)
max_case("max_k2_odd", r(2, 2, 7, 5), 2)
max_case("max_k2_ceil", r(2, 2, 7, 5), 2, ceil_mode=True)
max_case("max_k3_s2_p1", r(2, 2, 7, 8), 3, 2, 1)
max_case("max_ceil_last_window_rule", r(1, 2, 5, 5), 2, 2, 1, ceil_mode=True)
max_case("max_ceil_k3_s2", r(2, 2, 6, 8), 3, 2, 0, ceil_mode=True)
max_case("max_dilation", r(2, 2, 9, 8), 3, 1, 1, dilation=2)
max_case("max_nonsquare", r(2, 2, 7, 9), (2, 3), (1, 2), (1, 0))
max_case("max_nonsquare_dilation_ceil", r(1, 3, 8, 10), (3, 2), (2, 3), (1, 1), dilation=(1, 2), ceil_mode=True)
max_case("max_stride_gt_kernel", r(2, 2, 9, 9), 2, 3)
max_case("max_batch1", r(1, 4, 6, 6), 3, 1, 1)
max_case("max_unbatched", r(3, 6, 7), 2, 2, 1)
max_case("max_ties", torch.randint(0, 3, (2, 2, 6, 6)).float(), 3, 1, 1)
max_case("max_ties_k2", torch.randint(0, 2, (2, 2, 4, 4)).float(), 2)
max_case("max_f64", r(2, 2, 7, 7, dtype=torch.float64), 3, 2, 1, ceil_mode=True)


def avg_case(name, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    x = x.detach().requires_grad_(True)
    out = F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    go, grads = grads_of(out, [x], len(cases))
    cases.append({"name": name, "op": "avg_pool2d",
                  "args": {"kernel_size": lst(kernel_size), "stride": None if stride is None else lst(stride),
                           "padding": lst(padding), "ceil_mode": ceil_mode, "count_include_pad": count_include_pad,
                           "divisor_override": divisor_override},
                  "inputs": [t2j(x)], "output": t2j(out), "grad_output": t2j(go), "grads": [t2j(g) for g in grads]})


avg_case("avg_k2", r(2, 3, 6, 6), 2)
avg_case("avg_k3_s2_p1", r(2, 2, 7, 8), 3, 2, 1)
avg_case("avg_k3_s2_p1_exclude_pad", r(2, 2, 7, 8), 3, 2, 1, count_include_pad=False)
avg_case("avg_ceil_include_pad", r(2, 2, 6, 7), 3, 2, 1, ceil_mode=True)
avg_case("avg_ceil_exclude_pad", r(2, 2, 6, 7), 3, 2, 1, ceil_mode=True, count_include_pad=False)
avg_case("avg_ceil_no_pad", r(1, 2, 5, 7), 2, 2, 0, ceil_mode=True)
avg_case("avg_divisor_override", r(2, 2, 6, 6), 3, 2, 1, divisor_override=5)
avg_case("avg_nonsquare", r(2, 2, 7, 9), (2, 3), (1, 2), (1, 0))
avg_case("avg_unbatched", r(3, 6, 7), 2, 2, 1)
avg_case("avg_f64", r(2, 2, 7, 7, dtype=torch.float64), 3, 2, 1, ceil_mode=True, count_include_pad=False)


def adaptive_case(name, x, output_size):
    x = x.detach().requires_grad_(True)
    out = F.adaptive_avg_pool2d(x, output_size)
    go, grads = grads_of(out, [x], len(cases))
    cases.append({"name": name, "op": "adaptive_avg_pool2d", "args": {"output_size": lst(output_size)},
                  "inputs": [t2j(x)], "output": t2j(out), "grad_output": t2j(go), "grads": [t2j(g) for g in grads]})


adaptive_case("adaptive_1", r(2, 3, 5, 6), 1)
adaptive_case("adaptive_3x3_overlap", r(2, 2, 7, 7), (3, 3))
adaptive_case("adaptive_nonsquare", r(2, 2, 5, 7), (2, 3))
adaptive_case("adaptive_upsample", r(1, 2, 4, 3), (7, 5))
adaptive_case("adaptive_unbatched", r(3, 6, 5), 4)
adaptive_case("adaptive_f64", r(2, 2, 9, 10, dtype=torch.float64), (4, 3))


class Net(nn.Module):  # the benchmark's CNN
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d((7, 7))
        self.fc = nn.Linear(64 * 7 * 7, 10)


modules = [
    ("mod_conv_pad1", nn.Conv2d(1, 32, 3, padding=1)),
    ("mod_conv_default", nn.Conv2d(3, 8, 3)),
    ("mod_conv_full", nn.Conv2d(3, 8, (3, 5), stride=2, padding=(1, 2), dilation=2, bias=False)),
    ("mod_conv_groups", nn.Conv2d(4, 8, 3, groups=2)),
    ("mod_conv_depthwise", nn.Conv2d(16, 16, 3, stride=(2, 1), padding=1, groups=16)),
    ("mod_conv_dilation_only", nn.Conv2d(2, 2, 1, dilation=(1, 2))),
    ("mod_maxpool_2", nn.MaxPool2d(2)),
    ("mod_maxpool_full", nn.MaxPool2d((2, 3), stride=1, padding=(1, 0), dilation=2, ceil_mode=True)),
    ("mod_maxpool_3_2_1", nn.MaxPool2d(3, stride=2, padding=1)),
    ("mod_avgpool_2", nn.AvgPool2d(2)),
    ("mod_avgpool_full", nn.AvgPool2d((3, 3), stride=(2, 1), padding=1, ceil_mode=True, count_include_pad=False, divisor_override=2)),
    ("mod_adaptive_1", nn.AdaptiveAvgPool2d(1)),
    ("mod_adaptive_2x3", nn.AdaptiveAvgPool2d((2, 3))),
    ("mod_net", Net()),
]
for name, m in modules:
    sd = m.state_dict()
    cases.append({"name": name, "op": "module", "repr": repr(m), "keys": list(sd.keys()),
                  "shapes": [list(v.shape) for v in sd.values()]})

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv.json")
with open(out_path, "w") as f:
    json.dump({"torch_version": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {out_path}")
