#!/usr/bin/python3
"""PyTorch side of bench_gpt: one GPT training step on the CPU, float32 and under bf16 autocast.

The model is nanoGPT's (karpathy/nanoGPT model.py) in plain PyTorch 1.13, which has no
scaled_dot_product_attention: token + position embeddings; per block x = x + attn(ln_1(x)) and
x = x + mlp(ln_2(x)), attention softmax(q k^T / sqrt(hs) + causal mask) v with the mask an additive
[T, T] buffer of 0 and -inf, the MLP Linear(C, 4C) -> GELU(tanh) -> Linear(4C, C); then ln_f and
the head tied to the token embedding (no bias); cross-entropy. No dropout. Initialisation as
nanoGPT (N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 L)), biases zero). AdamW as nanoGPT's
configure_optimizers: lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on tensors with dim >= 2, none
on the others.

Configurations (--configs):
    gpt2   GPT-2 small: 12 layers, 12 heads, 768 channels, vocabulary 50257, 1024 positions;
           batch 4, sequence 64 (llm.c's CPU demo step: 256 tokens).
    small  4 layers, 4 heads, 256 channels, vocabulary 4096, 256 positions; batch 4, sequence 256
           (1024 tokens: attention is a larger share of the step than in gpt2).

A step is zero_grad(set_to_none), forward and loss (inside torch.autocast("cpu", bfloat16) in the
bf16 mode, autocast(enabled=False) in float32), backward, gradient clipping to norm 1.0
(clip_grad_norm_, nanoGPT's grad_clip), optimizer step, on one fixed random batch (tokens and
targets uniform in [0, V)). Protocol: --warmup untimed steps, then --steps steps timed
one by one with time.perf_counter; median, min and max in milliseconds.

The step's GEMM FLOPs (printed, and in the JSON as gemm_gflop) count the matrix products only:
2 n in out per Linear forward and 4 n in out backward (dX and dW) over n = B T tokens, the tied
head (in = C, out = V) included, plus attention's q k^T and att v, 4 B T^2 C per layer forward and
twice that backward. That is 6 n (12 L C^2 + V C) + 12 L B T^2 C; biases, LayerNorm, GELU, softmax,
the loss and AdamW are not GEMMs and are not counted.

    /usr/bin/python3 bench/pytorch_gpt.py --configs gpt2,small --modes float32,bf16 --threads 1,2
    /usr/bin/python3 bench/pytorch_gpt.py --configs gpt2 --threads 1 --json   # one JSON object

Threads: torch.set_num_threads(t) before each entry of --threads.

--serve is how a C++ benchmark interleaves its own steps with these (bench/pytorch_training.py's
protocol): one JSON request per line on stdin, one JSON line answered on stdout:
    {"cmd": "build", "config": "gpt2", "mode": "bf16", "threads": 1}
                                          -> {"torch": version, "gemm_gflop": G, "threads": T}
                                             (model, batch, AdamW; "mode" is the default of "steps")
    {"cmd": "steps", "n": N, "timed": true, "mode": "float32"}
                                          -> {"times_ms": [...]}  (both modes step the one model)
    {"cmd": "finish"}                     -> {"loss": L}  (one more step's loss)
    {"cmd": "quit"}
One model serves both modes, so a process holds one copy of the weights and AdamW's state.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # name: (layers, heads, channels, vocabulary, positions, batch, sequence)
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024, batch=4, seq=64),
    "small": dict(n_layer=4, n_head=4, n_embd=256, vocab_size=4096, block_size=256, batch=4, seq=256),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd)
        self.c_proj = nn.Linear(self.n_embd, self.n_embd)
        t = c["block_size"]
        mask = torch.full((t, t), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, ch = x.shape
        hs = ch // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)) + self.mask[:t, :t]
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, ch)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"]),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gemm_flops(c):
    """The step's matrix-product FLOPs (see the module doc)."""
    n = c["batch"] * c["seq"]
    ch, layers = c["n_embd"], c["n_layer"]
    linear = layers * 12 * ch * ch + c["vocab_size"] * ch
    attention = 12 * layers * c["batch"] * c["seq"] ** 2 * ch
    return 6 * n * linear + attention


def make_step(c):
    """A step function step(bf16) of one model, batch and optimizer."""
    torch.manual_seed(0)
    model = GPT(c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95))
    x = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]))
    y = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]))

    params = list(model.parameters())

    def step(bf16):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    return step


def run(name, mode, threads, warmup, steps):
    c = CONFIGS[name]
    torch.set_num_threads(threads)
    step = make_step(c)
    bf16 = mode == "bf16"
    for _ in range(warmup):
        step(bf16)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step(bf16)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"config": name, "mode": mode, "threads": threads, "median_ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "times_ms": times, "gemm_gflop": gemm_flops(c) / 1e9, "loss": float(loss.item())}


def serve():
    step, default_mode = None, "float32"
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "build":
            c = CONFIGS[req["config"]]
            torch.set_num_threads(int(req.get("threads", 1)))
            step = None  # the old model goes before the new one is made
            step = make_step(c)
            default_mode = req.get("mode", "float32")
            out = {"torch": torch.__version__, "gemm_gflop": gemm_flops(c) / 1e9, "threads": torch.get_num_threads()}
        elif cmd == "steps":
            bf16 = req.get("mode", default_mode) == "bf16"
            times = []
            for _ in range(req["n"]):
                t0 = time.perf_counter()
                step(bf16)
                times.append((time.perf_counter() - t0) * 1e3)
            out = {"times_ms": times if req.get("timed", True) else []}
        elif cmd == "finish":
            out = {"loss": float(step(default_mode == "bf16").item())}
            step = None
        elif cmd == "quit":
            return
        else:
            out = {"error": f"unknown command {cmd!r}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="gpt2,small")
    ap.add_argument("--modes", default="float32,bf16")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--serve", action="store_true", help="answer requests on stdin (see the module doc)")
    a = ap.parse_args()
    if a.serve:
        serve()
        return
    results = []
    if not a.json:
        print(f"torch {torch.__version__}; median (min-max) ms per step over {a.steps} steps after {a.warmup} warm-up")
        print(f"{'config':7s} {'mode':8s} {'thr':>3s} {'median ms':>10s} {'min-max ms':>17s} {'GEMM GFLOP':>10s} {'GFLOP/s':>8s}")
    for name in a.configs.split(","):
        for threads in (int(t) for t in a.threads.split(",")):
            for mode in a.modes.split(","):
                r = run(name, mode, threads, a.warmup, a.steps)
                results.append(r)
                if not a.json:
                    rate = r["gemm_gflop"] / (r["median_ms"] / 1e3)
                    print(f"{name:7s} {mode:8s} {threads:3d} {r['median_ms']:10.1f} {r['min_ms']:8.1f}-{r['max_ms']:<8.1f} "
                          f"{r['gemm_gflop']:10.2f} {rate:8.1f}", flush=True)
    if a.json:
        json.dump({"torch": torch.__version__, "configs": {k: CONFIGS[k] for k in a.configs.split(",")}, "results": results},
                  sys.stdout)
        print()


if __name__ == "__main__":
    main()
