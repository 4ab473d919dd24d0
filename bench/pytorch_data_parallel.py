#!/usr/bin/python3
"""PyTorch side of bench/bench_data_parallel.cpp: the plain module with 1, 2, ... threads.

torch.nn.DataParallel needs CUDA devices, so on a CPU machine the honest comparison for dparallel's
DataParallel on K CPU devices is PyTorch's own way of using K cores: one module, K intra-op threads
(torch.set_num_threads, and OpenBLAS's pool, which Debian's torch does its GEMMs in).

Protocol (the C++ side's): one model per thread count, all built from the same seed; for each thread
count in ascending order, --warmup steps, then steps/rounds x rounds steps (the C++ side's count), timed one by one;
median/min/max in ms, and the median CPU time of all the process's threads per step. A step is zero_grad, forward, cross-entropy, backward, SGD (momentum 0.9).

    /usr/bin/python3 bench/pytorch_data_parallel.py --model mlp --threads 1,2 --json
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn

from pytorch_kernels import openblas  # the OpenBLAS library torch loaded (its thread pool)


def make(model):
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        return net, torch.randn(256, 784), torch.randint(0, 10, (256,))
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return net, torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    blas = openblas()

    def set_threads(n):
        torch.set_num_threads(n)
        if blas is not None:
            blas.openblas_set_num_threads(n)

    threads = [int(t) for t in a.threads.split(",") if t]
    torch.manual_seed(0)
    _, x, y = make(a.model)
    runs = []
    for t in threads:
        torch.manual_seed(1)
        net, _, _ = make(a.model)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        def step(net=net, opt=opt, loss_fn=loss_fn):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            return loss

        runs.append({"threads": t, "step": step, "times": [], "cpu": []})

    # Thread counts in ascending order, each as one block (not interleaved): after a multi-threaded
    # step, the idle OpenMP and OpenBLAS threads spin for a while, which would load the other cores
    # during a following 1-thread step.
    per_round = max(1, math.ceil(a.steps / a.rounds))
    for r in sorted(runs, key=lambda r: r["threads"]):
        set_threads(r["threads"])
        for _ in range(a.warmup):
            r["step"]()
        for _ in range(per_round * a.rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            r["step"]()
            r["times"].append((time.perf_counter() - t0) * 1e3)
            r["cpu"].append((time.process_time() - c0) * 1e3)
    out = []
    for r in runs:
        set_threads(r["threads"])
        t = r["times"]
        out.append({"threads": r["threads"], "threads_read_back": torch.get_num_threads(),
                    "openblas_threads": blas.openblas_get_num_threads() if blas is not None else None,
                    "median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "steps": len(t),
                    "cpu_ms_median": statistics.median(r["cpu"]),
                    "final_loss": float(r["step"]().item())})
    result = {"torch": torch.__version__, "model": a.model, "results": out}
    if a.json:
        json.dump(result, sys.stdout)
    else:
        for r in out:
            print(f"{a.model} {r['threads']} thread(s): median {r['median_ms']:.1f} ms [{r['min_ms']:.1f} - {r['max_ms']:.1f}]")


if __name__ == "__main__":
    main()
