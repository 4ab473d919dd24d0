#!/usr/bin/python3
"""Golden values for the text-data part: nn::utils::rnn::pad_sequence, CharTokenizer and
TokenFileDataset (include/dp/nn/utils/rnn.h, include/dp/data/char_tokenizer.h,
include/dp/data/token_file_dataset.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_text_data.py
Writes tests/golden/text_data.json: {"cases": [...]}, each with a "name" and a "kind":
  "pad_sequence": "sequences" [tensor, ...], "batch_first", "padding_value", the result "output"
                  and, for floating sequences, "r" (loss weights) and "grads" [tensor, ...] of
                  loss = sum(output * r) with respect to each sequence.
  "char_tokenizer": nanoGPT's data/shakespeare_char/prepare.py on "text": "chars" (the sorted
                  distinct characters, as code points), "ids" (encode(text)) and "token_bytes_hex"
                  (np.array(ids, dtype=np.uint16).tofile's bytes, hex).
  "token_windows": nanoGPT's train.py get_batch on the uint16 array "tokens" at offsets "ix":
                  "x" = tokens[i:i+block_size], "y" = tokens[i+1:i+1+block_size], int64.
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.bool: "bool"}


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:  # the shortest decimal that reads back as the same float32
        data = [float(repr(np.float32(v))) for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


cases = []


def pad_case(name, seqs, batch_first, padding_value):
    seqs = [s.clone().requires_grad_(s.is_floating_point()) for s in seqs]
    out = pad_sequence(seqs, batch_first=batch_first, padding_value=padding_value)
    c = {"name": name, "kind": "pad_sequence", "sequences": [t2j(s) for s in seqs], "batch_first": batch_first,
         "padding_value": padding_value, "output": t2j(out)}
    if out.is_floating_point():
        r = torch.randn(out.shape, dtype=out.dtype)
        grads = torch.autograd.grad((out * r).sum(), seqs)
        c["r"] = t2j(r)
        c["grads"] = [t2j(g) for g in grads]
    cases.append(c)


f32 = lambda *shape: torch.randn(*shape, dtype=torch.float32)
f64 = lambda *shape: torch.randn(*shape, dtype=torch.float64)
pad_case("time_major", [f32(3, 2), f32(1, 2), f32(2, 2)], False, 0.0)
pad_case("batch_first", [f32(3, 2), f32(1, 2), f32(2, 2)], True, -1.5)
pad_case("one_d", [f32(4), f32(2)], False, 7.0)
pad_case("trailing_dims_and_empty", [f64(2, 2, 3), f64(0, 2, 3), f64(3, 2, 3)], True, 0.25)
pad_case("trailing_dims_time_major", [f64(1, 2, 3), f64(3, 2, 3)], False, -2.0)
pad_case("int_truncates_padding", [torch.tensor([1, 2, 3]), torch.tensor([4])], True, -100.7)
pad_case("bool", [torch.tensor([True]), torch.tensor([False, True])], False, 2.0)
pad_case("all_empty", [f32(0, 3), f32(0, 3)], False, 1.0)
pad_case("single", [f32(2, 3)], True, 0.0)

# nanoGPT data/shakespeare_char/prepare.py
text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\tcaf\u00e9 \u4e2d\u6587 \U0001F600 \u00e9!\r\n"
chars = sorted(list(set(text)))
stoi = {ch: i for i, ch in enumerate(chars)}
ids = [stoi[c] for c in text]
cases.append({"name": "shakespeare_char", "kind": "char_tokenizer", "text": text, "chars": [ord(c) for c in chars], "ids": ids,
              "token_bytes_hex": np.array(ids, dtype=np.uint16).tobytes().hex()})

# nanoGPT train.py get_batch
rng = np.random.default_rng(0)
tokens = rng.integers(0, 65535, size=40, dtype=np.uint16)
block_size = 5
ix = [0, 17, 34, 3]
x = torch.stack([torch.from_numpy((tokens[i:i + block_size]).astype(np.int64)) for i in ix])
y = torch.stack([torch.from_numpy((tokens[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
cases.append({"name": "get_batch", "kind": "token_windows", "tokens": tokens.tolist(), "block_size": block_size, "ix": ix,
              "x": t2j(x), "y": t2j(y)})

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "text_data.json")
with open(path, "w") as f:
    json.dump({"generator": "tests/golden/gen_text_data.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
print("wrote", path, len(cases), "cases")
