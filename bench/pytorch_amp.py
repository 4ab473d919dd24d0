"""PyTorch side of bench/bench_amp.cpp: the same models, batches, optimizers and protocol.

A step is zero_grad, forward and loss (under torch.autocast("cpu", torch.bfloat16) in the bf16
mode, with autocast(enabled=False) in the float32 mode), backward, optimizer step, on fixed random
batches. --warmup steps, then --steps steps timed one by one; each mode's times in milliseconds.

    /usr/bin/python3 bench/pytorch_amp.py --models mlp,cnn --warmup 3 --steps 10 --threads 1

Prints one JSON line: {"torch": version, "results": {model: {mode: [ms, ...]}}}.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def mlp():
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return model, torch.randn(256, 784), torch.randint(0, 10, (256,))


def cnn():
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return model, torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))


def run(make, bf16, warmup, steps):
    torch.manual_seed(0)
    model, x, y = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    makers = {"mlp": mlp, "cnn": cnn}
    results = {}
    for name in a.models.split(","):
        results[name] = {mode: run(makers[name], mode == "bf16", a.warmup, a.steps) for mode in ("float32", "bf16")}
    print(json.dumps({"torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
