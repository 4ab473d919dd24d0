#!/usr/bin/python3
"""PyTorch side of bench/bench_training.cpp: the same models, batches, optimizers and protocol.

A step is zero_grad, forward, loss, backward, optimizer step, on fixed random batches (the step
returns the loss without reading it; reading it, .item(), is outside the timed step on both sides).
Protocol (identical to the C++ side): build model and data, read the resident set size (RSS),
reset the peak-RSS counter (/proc/self/clear_refs), run --warmup steps, time --steps steps one by
one, report median/min/max in microseconds and the peak RSS growth over the pre-training RSS (MiB).

    /usr/bin/python3 bench/pytorch_training.py --threads 1 --models seed,mlp,cnn --json

--serve is how bench_training drives it: the timed steps come in blocks that alternate with the
C++ side's blocks, so both sides sample the same moments of a machine whose speed drifts. It
reads one JSON request per line on stdin and answers one JSON line on stdout:
    {"cmd": "build", "model": "seed"}            -> {"torch": version}  (model, data, optimizer, RSS
                                                    baseline and peak reset, as above)
    {"cmd": "steps", "n": N, "timed": true,      -> {"times_us": [...]}  (run on that CPU when given)
     "cpu": C}
    {"cmd": "finish"}                            -> {"peak_rss_growth_mib": M, "final_loss": L}
    {"cmd": "quit"}
"""
import argparse
import json
import os
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
DEFAULT_STEPS = {"seed": 5000, "mlp": 100, "cnn": 50}  # as bench_training.cpp


class Run:
    """One model's training step, its RSS baseline and its timings."""

    def __init__(self, name):
        torch.manual_seed(0)
        model, x, y, loss_fn, opt = MODELS[name]()

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        self.step = step
        self.rss0 = rss_kib("VmRSS")
        self.peak_ok = reset_peak()

    def steps(self, n, timed):
        times = []
        for _ in range(n):
            if timed:
                t0 = time.perf_counter()
                self.step()
                times.append((time.perf_counter() - t0) * 1e6)
            else:
                self.step()
        return times

    def peak_growth_mib(self):
        return (rss_kib("VmHWM") - self.rss0) / 1024.0 if self.peak_ok else None


def run(name, warmup, steps):
    r = Run(name)
    r.steps(warmup, False)
    times = r.steps(steps, True)
    return {"model": name, "median_us": statistics.median(times), "min_us": min(times), "max_us": max(times),
            "steps": steps, "peak_rss_growth_mib": r.peak_growth_mib(), "final_loss": float(r.step().item())}


def serve():
    current = None
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "build":
            current = Run(req["model"])
            out = {"torch": torch.__version__}
        elif cmd == "steps":
            if "cpu" in req and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {req["cpu"]})
            out = {"times_us": current.steps(req["n"], req.get("timed", True))}
        elif cmd == "finish":
            out = {"peak_rss_growth_mib": current.peak_growth_mib(), "final_loss": float(current.step().item())}
            current = None
        elif cmd == "quit":
            return
        else:
            out = {"error": f"unknown command {cmd!r}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="seed,mlp,cnn")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0, help="0: per-model default")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve", action="store_true", help="answer bench_training's requests on stdin (see the module doc)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.serve:
        serve()
        return
    out = []
    for name in a.models.split(","):
        out.append(run(name, a.warmup, a.steps or DEFAULT_STEPS[name]))
    result = {"torch": torch.__version__, "threads": a.threads, "results": out}
    if a.json:
        json.dump(result, sys.stdout)
    else:
        for r in out:
            print(f"{r['model']:5s} median {r['median_us']:10.1f} us  peak RSS growth {r['peak_rss_growth_mib']} MiB")


if __name__ == "__main__":
    main()
