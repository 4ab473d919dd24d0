#!/usr/bin/python3
"""PyTorch side of bench/bench_training.cpp: the same models, batches, optimizers and protocol.

A step is zero_grad, forward, loss, backward, optimizer step, on fixed random batches.
Protocol (identical to the C++ side): build model and data, read the resident set size (RSS),
reset the peak-RSS counter (/proc/self/clear_refs), run --warmup steps, time --steps steps one by
one, report median/min/max in microseconds and the peak RSS growth over the pre-training RSS (MiB).

    /usr/bin/python3 bench/pytorch_training.py --threads 1 --models seed,mlp,cnn --json
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def seed_model():
    model = nn.Sequential(nn.Linear(5, 1), nn.Sigmoid())
    x, y = torch.randn(30, 5), torch.rand(30, 1).round()
    return model, x, y, nn.BCELoss(), torch.optim.SGD(model.parameters(), lr=1e-3)


def mlp_model():
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x, y = torch.randn(256, 784), torch.randint(0, 10, (256,))
    return model, x, y, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def cnn_model():
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    return model, x, y, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


MODELS = {"seed": seed_model, "mlp": mlp_model, "cnn": cnn_model}


def run(name, warmup, steps):
    torch.manual_seed(0)
    model, x, y, loss_fn, opt = MODELS[name]()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rss0 = rss_kib("VmRSS")
    peak_ok = reset_peak()
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
    peak = rss_kib("VmHWM") - rss0 if peak_ok else None
    return {"model": name, "median_us": statistics.median(times), "min_us": min(times), "max_us": max(times),
            "steps": steps, "peak_rss_growth_mib": None if peak is None else peak / 1024.0,
            "final_loss": float(step().item())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="seed,mlp,cnn")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0, help="0: per-model default")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    default_steps = {"seed": 2000, "mlp": 40, "cnn": 20}
    out = []
    for name in a.models.split(","):
        out.append(run(name, a.warmup, a.steps or default_steps[name]))
    result = {"torch": torch.__version__, "threads": a.threads, "results": out}
    if a.json:
        json.dump(result, sys.stdout)
    else:
        for r in out:
            print(f"{r['model']:5s} median {r['median_us']:10.1f} us  peak RSS growth {r['peak_rss_growth_mib']} MiB")


if __name__ == "__main__":
    main()
