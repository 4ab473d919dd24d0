#!/usr/bin/python3
"""PyTorch loads a model checkpoint written by dparallel (tests/nn/test_checkpoint.cpp).

    /usr/bin/python3 tests/golden/check_module_checkpoint.py CHECKPOINT.safetensors

Builds nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)), reads the file with the
independent reader of check_safetensors.py (the `safetensors` package is not in Debian), loads it
with model.load_state_dict(..., strict=True) -- so every key must be PyTorch's own and every shape
must fit -- and prints, as the last line, {"output": <the model's output for
arange(12).reshape(2, 6) / 10 - 0.3>} in the tensor JSON form of the golden files. Exits 1 with the
problem printed when the file cannot be read or loaded.
"""
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import Bad, read  # noqa: E402


def main():
    path = sys.argv[1]
    try:
        metadata, tensors, _ = read(path)
    except (Bad, ValueError, UnicodeDecodeError) as e:
        print(f"cannot read {path}: {e}")
        return 1
    state = {name: t.clone() for name, t, _, _ in tensors}
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        print(f"load_state_dict(strict=True) failed: {e}")
        return 1
    x = torch.arange(12, dtype=torch.float32).reshape(2, 6) / 10 - 0.3
    with torch.no_grad():
        y = model(x)
    print(f"metadata {metadata}")
    print(json.dumps({"output": {"dtype": "float32", "shape": list(y.shape), "data": y.reshape(-1).tolist()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
