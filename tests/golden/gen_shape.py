#!/usr/bin/python3
"""Golden values for views and shape ops, factories, dtype conversion and printing.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_shape.py
Writes tests/golden/shape.json: {"cases": [{"name", "inputs": [tensor...], "output": ...}]} where a
tensor is {"dtype", "shape", "data"} (data flattened row-major; non-finite floats as strings) and
"output" is a tensor, a list of tensors, or a string (printing). View cases also record the
output's "strides" and "storage_offset"; cases that need parameters carry them in "args".
The op each case names is reproduced by the C++ test of the same name (tests/ops/test_shape*.cpp,
tests/ops/test_factory.cpp, tests/core/test_print.cpp, tests/core/test_dtype.cpp).
"""
import json
import math
import os

import torch

torch.manual_seed(0)

DTYPES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}
ORDER = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]


def num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def tj(t):
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        data = t.float().reshape(-1).tolist()
    else:
        data = t.reshape(-1).tolist()
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data]}


cases = []


def add(name, inputs, output, **extra):
    c = {"name": name, "inputs": [tj(i) for i in inputs]}
    if isinstance(output, str):
        c["output"] = output
    elif isinstance(output, (list, tuple)):
        c["output"] = [tj(o) for o in output]
    else:
        c["output"] = tj(output)
    c.update(extra)
    cases.append(c)


# ---------------------------------------------------------------- views: values, strides, offsets
x = torch.arange(24.0).view(2, 3, 4)
col = torch.arange(3.0).view(3, 1)
# Each base is made from a contiguous root (stored as the case's input) by the same op in C++.
bases = {
    "x": (x, lambda r: r),                           # [2, 3, 4] contiguous
    "xt": (x, lambda r: r.transpose(0, 2)),          # [4, 3, 2] strides (1, 4, 12)
    "xs": (x, lambda r: r[:, :, 1:3]),               # [2, 3, 2] strides (12, 4, 1), offset 1
    "xp": (x, lambda r: r.permute(1, 0, 2)),         # [3, 2, 4] strides (4, 12, 1)
    "col": (col, lambda r: r),                       # [3, 1]
}
view_ops = {
    "view_6_4": ("x", lambda t: t.view(6, 4)),
    "view_m1": ("x", lambda t: t.view(-1)),
    "view_2_m1_2": ("x", lambda t: t.view(2, -1, 2)),
    "view_xp_split_last": ("xp", lambda t: t.view(3, 2, 2, 2)),
    "view_xs_unit": ("xs", lambda t: t.view(2, 3, 2, 1)),
    "view_xt_1_4_3_2": ("xt", lambda t: t.view(1, 4, 3, 2)),
    "reshape_view": ("x", lambda t: t.reshape(4, 6)),
    "reshape_copy_xt": ("xt", lambda t: t.reshape(24)),
    "reshape_copy_xs": ("xs", lambda t: t.reshape(-1, 3)),
    "as_strided_3x3": ("x", lambda t: t.as_strided((3, 3), (4, 1), 2)),
    "as_strided_overlap": ("x", lambda t: t.as_strided((4, 3), (1, 2))),
    "narrow_1_1_2": ("x", lambda t: t.narrow(1, 1, 2)),
    "narrow_neg": ("x", lambda t: t.narrow(-1, -3, 2)),
    "narrow_xt": ("xt", lambda t: t.narrow(0, 1, 2)),
    "slice_step2": ("x", lambda t: t[:, ::2]),
    "slice_start1_step2": ("x", lambda t: t[:, :, 1::2]),
    "slice_neg": ("x", lambda t: t[:, :, -3:-1]),
    "slice_clamp": ("x", lambda t: t[:, :, -100:100]),
    "slice_empty": ("x", lambda t: t[:, 5:10]),
    "slice_xs": ("xs", lambda t: t[1:, 1:]),
    "select_1_m1": ("x", lambda t: t.select(1, -1)),
    "select_0_1": ("x", lambda t: t.select(0, 1)),
    "select_xt": ("xt", lambda t: t.select(2, 0)),
    "transpose_0_2": ("x", lambda t: t.transpose(0, 2)),
    "transpose_neg": ("x", lambda t: t.transpose(-1, -2)),
    "transpose_xs": ("xs", lambda t: t.transpose(0, 1)),
    "permute_2_0_1": ("x", lambda t: t.permute(2, 0, 1)),
    "permute_xt": ("xt", lambda t: t.permute(1, 2, 0)),
    "expand_col": ("col", lambda t: t.expand(3, 4)),
    "expand_lead": ("col", lambda t: t.expand(2, 3, 5)),
    "expand_m1": ("col", lambda t: t.expand(2, -1, 4)),
    "expand_narrow": ("x", lambda t: t.narrow(1, 0, 1).expand(2, 3, 4)),
    "squeeze_all": ("x", lambda t: t.narrow(1, 0, 1).squeeze()),
    "squeeze_dim": ("x", lambda t: t.narrow(1, 0, 1).squeeze(1)),
    "squeeze_noop": ("x", lambda t: t.squeeze(0)),
    "unsqueeze_0": ("x", lambda t: t.unsqueeze(0)),
    "unsqueeze_last": ("x", lambda t: t.unsqueeze(-1)),
    "unsqueeze_2": ("x", lambda t: t.unsqueeze(2)),
    "unsqueeze_xt": ("xt", lambda t: t.unsqueeze(1)),
    "flatten_all": ("x", lambda t: t.flatten()),
    "flatten_1": ("x", lambda t: t.flatten(1)),
    "flatten_0_1": ("x", lambda t: t.flatten(0, 1)),
    "flatten_xt": ("xt", lambda t: t.flatten()),
    "flatten_xt_1": ("xt", lambda t: t.flatten(1)),
    "flatten_xp_1": ("xp", lambda t: t.flatten(1)),
    "unflatten_2": ("x", lambda t: t.unflatten(2, (2, 2))),
    "unflatten_neg": ("x", lambda t: t.unflatten(-1, (-1, 2))),
    "contiguous_xt": ("xt", lambda t: t.contiguous()),
    "clone_xs": ("xs", lambda t: t.clone(memory_format=torch.contiguous_format)),
    "to_f64_xt": ("xt", lambda t: t.to(torch.float64)),
    "to_f64_xs": ("xs", lambda t: t.to(torch.float64)),
    "to_i32_xp": ("xp", lambda t: t.to(torch.int32)),
}
for name, (base, fn) in view_ops.items():
    root, make = bases[base]
    out = fn(make(root))
    add(name, [root], out, base=base, strides=list(out.stride()), storage_offset=out.storage_offset())

multi_ops = {
    "chunk_2_dim2": ("x", lambda t: t.chunk(2, 2)),
    "chunk_xt_3": ("xt", lambda t: t.chunk(3, 0)),
    "split_2_dim1": ("x", lambda t: t.split(2, 1)),
    "split_sizes_1_0_3": ("x", lambda t: t.split([1, 0, 3], 2)),
    "split_xp": ("xp", lambda t: t.split(3, -1)),
}
for name, (base, fn) in multi_ops.items():
    root, make = bases[base]
    outs = fn(make(root))
    add(name, [root], list(outs), base=base, strides=[list(o.stride()) for o in outs],
        storage_offset=[o.storage_offset() for o in outs])

# ---------------------------------------------------------------- cat / stack
a23 = torch.randn(2, 3)
b13 = torch.randn(1, 3)
c22 = torch.randn(2, 2)
cat_cases = [
    ("cat_dim0", [a23, b13], 0),
    ("cat_dim_neg1", [a23, torch.randn(2, 2)], -1),
    ("cat_int32_float32", [torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), c22], 0),
    ("cat_uint8_int64", [torch.tensor([1, 200], dtype=torch.uint8), torch.tensor([-5, 7])], 0),
    ("cat_bool_uint8", [torch.tensor([True, False]), torch.tensor([3], dtype=torch.uint8)], 0),
    ("cat_f16_bf16", [torch.tensor([0.1, 2.5], dtype=torch.float16), torch.tensor([0.3], dtype=torch.bfloat16)], 0),
    ("cat_f32_f64", [c22, torch.randn(2, 1, dtype=torch.float64)], 1),
    ("cat_skip_empty", [torch.tensor([], dtype=torch.float64), a23, torch.tensor([])], 0),
    ("cat_skip_empty_dim1", [a23, torch.tensor([]), torch.randn(2, 2)], 1),
    ("cat_three_3d", [torch.randn(2, 1, 3), torch.randn(2, 2, 3), torch.randn(2, 0, 3)], -2),
]
for name, ts, dim in cat_cases:
    add(name, ts, torch.cat(ts, dim), args={"op": "cat", "dim": dim})
ta, tb = torch.randn(3, 2), torch.randn(3, 2)
add("cat_transposed", [ta, tb], torch.cat([ta.t(), tb.t()], 1), args={"op": "cat", "dim": 1, "transpose_inputs": True})
stack_cases = [
    ("stack_dim0", [a23, torch.randn(2, 3)], 0),
    ("stack_dim1", [a23, torch.randn(2, 3), torch.randn(2, 3)], 1),
    ("stack_dim_neg1", [a23, torch.randn(2, 3)], -1),
    ("stack_int64_float32", [torch.tensor([1, 2]), torch.tensor([0.5, 1.5])], 0),
    ("stack_0dim", [torch.tensor(1.0), torch.tensor(2.0)], 0),
]
for name, ts, dim in stack_cases:
    add(name, ts, torch.stack(ts, dim), args={"op": "stack", "dim": dim})

# ---------------------------------------------------------------- dtype conversion
src_f = torch.tensor([0.1, 2.7, -2.7, 1.0 / 3.0, 65504.0, 65519.0, 1e-8, 3.5, 255.0, 100000.5, 0.0, -0.0,
                      1e-6, 6e-8, 3.0e38, 2.5], dtype=torch.float64)
for dt in [torch.float32, torch.float16, torch.bfloat16]:
    add("to_f64_" + DTYPES[dt], [src_f], src_f.to(dt))
src_i = torch.tensor([0.1, 2.7, -2.7, 100000.5, -7.0, 3.0, 0.0, 1e9], dtype=torch.float64)
for dt in [torch.int32, torch.int64, torch.bool]:
    add("to_f64_" + DTYPES[dt], [src_i], src_i.to(dt))
src_u = torch.tensor([0.0, 1.9, 254.9, 255.0, 17.5], dtype=torch.float64)
add("to_f64_uint8", [src_u], src_u.to(torch.uint8))
src_l = torch.tensor([2 ** 53 + 1, -3, 16777217, 2049, 65505, 1 << 40])
for dt in [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32]:
    add("to_i64_" + DTYPES[dt], [src_l], src_l.to(dt) if dt != torch.int32 else src_l[1:5].to(dt))
src_f32 = torch.tensor([0.1, -1.5, 1e-3, 7.0], dtype=torch.float32)
for dt in [torch.float16, torch.bfloat16]:
    add("to_f32_" + DTYPES[dt], [src_f32], src_f32.to(dt))


def f32_from_bits(b):
    return torch.tensor([b], dtype=torch.int64).to(torch.int32).view(torch.float32)


bit_inputs = [
    0x3F800000, 0x3F801000, 0x3F803000, 0x3F802000, 0x3F800001, 0x3F807FFF, 0x3F808000, 0x3F818000,
    0x33800000, 0x33000000, 0x33C00000, 0x33400000, 0x38800000, 0x387FC000, 0x387FE000, 0x477FE000,
    0x477FEFFF, 0x477FF000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x80000000,
    0x00000001, 0x2F800000, 0x3DCCCCCD, 0xBEAAAAAB, 0xC7800000, 0x7F7F8000, 0x7F7F7FFF, 0x00400000,
]
bits32 = torch.tensor([b if b < 2 ** 31 else b - 2 ** 32 for b in bit_inputs], dtype=torch.int32)
vals = bits32.view(torch.float32)
half_bits = vals.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF
bf_bits = vals.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
add("f32_to_half_bits", [torch.tensor(bit_inputs, dtype=torch.int64)], half_bits)
add("f32_to_bfloat16_bits", [torch.tensor(bit_inputs, dtype=torch.int64)], bf_bits)
# Half/bfloat16 bit patterns -> float32 bit patterns (subnormals, inf, nan, extremes).
h_in = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0x3555, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8001, 0xC000, 0x0200]
h_vals = torch.tensor([b if b < 2 ** 15 else b - 2 ** 16 for b in h_in], dtype=torch.int16).view(torch.float16).float()
add("half_bits_to_f32_bits", [torch.tensor(h_in)], h_vals.view(torch.int32).to(torch.int64) & 0xFFFFFFFF)
b_in = [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x3F80, 0x3DCD, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0xC049]
b_vals = torch.tensor([b if b < 2 ** 15 else b - 2 ** 16 for b in b_in], dtype=torch.int16).view(torch.bfloat16).float()
add("bfloat16_bits_to_f32_bits", [torch.tensor(b_in)], b_vals.view(torch.int32).to(torch.int64) & 0xFFFFFFFF)

# promote_types table, as indices into ORDER (dp's DType enum order).
table = torch.tensor([[ORDER.index(torch.promote_types(a, b)) for b in ORDER] for a in ORDER])
add("promote_types", [], table)

# ---------------------------------------------------------------- factories
arange_cases = [
    ("arange_5", (5,), None),
    ("arange_1_2p5_0p5", (1, 2.5, 0.5), None),
    ("arange_0_1_0p1", (0, 1, 0.1), None),
    ("arange_neg_f64", (-1.0, 1.0, 0.25), torch.float64),
    ("arange_10_0_m3", (10, 0, -3), None),
    ("arange_int32_float_end", (0, 2.5, 1), torch.int32),
    ("arange_int64_float_end", (0, 2.5, 1), torch.int64),
    ("arange_f32_explicit", (2, 7), torch.float32),
    ("arange_empty", (3, 3), None),
    ("arange_f64_fine", (0, 0.3, 0.1), torch.float64),
]
for name, args, dt in arange_cases:
    out = torch.arange(*args, dtype=dt) if dt is not None else torch.arange(*args)
    add(name, [], out, args={"op": "arange", "params": list(args), "dtype": DTYPES[dt] if dt is not None else None})
linspace_cases = [
    ("linspace_0_1_5", (0, 1, 5), torch.float32),
    ("linspace_m1_1_7_f64", (-1, 1, 7), torch.float64),
    ("linspace_0_10_4_i64", (0, 10, 4), torch.int64),
    ("linspace_single", (3, 9, 1), torch.float32),
    ("linspace_empty", (0, 1, 0), torch.float32),
    ("linspace_desc", (5, -5, 11), torch.float32),
    ("linspace_0_1_100", (0, 1, 100), torch.float32),
]
for name, (s, e, n), dt in linspace_cases:
    add(name, [], torch.linspace(s, e, n, dtype=dt), args={"op": "linspace", "params": [s, e, n], "dtype": DTYPES[dt]})
add("eye_3", [], torch.eye(3), args={"op": "eye", "params": [3], "dtype": "float32"})
add("eye_2_int32", [], torch.eye(2, dtype=torch.int32), args={"op": "eye", "params": [2], "dtype": "int32"})
add("full_2x2", [], torch.full((2, 2), 3.5), args={"op": "full", "params": [3.5], "dtype": "float32"})

# ---------------------------------------------------------------- printing
torch.manual_seed(1)
prints = {
    "print_2x2": torch.tensor([[0.1, 0.2], [0.3, 0.4]]),
    "print_int": torch.tensor([[1, -20, 300], [4, 5, 6]]),
    "print_scalar": torch.tensor(3.5),
    "print_scalar_int": torch.tensor(7),
    "print_scalar_f64_sci": torch.tensor(1.0e-7, dtype=torch.float64),
    "print_large_int_valued": torch.tensor([1e10, 1.0, 3.0]),
    "print_small_sci": torch.tensor([1e-5, 0.5, 2.0]),
    "print_ratio_sci": torch.tensor([0.001, 12345.678]),
    "print_int_mode": torch.tensor([1.0, 2.0, -3.0]),
    "print_nan_inf": torch.tensor([1.5, float("nan"), float("inf"), -float("inf"), 0.0]),
    "print_int_mode_inf": torch.tensor([1.0, float("inf"), float("nan")]),
    "print_neg_zero": torch.tensor([-0.0, 1.0]),
    "print_all_zero": torch.zeros(2, 2),
    "print_3d": torch.arange(24.0).view(2, 3, 4) / 3,
    "print_bool": torch.tensor([True, False, True]),
    "print_float64": torch.tensor([1.5, 2.25], dtype=torch.float64),
    "print_float16": torch.tensor([0.1, 1000.5], dtype=torch.float16),
    "print_bfloat16": torch.tensor([[0.1, -2.0], [3.14159, 100.0]], dtype=torch.bfloat16),
    "print_uint8": torch.tensor([0, 7, 255], dtype=torch.uint8),
    "print_int32": torch.tensor([[1, 2], [-3, 40000]], dtype=torch.int32),
    "print_empty_0x3": torch.empty(0, 3),
    "print_empty_int": torch.empty(0, dtype=torch.int64),
    "print_empty_1d": torch.empty(0),
    "print_empty_f16": torch.empty(2, 0, dtype=torch.float16),
    "print_long_line": torch.linspace(0, 1, 30),
    "print_wrap_2d": torch.randn(3, 25),
    "print_sci_2d": torch.tensor([[1e-10, -1e10], [5.0, 6.0]]),
    "print_suffix_newline": torch.tensor([-1234.5678, 2345.125, -3456.25, 4567.5, -5678.75, 6789.0], dtype=torch.float64),
    "print_summarize_1d": torch.arange(2000, dtype=torch.float32) / 7,
    "print_summarize_2d_int": torch.arange(1600).view(40, 40),
    "print_summarize_3d": torch.randn(12, 10, 10),
    "print_summarize_wide": torch.rand(5, 300),
    "print_summarize_int_1d": torch.arange(1200),
    "print_summarize_bool": torch.arange(1001) % 3 == 0,
    "print_1x1x1": torch.tensor([[[2.5]]]),
}
for name, t in prints.items():
    add(name, [t], repr(t))
leaf = torch.tensor([1.0, 2.0], requires_grad=True)
add("print_requires_grad", [leaf], repr(leaf))
m = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
add("print_grad_fn_transpose", [m], repr(m.transpose(0, 1)))
add("print_grad_fn_view", [m], repr(m.view(3, 2)))
add("print_grad_fn_select", [m], repr(m.select(0, 1)))
add("print_grad_fn_to_f64", [m], repr(m.to(torch.float64)))

out = {"cases": cases}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shape.json")
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
print("wrote", path, os.path.getsize(path), "bytes,", len(cases), "cases")
