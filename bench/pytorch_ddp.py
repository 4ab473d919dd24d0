#!/usr/bin/python3
"""PyTorch side of bench/bench_ddp.cpp: one process of torch-plain, torch-floor or torch-ddp2.

bench_ddp starts this script once per process, the way it starts its own workers, and drives it
over stdin/stdout, one line each way (bench/bench_ddp_worker.h describes the protocol):

    worker -> {"ready": true, ...}          after building the model (and the process group) and --warmup steps
    "run N" -> {"times_ms": [...], ...}     one untimed step, then N timed steps
    "quit"  -> exits

The spec (a JSON argument) gives mode ("plain" or "ddp"), model ("mlp" or "cnn"), rank, world, the
rows [begin, end) of the fixed global batch this process trains on, warmup and bucket_cap_mb. For
"ddp" the environment holds RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (init_method env://,
backend gloo) and the model is wrapped in torch.nn.parallel.DistributedDataParallel with that
bucket cap and otherwise PyTorch's defaults ("fp16": true adds default_hooks.fp16_compress_hook).
A step is zero_grad(set_to_none=True), forward, cross-entropy, backward, SGD step (momentum 0.9),
loss.item(); 1 thread (torch.set_num_threads(1) and OpenBLAS's pool, where Debian's torch does its
GEMMs). Per step: wall time (perf_counter), CPU time of the whole process (process_time: all
threads, Gloo's included) and of the main thread (thread_time), and the phases.

By hand, e.g. the plain MLP for 10 steps:
    echo "run 10" | /usr/bin/python3 bench/pytorch_ddp.py --worker '{"mode": "plain", "model": "mlp", "rows": [0, 256]}'
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

from pytorch_kernels import openblas  # the OpenBLAS library torch loaded (its thread pool)


def make(model):
    """The model and the fixed global batch (bench_data_parallel's models)."""
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        shape, batch = (784,), 256
    else:
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        shape, batch = (1, 28, 28), 128
    return net, shape, batch


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True, help="the spec, JSON")
    spec = json.loads(ap.parse_args().worker)
    torch.set_num_threads(1)
    blas = openblas()
    if blas is not None:
        blas.openblas_set_num_threads(1)

    model = spec.get("model", "mlp")
    torch.manual_seed(0)
    _, shape, batch = make(model)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 10, (batch,))
    begin, end = spec.get("rows", [0, batch])
    x, y = x[begin:end].contiguous(), y[begin:end].contiguous()
    torch.manual_seed(1)
    net, _, _ = make(model)

    if spec["mode"] == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://")
        assert dist.get_rank() == spec.get("rank", 0) and dist.get_world_size() == spec.get("world", 1)
        net = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=spec.get("bucket_cap_mb", 25.0))
        if spec.get("fp16", False):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif spec["mode"] != "plain":
        raise SystemExit(f"pytorch_ddp.py: unknown mode {spec['mode']!r}")

    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        value = float(loss.item())
        t3 = time.perf_counter()
        return value, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3

    for _ in range(spec.get("warmup", 10)):
        step()
    emit({"ready": True, "pid": os.getpid(), "torch": torch.__version__,
          "threads": torch.get_num_threads(), "openblas_threads": blas.openblas_get_num_threads() if blas is not None else None})
    while True:
        line = sys.stdin.readline()
        if not line or line.strip() == "quit":
            break
        if not line.startswith("run "):
            continue
        n = int(line.split()[1])
        step()
        times, cpu, main_cpu, fwd, bwd, opt_ms = [], [], [], [], [], []
        loss = None
        for _ in range(n):
            c0, m0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
            loss, f, b, o = step()
            times.append((time.perf_counter() - t0) * 1e3)
            main_cpu.append((time.thread_time() - m0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
            fwd.append(f)
            bwd.append(b)
            opt_ms.append(o)
        emit({"times_ms": times, "cpu_ms": cpu, "main_cpu_ms": main_cpu, "loss": loss,
              "phases": {"forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": opt_ms}})
    if spec["mode"] == "ddp":
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # reported to bench_ddp as the worker's error
        emit({"error": f"{type(e).__name__}: {e}"})
        raise
