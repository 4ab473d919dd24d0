#!/usr/bin/python3
"""PyTorch side of bench/bench_attention.cpp: attention in the materialising form PyTorch 1.13 offers
(it has no F.scaled_dot_product_attention), with the C++ side's cases and timing protocol.

    out = softmax(q @ k^T * scale + mask) @ v        (mask: -inf above the diagonal when causal)

Timing (--json): for each case and mode ("fwd": the forward without autograd; "fwd+bwd": the
forward with autograd, then torch.autograd.grad of q, k, v for a fixed incoming gradient), a few
warm-up calls, then N calls timed one by one (N so that they take at least --min-seconds, N >=
--min-reps); median, min and max in ms.

Memory (--memory CASE MODE): in this fresh process, after a tiny warm-up call, the peak resident
memory the call adds: ru_maxrss after the call minus the resident size before it (PyTorch 1.13 keeps
no statistics of its CPU allocations; large blocks go back to the system when freed, so the
resident size follows what is allocated). Prints one JSON object.

    /usr/bin/python3 bench/pytorch_attention.py --threads 2 --json
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time

import torch

# name -> (B, H, L, S, d, causal). Kept in step with cases() in bench_attention.cpp.
CASES = {
    "T1024": (4, 12, 1024, 1024, 64, False),
    "T1024-causal": (4, 12, 1024, 1024, 64, True),
    "T64": (4, 12, 64, 64, 64, False),
    "T64-causal": (4, 12, 64, 64, 64, True),
}
MODES = ["fwd", "fwd+bwd"]


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


def make(case, grad):
    B, H, L, S, d, causal = CASES[case] if isinstance(case, str) else case
    q = torch.randn(B, H, L, d, requires_grad=grad)
    k = torch.randn(B, H, S, d, requires_grad=grad)
    v = torch.randn(B, H, S, d, requires_grad=grad)
    g = torch.randn(B, H, L, d)
    mask = None
    if causal:
        mask = torch.zeros(L, S).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return q, k, v, g, mask, 1.0 / math.sqrt(d)


def attention(q, k, v, mask, scale):
    w = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        w = w + mask
    return torch.softmax(w, -1) @ v


def step_fn(mode, q, k, v, g, mask, scale):
    if mode == "fwd":
        def fwd():
            with torch.no_grad():
                attention(q, k, v, mask, scale)
        return fwd

    def fwd_bwd():
        out = attention(q, k, v, mask, scale)
        torch.autograd.grad(out, (q, k, v), g)
    return fwd_bwd


def measure(fn, warmup, min_seconds, min_reps):
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-9)
    reps = max(min_reps, int(min_seconds / one) + 1)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "reps": reps}


def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def memory(case, mode):
    B, H, L, S, d, causal = CASES[case]
    step_fn(mode, *make((1, 1, 8, 8, d, causal), mode != "fwd"))()  # libraries and thread pools up
    fn = step_fn(mode, *make(case, mode != "fwd"))
    before = resident()
    fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"case": case, "mode": mode, "peak_extra_bytes": max(0, peak - before), "resident_before": before}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated case names (default: all)")
    p.add_argument("--memory", nargs=2, metavar=("CASE", "MODE"), help="measure one call's peak memory instead of timing")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    blas = openblas()  # torch.set_num_threads does not reach OpenBLAS's own pool
    if blas is not None:
        blas.openblas_set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.memory:
        print(json.dumps(memory(*a.memory)))
        return
    only = set(filter(None, a.only.split(",")))
    results = []
    for case in CASES:
        if only and case not in only:
            continue
        for mode in MODES:
            fn = step_fn(mode, *make(case, mode != "fwd"))
            results.append({"case": case, "mode": mode, **measure(fn, a.warmup, a.min_seconds, a.min_reps)})
    out = {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "openblas_threads": blas.openblas_get_num_threads() if blas is not None else None,
        "results": results,
    }
    if a.json:
        json.dump(out, sys.stdout)
        print()
    else:
        for r in results:
            print(f"{r['case']:14s} {r['mode']:8s} {r['median_ms']:9.2f} ms [{r['min_ms']:.2f} - {r['max_ms']:.2f}] n={r['reps']}")


if __name__ == "__main__":
    main()
