#!/usr/bin/python3
"""Reads a safetensors file written by dparallel with PyTorch alone and checks it against expected values.

    /usr/bin/python3 tests/golden/check_safetensors.py FILE EXPECTED.json [KEY]

EXPECTED.json is tests/golden/safetensors.json (written by gen_safetensors.py) or any file of the same
form; KEY picks the entry of its "files" map (default: the first). The reader is independent of the
C++ one: a pure-python transcription of the reference reader (safetensors/src/tensor.rs,
read_metadata() and validate()), tensors built with torch.frombuffer. Checks
  - the format rules: header length <= 100 MB and inside the file, UTF-8 JSON object starting with
    '{', dtype/shape/data_offsets per tensor, shape x dtype size == end - begin, offsets tiling the
    data buffer exactly (no hole, no overlap, nothing after the last tensor);
  - the reference writer's layout: header padded to a multiple of 8, tensors in its order (dtype
    order descending, then name);
  - the content: same metadata, same names, and per tensor the same dtype, shape and bytes (bit for
    bit) as EXPECTED, and values equal to "data" once read by torch.
Prints "OK: N tensors" and exits 0, or prints the first problem and exits 1.
"""
import json
import math
import struct
import sys

import torch

MAX_HEADER = 100_000_000
DTYPES = {  # format name -> (torch dtype, element size, reference order rank)
    "BOOL": (torch.bool, 1, 0), "U8": (torch.uint8, 1, 1), "F16": (torch.float16, 2, 7), "BF16": (torch.bfloat16, 2, 8),
    "I32": (torch.int32, 4, 9), "F32": (torch.float32, 4, 11), "F64": (torch.float64, 8, 12), "I64": (torch.int64, 8, 13),
}
DP_NAME = {torch.bool: "bool", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
           torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64"}


class Bad(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Bad(msg)


def read(path):
    """Returns (metadata, [(name, tensor, raw bytes)] in data order, header length)."""
    with open(path, "rb") as f:
        buf = f.read()
    check(len(buf) >= 8, f"file has {len(buf)} bytes, fewer than 8")
    (n,) = struct.unpack("<Q", buf[:8])
    check(n <= MAX_HEADER, f"header length {n} over the limit")
    check(8 + n <= len(buf), f"header length {n} past the end of the file ({len(buf)} bytes)")
    text = buf[8:8 + n].decode("utf-8")  # raises on invalid UTF-8
    check(text.startswith("{"), "header does not start with '{'")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        check(len(keys) == len(set(keys)), f"duplicate keys in {keys}")
        return dict(pairs)

    header = json.loads(text, object_pairs_hook=no_duplicates)
    check(isinstance(header, dict), "header is not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        check(isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()), "__metadata__ is not {str: str}")
    infos = []
    for name, info in header.items():
        check(set(info) >= {"dtype", "shape", "data_offsets"}, f"{name}: missing fields in {info}")
        check(info["dtype"] in DTYPES, f"{name}: unknown dtype {info['dtype']}")
        shape = info["shape"]
        check(all(isinstance(d, int) and d >= 0 for d in shape), f"{name}: bad shape {shape}")
        offsets = info["data_offsets"]
        check(isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and o >= 0 for o in offsets),
              f"{name}: bad data_offsets {offsets}")
        begin, end = offsets
        infos.append((begin, end, name, info["dtype"], shape))
    infos.sort(key=lambda i: (i[0], i[1]))
    data = buf[8 + n:]
    pos = 0
    out = []
    for begin, end, name, dt, shape in infos:
        check(begin == pos and end >= begin, f"{name}: data_offsets [{begin}, {end}] do not start where the previous tensor ends ({pos})")
        torch_dtype, size, _ = DTYPES[dt]
        check(math.prod(shape) * size == end - begin, f"{name}: shape {shape} x {dt} != {end - begin} bytes")
        raw = data[begin:end]
        if end > begin:
            t = torch.frombuffer(bytearray(raw), dtype=torch_dtype).reshape(shape)
        else:
            t = torch.zeros(shape, dtype=torch_dtype)
        out.append((name, t, dt, raw))
        pos = end
    check(pos == len(data), f"tensors cover {pos} bytes of a {len(data)}-byte data buffer")
    return metadata or {}, out, n


def same_value(a, e):
    if isinstance(e, str):
        return isinstance(a, float) and (math.isnan(a) if e == "nan" else a == float(e))
    return a == e


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    path, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path, encoding="utf-8") as f:
        files = json.load(f)["files"]
    key = sys.argv[3] if len(sys.argv) == 4 else next(iter(files))
    expected = files[key]
    try:
        metadata, tensors, n = read(path)
        check(n % 8 == 0, f"header length {n} is not a multiple of 8")
        names = [name for name, _, _, _ in tensors]
        ref_order = sorted(names, key=lambda k: (-DTYPES[next(dt for nm, _, dt, _ in tensors if nm == k)][2], k.encode("utf-8")))
        check(names == ref_order, f"tensor order {names} is not the reference writer's {ref_order}")
        check(metadata == expected["metadata"], f"metadata {metadata} != expected {expected['metadata']}")
        check(sorted(names) == sorted(expected["tensors"]), f"names {sorted(names)} != expected {sorted(expected['tensors'])}")
        for name, t, dt, raw in tensors:
            e = expected["tensors"][name]
            check(DP_NAME[t.dtype] == e["dtype"], f"{name}: dtype {t.dtype} != expected {e['dtype']}")
            check(list(t.shape) == e["shape"], f"{name}: shape {list(t.shape)} != expected {e['shape']}")
            check(raw.hex() == e["hex"], f"{name}: bytes {raw.hex()} != expected {e['hex']}")
            values = (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).reshape(-1).tolist()
            for i, (a, ev) in enumerate(zip(values, e["data"])):
                check(same_value(a, ev), f"{name}: element {i} is {a}, expected {ev}")
            check(len(values) == len(e["data"]), f"{name}: {len(values)} elements, expected {len(e['data'])}")
    except (Bad, ValueError, UnicodeDecodeError) as err:
        print(f"{path}: {err}")
        return 1
    print(f"OK: {len(tensors)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
