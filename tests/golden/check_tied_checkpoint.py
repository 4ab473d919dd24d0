#!/usr/bin/python3
"""PyTorch loads a tied-weight checkpoint written by dparallel (tests/nn/test_module_tying.cpp).

    /usr/bin/python3 tests/golden/check_tied_checkpoint.py CHECKPOINT.safetensors

Builds the test's model, an embedding whose weight the output head shares, as nanoGPT ties them
(lm_head.weight = wte.weight), reads the file with the independent reader of check_safetensors.py,
checks that it holds both keys with equal values, loads it with load_state_dict(strict=True) and
prints, as the last line, {"tied": <lm_head.weight is still wte.weight>, "output": <the logits for
the test's tokens>} in the tensor JSON form of the golden files. Exits 1 with the problem printed
when the file cannot be read or loaded.
"""
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import Bad, read  # noqa: E402


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 4)
        self.proj = nn.Linear(4, 4)
        self.lm_head = nn.Linear(4, 11, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        return self.lm_head(torch.tanh(self.proj(self.wte(idx))))


def main():
    path = sys.argv[1]
    try:
        _, tensors, _ = read(path)
    except (Bad, ValueError, UnicodeDecodeError) as e:
        print(f"cannot read {path}: {e}")
        return 1
    state = {name: t.clone() for name, t, _, _ in tensors}
    if "wte.weight" not in state or "lm_head.weight" not in state:
        print(f"the file lacks a tied key: {sorted(state)}")
        return 1
    if not torch.equal(state["wte.weight"], state["lm_head.weight"]):
        print("the two tied keys hold different values")
        return 1
    model = TiedLM()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        print(f"load_state_dict(strict=True) failed: {e}")
        return 1
    idx = torch.tensor([1, 4, 7, 10, 0, 3, 3, 9, 2, 5, 6, 8]).reshape(3, 4)
    with torch.no_grad():
        y = model(idx)
    tied = model.lm_head.weight is model.wte.weight
    print(json.dumps({"tied": tied, "output": {"dtype": "float32", "shape": list(y.shape), "data": y.reshape(-1).tolist()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
