#!/usr/bin/env python3
"""PyTorch side of bench/bench_cuda_training.cpp and bench/bench_cuda_data_parallel.cpp (GPU).

The same models, batches, optimizers and protocol as the C++ side:
  seed  Linear(5,1) + Sigmoid, batch 30, BCELoss, SGD lr 1e-3
  mlp   784-1024-1024-10, batch 4096, cross-entropy, SGD lr 0.01 momentum 0.9
  cnn   conv32-pool-conv64-pool-fc128-fc10 on 1x28x28, batch 512, cross-entropy, SGD momentum 0.9
A step is zero_grad, forward, loss, backward, optimizer step on a fixed random batch on cuda:0.
Timing: --warmup steps, then --repeats times: synchronize, clock, --steps steps, synchronize, clock;
the time per step of a repeat is its wall time over --steps; median, min and max over the repeats
(microseconds). dtype bfloat16 converts the model and the input to bfloat16 (targets stay int64 /
float for the loss), as the C++ side does.

Modes (one JSON object on stdout):
  --mode training   rows for --models and --dtypes; "eager" steps, and for the seed model also the
                    step replayed as a CUDA graph (torch.cuda.graphs, PyTorch's own capture API)
  --mode gemm       torch.matmul on the MLP's GEMM shapes (forward and backward), TFLOP/s
  --mode dp         plain module vs nn.DataParallel(device_ids=[0]) for --models
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn


def seed_model():
    return nn.Sequential(nn.Linear(5, 1), nn.Sigmoid()), 30, (5,), "bce", 1e-3, 0.0


def mlp_model():
    return (nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)),
            4096, (784,), "ce", 0.01, 0.9)


def cnn_model():
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return model, 512, (1, 28, 28), "ce", 0.01, 0.9


MODELS = {"seed": seed_model, "mlp": mlp_model, "cnn": cnn_model}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build(name, dtype, wrap_dp=False):
    torch.manual_seed(0)
    model, batch, feat, loss_kind, lr, momentum = MODELS[name]()
    dev = torch.device("cuda:0")
    model = model.to(dev, DTYPES[dtype])
    if wrap_dp:
        model = nn.DataParallel(model, device_ids=[0])
    x = torch.randn(batch, *feat, device=dev, dtype=DTYPES[dtype])
    if loss_kind == "bce":
        y = (torch.rand(batch, 1, device=dev) > 0.5).to(DTYPES[dtype])
        loss_fn = nn.BCELoss()
    else:
        y = torch.randint(0, 10, (batch,), device=dev)
        loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, batch


def time_steps(step, warmup, steps, repeats):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - t0) * 1e6 / steps)
    return {"median_us": statistics.median(per_step), "min_us": min(per_step), "max_us": max(per_step), "repeats": repeats,
            "steps_per_repeat": steps}


def graphed(step, warmup):
    """The step captured once as a CUDA graph (PyTorch's documented whole-network capture recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


def training(a):
    rows = []
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            step, batch = build(name, dtype)
            steps = a.steps or (2000 if name == "seed" else 50)
            r = {"model": name, "dtype": dtype, "batch": batch, "eager": time_steps(step, a.warmup, steps, a.repeats)}
            r["final_loss"] = float(step().float().item())
            if name == "seed":
                fresh, _ = build(name, dtype)
                r["graph"] = time_steps(graphed(fresh, a.warmup), a.warmup, steps, a.repeats)
            rows.append(r)
    return rows


def gemm(a):
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    # (m, k, n) of the MLP's forward GEMMs at batch 4096 and their two backward GEMMs each.
    for (m, k, n) in [(4096, 784, 1024), (4096, 1024, 1024), (4096, 1024, 10)]:
        for label, shape in [("fwd", (m, k, n)), ("grad_in", (m, n, k)), ("grad_w", (n, m, k))]:
            for dtype in a.dtypes.split(","):
                mm, kk, nn_ = shape
                A = torch.randn(mm, kk, device=dev, dtype=DTYPES[dtype])
                B = torch.randn(kk, nn_, device=dev, dtype=DTYPES[dtype])
                t = time_steps(lambda: torch.matmul(A, B), 10, 100, a.repeats)
                t["tflops"] = 2.0 * mm * kk * nn_ / (t["median_us"] * 1e-6) / 1e12
                rows.append({"gemm": label, "m": mm, "k": kk, "n": nn_, "dtype": dtype, "pytorch": t})
    return rows


def data_parallel(a):
    rows = []
    for name in a.models.split(","):
        for wrap in (False, True):
            step, batch = build(name, "float32", wrap_dp=wrap)
            rows.append({"model": name, "config": "dp1" if wrap else "plain", "batch": batch,
                         "pytorch": time_steps(step, a.warmup, a.steps or 50, a.repeats)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["training", "gemm", "dp"], default="training")
    ap.add_argument("--models", default="seed,mlp,cnn")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0, help="steps per repeat; 0: 2000 for seed, 50 otherwise")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        json.dump({"error": "torch.cuda.is_available() is False"}, sys.stdout)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = {"training": training, "gemm": gemm, "dp": data_parallel}[a.mode](a)
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "rows": rows}, sys.stdout)


if __name__ == "__main__":
    main()
