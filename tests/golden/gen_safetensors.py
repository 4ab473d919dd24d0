#!/usr/bin/python3
"""Safetensors fixtures written by PyTorch, for tests/core/test_serialize.cpp.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_safetensors.py
The `safetensors` package is not in Debian, so the files are written by write_safetensors() below,
a pure-python transcription of the reference writer (safetensors/src/tensor.rs, prepare() and
serialize_to_file()): tensors sorted by the reference's dtype order, descending, then by name;
compact JSON header with "__metadata__" first, each entry {"dtype", "shape", "data_offsets"};
header padded with spaces to a multiple of 8; data contiguous little-endian.

Writes
  tests/golden/safetensors_torch.safetensors      every supported dtype, 0-dim and empty tensors,
                                                  special values, a non-contiguous source, UTF-8 and
                                                  escaped names, metadata
  tests/golden/safetensors_unordered.safetensors  valid but written by a different writer: header
                                                  keys and data in an order of its own, no metadata
                                                  (the reader must sort by offset)
  tests/golden/safetensors.json                   what they hold: {"files": {file: {"metadata",
      "order" (names in data order), "tensors": {name: {"dtype", "shape", "data", "hex"}}}}}
      "data" is flattened row-major (non-finite floats as strings, float16/bfloat16 as their float
      values); "hex" is the exact little-endian bytes, so tests can compare bit for bit.
"""
import json
import math
import os
import struct

import torch

torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))

# Format name and position in the reference's `enum Dtype` (its writer sorts by it, descending).
ST_DTYPE = {
    torch.bool: ("BOOL", 0), torch.uint8: ("U8", 1), torch.float16: ("F16", 7), torch.bfloat16: ("BF16", 8),
    torch.int32: ("I32", 9), torch.float32: ("F32", 11), torch.float64: ("F64", 12), torch.int64: ("I64", 13),
}
DP_DTYPE = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}


def raw_bytes(t):
    """The tensor's elements, contiguous row-major, little-endian."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        t = t.view(torch.int16)
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def header_json(entries, metadata):
    """entries: [(name, tensor, begin, end)] in data order. Compact, UTF-8 kept, as serde_json writes."""
    obj = {}
    if metadata:
        obj["__metadata__"] = dict(sorted(metadata.items()))
    for name, t, begin, end in entries:
        obj[name] = {"dtype": ST_DTYPE[t.dtype][0], "shape": list(t.shape), "data_offsets": [begin, end]}
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_file(path, header, blobs):
    hb = header.encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def write_safetensors(path, tensors, metadata=None):
    """The reference writer's layout. Returns the names in data order."""
    items = sorted(tensors.items(), key=lambda kv: (-ST_DTYPE[kv[1].dtype][1], kv[0].encode("utf-8")))
    entries, blobs, offset = [], [], 0
    for name, t in items:
        b = raw_bytes(t)
        entries.append((name, t, offset, offset + len(b)))
        blobs.append(b)
        offset += len(b)
    write_file(path, header_json(entries, metadata), blobs)
    return [name for name, _ in items]


def num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def tj(t):
    t = t.detach().contiguous()
    data = t.float().reshape(-1).tolist() if t.dtype in (torch.float16, torch.bfloat16) else t.reshape(-1).tolist()
    return {"dtype": DP_DTYPE[t.dtype], "shape": list(t.shape), "data": [num(v) for v in data], "hex": raw_bytes(t).hex()}


def main():
    inf, nan = float("inf"), float("nan")
    tensors = {
        "f64.special": torch.tensor([nan, inf, -inf, -0.0, 5e-324, 1.7976931348623157e308, 1 / 3], dtype=torch.float64),
        "f32.matrix": torch.randn(3, 4),
        "f32.scalar": torch.tensor(3.5),
        "f32.empty": torch.zeros(0, 3),
        "f32.transposed": torch.randn(4, 3).t(),  # non-contiguous: written in row-major order of its view
        "layer.ü.weight": torch.randn(2, 2),       # non-ASCII name, kept as UTF-8 in the header
        'odd "name" \\ here': torch.randn(3),      # JSON escapes in a name
        "f16.values": torch.tensor([65504.0, -65504.0, 6e-8, nan, inf, 0.1, -2.5, 1.0], dtype=torch.float16),
        "bf16.values": torch.cat([torch.randn(10), torch.tensor([nan, -inf, 1e38, -0.0])]).to(torch.bfloat16).reshape(2, 7),
        "i64.extremes": torch.tensor([-2 ** 63, 2 ** 63 - 1, 2 ** 53 + 1, -1, 0], dtype=torch.int64),
        "i64.empty": torch.zeros(0, dtype=torch.int64),
        "i32.values": torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4),
        "u8.values": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
        "bool.mask": torch.tensor([[True, False, True], [False, False, True]]),
        "bool.scalar": torch.tensor(True),
    }
    metadata = {"format": "pt", "note": 'säfe "quoted" \\ back\nslash\ttab', "empty": ""}
    assert not tensors["f32.transposed"].is_contiguous()

    files = {}
    order = write_safetensors(os.path.join(HERE, "safetensors_torch.safetensors"), tensors, metadata)
    files["safetensors_torch.safetensors"] = {"metadata": metadata, "order": order, "tensors": {k: tj(v) for k, v in tensors.items()}}

    # Another writer's valid layout: data in reverse name order, header keys in yet another order.
    other = {"b.weight": torch.randn(2, 3), "a.bias": torch.randn(3).double(), "c.steps": torch.tensor(7), "d.mask": torch.tensor([True, False])}
    data_order = sorted(other, reverse=True)
    entries, blobs, offset = [], [], 0
    for name in data_order:
        b = raw_bytes(other[name])
        entries.append((name, other[name], offset, offset + len(b)))
        blobs.append(b)
        offset += len(b)
    entries_in_header = sorted(entries, key=lambda e: e[0][::-1])  # neither data nor name order
    write_file(os.path.join(HERE, "safetensors_unordered.safetensors"), header_json(entries_in_header, None), blobs)
    files["safetensors_unordered.safetensors"] = {"metadata": {}, "order": data_order, "tensors": {k: tj(v) for k, v in other.items()}}

    with open(os.path.join(HERE, "safetensors.json"), "w") as f:
        json.dump({"files": files}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
