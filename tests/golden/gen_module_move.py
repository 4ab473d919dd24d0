#!/usr/bin/python3
"""Golden values for moving a module while a graph made before the move is alive
(tests/nn/test_module_move.cpp).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_module_move.py
Writes tests/golden/module_move.json.

PyTorch's Module.to moves each parameter in place (param.data = param.data.to(...), the C++
set_data), and set_data forgets the parameter's cached AccumulateGrad node when the new data has
another device or dtype. So a graph made after the move gets a new one, and a graph made before
keeps the old one, which still delivers gradients as they were computed (old dtype, old device)
into the same parameter's .grad. A CPU-only PyTorch has no second device; a dtype move (float32 ->
float64) takes exactly the same path, so the cases move the dtype:

    lin = nn.Linear(3, 2) with weight W, bias B; x = X; loss(y) = (y * C).sum()
    y_old = lin(x)                 # the old graph, kept alive
    lin.double()                   # the move
    then backward through the new graph (lin(X.double())) and/or the old one, in the case's order

Each case records, after each backward, {"weight_grad", "bias_grad"} (tensors, in the dtype PyTorch
leaves them) and, for "old_graph_input_grad" (x requires grad), "input_grad". "plain" is the
gradient of one backward without any move (float32). A tensor is {"dtype", "shape", "data"}.
"""
import json
import os

import torch
import torch.nn as nn

DT = {torch.float32: "float32", torch.float64: "float64"}
W = [[0.5, -0.25, 0.75], [1.0, 0.125, -0.5]]
B = [0.25, -0.75]
X = [[1.0, 2.0, -1.0], [0.5, -1.5, 2.0], [-2.0, 0.25, 1.0], [1.5, 1.0, -0.5]]
C = [[1.0, -2.0], [0.5, 1.0], [-1.0, 0.25], [2.0, 0.5]]


def t2j(t):
    t = t.detach()
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": t.reshape(-1).tolist()}


def make():
    lin = nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(W))
        lin.bias.copy_(torch.tensor(B))
    return lin


def grads(lin):
    return {"weight_grad": t2j(lin.weight.grad), "bias_grad": t2j(lin.bias.grad)}


def run(order, input_requires_grad=False):
    lin = make()
    x = torch.tensor(X).requires_grad_(input_requires_grad)
    c = torch.tensor(C)
    y_old = lin(x)
    lin.double()
    steps = []
    for which in order:
        if which == "new":
            (lin(torch.tensor(X, dtype=torch.float64)) * c.double()).sum().backward()
        else:
            (y_old * c).sum().backward()
        step = grads(lin)
        if input_requires_grad:
            step["input_grad"] = t2j(x.grad)
        steps.append(step)
    return {"param_dtype": DT[lin.weight.dtype], "steps": steps}


def main():
    lin = make()
    (lin(torch.tensor(X)) * torch.tensor(C)).sum().backward()
    out = {"W": W, "B": B, "X": X, "C": C, "plain": grads(lin),
           "cases": [dict(name="new_then_old", **run(["new", "old"])),
                     dict(name="old_then_new", **run(["old", "new"])),
                     dict(name="old_graph_input_grad", **run(["old"], input_requires_grad=True))]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_move.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
