#!/usr/bin/python3
"""Golden values for full backward module hooks (tests/nn/test_module_hooks.cpp).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_module_hooks.py
Writes tests/golden/module_hooks.json.

The module takes three tensors and returns two, so every corner of
torch.utils.hooks.BackwardHook shows up:

    fc = nn.Linear(3, 2) with weight W, bias B
    forward(x, y, z) = (fc(x) * y, fc(x).sum())      # z is not used
    x = X, y = Y, z = Z; loss = (out0 * C).sum() [+ 2 * out1]

A full backward hook records (grad_input, grad_output) each time it fires. Cases:
  first_output_only    x, z require grad, y does not; loss uses out0 only: grad_output[1] is None,
                       grad_input[1] (y) and grad_input[2] (z, unused) are zeros.
  both_outputs         the same inputs, loss uses both outputs.
  hook_scales_input    as both_outputs, and the hook returns grad_input with entry 0 times 3:
                       x.grad is tripled, the parameters' gradients are not.
  no_input_requires_grad  no input requires grad: the hook fires at the output with grad_input
                       all None.
Each case has "calls" (one {"grad_input", "grad_output"} per firing; None is null), and the
gradients left in x, z, fc.weight, fc.bias (null where none). A tensor is {"dtype", "shape", "data"}.
"""
import json
import os

import torch
import torch.nn as nn

W = [[0.5, -0.25, 0.75], [1.0, 0.125, -0.5]]
B = [0.25, -0.75]
X = [[1.0, 2.0, -1.0], [0.5, -1.5, 2.0], [-2.0, 0.25, 1.0], [1.5, 1.0, -0.5]]
Y = [[2.0, -1.0], [0.5, 1.5], [-1.0, 0.25], [1.0, 3.0]]
Z = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [1.0, 1.1, 1.2]]
C = [[1.0, -2.0], [0.5, 1.0], [-1.0, 0.25], [2.0, 0.5]]


def t2j(t):
    if t is None:
        return None
    t = t.detach()
    return {"dtype": "float32", "shape": list(t.shape), "data": t.reshape(-1).tolist()}


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor(W))
            self.fc.bias.copy_(torch.tensor(B))

    def forward(self, x, y, z):
        h = self.fc(x)
        return h * y, h.sum()


def run(name, inputs_require_grad, use_both, scale_input0=None):
    m = Pair()
    calls = []

    def hook(module, grad_input, grad_output):
        calls.append({"grad_input": [t2j(g) for g in grad_input], "grad_output": [t2j(g) for g in grad_output]})
        if scale_input0 is not None:
            return (grad_input[0] * scale_input0,) + tuple(grad_input[1:])
        return None

    m.register_full_backward_hook(hook)
    x = torch.tensor(X, requires_grad=inputs_require_grad)
    y = torch.tensor(Y)
    z = torch.tensor(Z, requires_grad=inputs_require_grad)
    a, b = m(x, y, z)
    loss = (a * torch.tensor(C)).sum()
    if use_both:
        loss = loss + 2 * b
    loss.backward()
    return {"name": name, "inputs_require_grad": inputs_require_grad, "use_both": use_both, "scale_input0": scale_input0,
            "calls": calls, "x_grad": t2j(x.grad), "z_grad": t2j(z.grad),
            "weight_grad": t2j(m.fc.weight.grad), "bias_grad": t2j(m.fc.bias.grad)}


def main():
    out = {"W": W, "B": B, "X": X, "Y": Y, "Z": Z, "C": C,
           "cases": [run("first_output_only", True, False),
                     run("both_outputs", True, True),
                     run("hook_scales_input", True, True, scale_input0=3.0),
                     run("no_input_requires_grad", False, True)]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_hooks.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
