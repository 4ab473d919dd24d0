#!/usr/bin/python3
"""Golden values for bfloat16 convolution, pooling and batch norm on the CPU
(include/dp/ops/{conv,pooling,normalization}.h with bfloat16 tensors).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_bfloat16.py
Writes tests/golden/bfloat16.json: {"cases": [...]}. Every input is drawn in float32 and rounded to
bfloat16 (so its values are exact in the JSON). Each case has a "name", an "op", "args", "inputs",
"grad_output" (bfloat16) and two sets of results:
  "torch":     PyTorch's own bfloat16 results ("output", "grads", for batch_norm in training also
               "running_mean" / "running_var" after the call);
  "reference": the same op in float64 on the same (rounded) values, same keys, stored as float32:
               the answer that a kernel computing in float32 and rounding once is within one
               bfloat16 ulp of.
"torch_rounds_once" says whether PyTorch 1.13 itself is within half an ulp (plus float32 slack)
of the reference on that case (its convolution and mixed-precision batch norm are; its pure-bfloat16 batch norm rounds
its statistics to bfloat16, and its pooling backward passes add in bfloat16): where it is not, the
test compares with PyTorch more loosely and with the reference strictly.
  conv2d:              args {stride, padding, dilation, groups}; inputs [x, w, b or null]; grads [dx, dw, db or null]
  max_pool2d:          args {kernel_size, stride, padding}; inputs [x]; grads [dx]; torch also "indices"
  avg_pool2d:          args {kernel_size, stride, padding, ceil_mode, count_include_pad}; inputs [x]; grads [dx]
  adaptive_avg_pool2d: args {output_size}; inputs [x]; grads [dx]
  batch_norm:          args {training, momentum, eps}; inputs [x, running_mean, running_var, weight, bias]
                       (null where absent; float32 or bfloat16); grads [dx, dw or null, db or null]
Gradients are those of sum(output * grad_output).
"""
import json
import math
import os

import numpy
import torch
import torch.nn.functional as F

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.int64: "int64"}


def short(v):
    # The shortest decimal that reads back as the same float32 value (bfloat16 values are float32
    # values, so they round-trip exactly).
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
    if t.dtype in (torch.float32, torch.bfloat16):
        data = [short(v) for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


def f32(t):
    # A float64 reference kept as float32: 2^-24 relative, far below a bfloat16 ulp (2^-8), and
    # half the JSON.
    return None if t is None else t2j(t.detach().float())


def bf16(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape) * scale + shift).bfloat16()


def ulp_error(got, ref):
    """Largest |got - ref| in bfloat16 ulps of ref (ulp = 2^(exponent - 8); zero refs use 2^-133)."""
    got, ref = got.double(), ref.double()
    exp = torch.frexp(ref)[1]
    ulp = torch.ldexp(torch.ones_like(ref), exp - 8)
    return ((got - ref).abs() / ulp).max().item() if ref.numel() else 0.0


cases = []

# Within half an ulp of the float64 answer, plus what float32 arithmetic before the one rounding
# adds (PyTorch's convolutions reach 0.504 ulp here): rounded once.
ROUNDS_ONCE = 0.51


def add_case(name, op, args, inputs, fn, grad_mask=None):
    """grad_mask: which inputs get gradients (default: every floating input)."""
    mask = grad_mask or [t is not None for t in inputs]
    ins = [t if m else (t.detach() if t is not None else None) for t, m in zip(inputs, mask)]

    def leafify(ts, cast):
        out = []
        for t, m in zip(ts, mask):
            if t is None:
                out.append(None)
                continue
            c = cast(t)
            out.append(c.clone().requires_grad_(True) if m else c.clone())
        return out

    seed = len(cases)
    g = torch.Generator().manual_seed(seed)
    t_in = leafify(ins, lambda t: t)
    out = fn(*t_in)
    go = torch.randn(out.shape, generator=g).bfloat16()
    want = [t for t in t_in if t is not None and t.requires_grad]
    it = iter(torch.autograd.grad(out, want, go))
    t_grads = [next(it) if t is not None and t.requires_grad else None for t in t_in]

    r_in = leafify(ins, lambda t: t.double())
    r_out = fn(*r_in)
    r_want = [t for t in r_in if t is not None and t.requires_grad]
    it = iter(torch.autograd.grad(r_out, r_want, go.double()))
    r_grads = [next(it) if t is not None and t.requires_grad else None for t in r_in]

    torch_res = {"output": t2j(out), "grads": [t2j(x) for x in t_grads]}
    ref_res = {"output": f32(r_out), "grads": [f32(x) for x in r_grads]}
    worst = max([ulp_error(out, r_out)] + [ulp_error(a, b) for a, b in zip(t_grads, r_grads) if a is not None])
    if op == "batch_norm" and args["training"] and inputs[1] is not None:
        torch_res["running_mean"], torch_res["running_var"] = t2j(t_in[1]), t2j(t_in[2])
        ref_res["running_mean"], ref_res["running_var"] = f32(r_in[1]), f32(r_in[2])
        if inputs[1].dtype == torch.bfloat16:
            worst = max(worst, ulp_error(t_in[1], r_in[1]), ulp_error(t_in[2], r_in[2]))
    if op == "max_pool2d":
        torch_res["indices"] = t2j(F.max_pool2d(ins[0], return_indices=True, **args)[1])
    cases.append({"name": name, "op": op, "args": args, "inputs": [t2j(t) for t in ins], "grad_output": t2j(go),
                  "torch": torch_res, "reference": ref_res, "torch_rounds_once": worst <= ROUNDS_ONCE})
    print(f"{name:40s} PyTorch bfloat16 vs float64 reference: {worst:8.2f} ulp")


def conv(name, x, w, b=None, stride=1, padding=0, dilation=1, groups=1, input_grad=True):
    args = {"stride": [stride], "padding": [padding], "dilation": [dilation], "groups": groups}
    add_case(name, "conv2d", args, [x, w, b],
             lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
             [input_grad, True, b is not None])


conv("conv_pad1_bias", bf16(2, 3, 9, 9, scale=2.0, shift=0.5), bf16(5, 3, 3, 3), bf16(5), padding=1)
conv("conv_stride2_dilation2_nobias", bf16(2, 4, 11, 10), bf16(6, 4, 3, 3), stride=2, padding=2, dilation=2)
conv("conv_groups2", bf16(2, 4, 7, 7), bf16(6, 2, 3, 3), bf16(6), groups=2)
conv("conv_pointwise", bf16(3, 8, 5, 5), bf16(4, 8, 1, 1), bf16(4))
conv("conv_cnn_layer", bf16(2, 16, 8, 8), bf16(16, 16, 3, 3, scale=0.1), bf16(16), padding=1)
conv("conv_first_layer_no_input_grad", bf16(4, 1, 12, 12), bf16(8, 1, 3, 3), bf16(8), padding=1, input_grad=False)

x_pool = bf16(3, 4, 9, 8, scale=2.0)
add_case("max_pool_2x2", "max_pool2d", {"kernel_size": [2], "stride": [2], "padding": [0]}, [bf16(2, 3, 8, 6)],
         lambda x: F.max_pool2d(x, 2, 2, 0))
add_case("max_pool_3_stride2_pad1", "max_pool2d", {"kernel_size": [3], "stride": [2], "padding": [1]}, [x_pool],
         lambda x: F.max_pool2d(x, 3, 2, 1))
add_case("avg_pool_2", "avg_pool2d", {"kernel_size": [2], "stride": [2], "padding": [0], "ceil_mode": False, "count_include_pad": True},
         [bf16(2, 3, 8, 6)], lambda x: F.avg_pool2d(x, 2, 2, 0))
add_case("avg_pool_3_stride2_pad1_exclude_pad", "avg_pool2d",
         {"kernel_size": [3], "stride": [2], "padding": [1], "ceil_mode": True, "count_include_pad": False}, [x_pool],
         lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False))
add_case("adaptive_avg_pool_4x3", "adaptive_avg_pool2d", {"output_size": [4, 3]}, [x_pool], lambda x: F.adaptive_avg_pool2d(x, (4, 3)))
add_case("adaptive_avg_pool_1x1", "adaptive_avg_pool2d", {"output_size": [1, 1]}, [x_pool], lambda x: F.adaptive_avg_pool2d(x, (1, 1)))


def bn(name, x, params_dtype, training, affine=True, stats=True, momentum=0.1, eps=1e-5):
    C = x.shape[1]
    w = (torch.rand(C) + 0.5).to(params_dtype) if affine else None
    b = torch.randn(C).to(params_dtype) if affine else None
    rm = (torch.randn(C) * 0.1).to(params_dtype) if stats else None
    rv = (torch.rand(C) + 0.5).to(params_dtype) if stats else None
    args = {"training": training, "momentum": momentum, "eps": eps}
    add_case(name, "batch_norm", args, [x, rm, rv, w, b],
             lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps),
             [True, False, False, affine, affine])


x_bn = bf16(4, 3, 6, 5, scale=2.0, shift=0.5)
bn("bn_train_bfloat16_params", x_bn, torch.bfloat16, True)
bn("bn_train_float32_params", x_bn, torch.float32, True)
bn("bn_eval_bfloat16_params", x_bn, torch.bfloat16, False)
bn("bn_eval_float32_params", x_bn, torch.float32, False)
bn("bn_train_no_affine_float32_stats", x_bn, torch.float32, True, affine=False)
bn("bn_train_2d_float32_params_no_stats", bf16(16, 5, scale=3.0, shift=-1.0), torch.float32, True, stats=False)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bfloat16.json")
with open(path, "w") as f:
    json.dump({"generator": "tests/golden/gen_bfloat16.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
print("wrote", path, len(cases), "cases")
