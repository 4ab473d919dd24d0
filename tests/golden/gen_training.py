#!/usr/bin/python3
"""Golden training runs (tests/optim/test_golden_training.cpp).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_training.py
Writes tests/golden/training_init.safetensors (the initial weights of an MLP
Sequential(Linear(6, 16), Tanh(), Linear(16, 3)), keys "0.weight", "0.bias", "2.weight", "2.bias")
and tests/golden/training.json: the 20 input batches [8, 6] and class targets, then for each run
(SGD lr 0.1 momentum 0.9; Adam lr 0.01) the cross-entropy loss before each step and the weights
after the last step. A tensor is {"dtype", "shape", "data"}.
"""
import json
import os
import struct

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(1234)


def t2j(t):
    t = t.detach().contiguous()
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data": t.reshape(-1).tolist()}


def write_safetensors(tensors, path):
    """A minimal safetensors writer (the format's reference layout, float32 tensors only)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = tensors[name].detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_model():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


init = make_model()
write_safetensors(init.state_dict(), os.path.join(HERE, "training_init.safetensors"))
batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(20)]

runs = {}
for name, make_opt in [("sgd_momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
                       ("adam", lambda p: torch.optim.Adam(p, lr=0.01))]:
    model = make_model()
    model.load_state_dict(init.state_dict())
    opt = make_opt(model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    runs[name] = {"losses": losses, "final": {k: t2j(v) for k, v in model.state_dict().items()}}

with open(os.path.join(HERE, "training.json"), "w") as f:
    json.dump({"generator": "gen_training.py", "torch": torch.__version__,
               "batches": [{"input": t2j(x), "target": t2j(y)} for x, y in batches], "runs": runs}, f)
print("wrote training_init.safetensors and training.json")
