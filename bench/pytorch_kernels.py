#!/usr/bin/python3
"""PyTorch side of bench/bench_kernels.cpp: the same kernels, shapes and timing protocol.

Protocol (identical to the C++ side): build the inputs once, run the op a few times to warm up,
time one call to choose N so that N calls take at least --min-seconds (N >= --min-reps), then
time N calls one by one and report the median, min and max in milliseconds.

    /usr/bin/python3 bench/pytorch_kernels.py --threads 2 --json
"""
import argparse
import json
import statistics
import sys
import time

import torch

def rnn_inputs(kind, train, packed=False):
    """One LSTM or GRU layer (PyTorch's init) and its input [50, 32, 256] (packed: lengths 50..19)."""
    m = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(256, 256).requires_grad_(train)
    x = torch.randn(50, 32, 256)
    if packed:  # a leaf data tensor, as on the C++ side
        p = torch.nn.utils.rnn.pack_padded_sequence(x, torch.arange(50, 18, -1))
        return (m, torch.nn.utils.rnn.PackedSequence(p.data.requires_grad_(train), p.batch_sizes))
    return (m, x.requires_grad_(train))


def train_step(m, x):
    with torch.enable_grad():
        out = m(x)[0]
        (out.data if isinstance(out, torch.nn.utils.rnn.PackedSequence) else out).sum().backward()


# (name, shape string, input factory, op). Kept in step with kOps in bench_kernels.cpp.
OPS = [
    ("mm", "[1024, 1024] @ [1024, 1024]",
     lambda: (torch.randn(1024, 1024), torch.randn(1024, 1024)), lambda a, b: torch.mm(a, b)),
    ("add", "[16777216] + [16777216]",
     lambda: (torch.randn(1 << 24), torch.randn(1 << 24)), lambda a, b: torch.add(a, b)),
    ("softmax", "[4096, 1024], dim=-1",
     lambda: (torch.randn(4096, 1024),), lambda a: torch.softmax(a, -1)),
    ("sum", "[4096, 1024], dim=0",
     lambda: (torch.randn(4096, 1024),), lambda a: torch.sum(a, 0)),
    ("relu", "[16777216]",
     lambda: (torch.randn(1 << 24),), lambda a: torch.relu(a)),
    ("lstm_layer", "T=50, B=32, I=H=256, forward", lambda: rnn_inputs("lstm", False), lambda m, x: m(x)),
    ("gru_layer", "T=50, B=32, I=H=256, forward", lambda: rnn_inputs("gru", False), lambda m, x: m(x)),
    ("lstm_layer_train", "T=50, B=32, I=H=256, forward+backward", lambda: rnn_inputs("lstm", True), lambda m, x: train_step(m, x)),
    ("gru_layer_train", "T=50, B=32, I=H=256, forward+backward", lambda: rnn_inputs("gru", True), lambda m, x: train_step(m, x)),
    ("gru_packed_train", "packed, lengths 50..19 (B=32), I=H=256, forward+backward",
     lambda: rnn_inputs("gru", True, packed=True), lambda m, x: train_step(m, x)),
]


def openblas():
    """The OpenBLAS library torch loaded (Debian's torch does its GEMMs there), or None."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "libopenblas" in line})
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):
            pass
    return None


def measure(fn, args, warmup, min_seconds, min_reps):
    for _ in range(warmup):
        fn(*args)
    t0 = time.perf_counter()
    fn(*args)
    one = max(time.perf_counter() - t0, 1e-9)
    reps = max(min_reps, int(min_seconds / one) + 1)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "reps": reps}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads (default: torch's own)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=0.5)
    p.add_argument("--min-reps", type=int, default=5)
    p.add_argument("--only", default="", help="comma-separated op names (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    # torch.set_num_threads does not reach OpenBLAS's own pool, which torch's GEMMs run on.
    blas = openblas()
    if blas is not None:
        blas.openblas_set_num_threads(a.threads)
    torch.manual_seed(0)
    only = set(filter(None, a.only.split(",")))
    results = []
    with torch.no_grad():
        for name, shape, make, fn in OPS:
            if only and name not in only:
                continue
            r = measure(fn, make(), a.warmup, a.min_seconds, a.min_reps)
            results.append({"op": name, "shape": shape, **r})

    out = {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "openblas_threads": blas.openblas_get_num_threads() if blas is not None else None,
        "cpu_capability": next((line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                                if "CPU capability usage" in line), "unknown"),
        "parallel_info": torch.__config__.parallel_info().splitlines()[:4],
        "results": results,
    }
    if a.json:
        json.dump(out, sys.stdout)
        print()
    else:
        print(f"PyTorch {out['torch_version']}, {out['threads']} threads, OpenBLAS threads {out['openblas_threads']}")
        for r in results:
            print(f"{r['op']:8s} {r['shape']:30s} {r['median_ms']:9.3f} ms  [{r['min_ms']:.3f} - {r['max_ms']:.3f}]  n={r['reps']}")


if __name__ == "__main__":
    main()
