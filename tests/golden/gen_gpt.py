#!/usr/bin/python3
"""Golden values for the GPT model (include/dp/models/gpt.h, tests/models/test_gpt.cpp).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_gpt.py
A GPT-2-shaped decoder as karpathy/nanoGPT's model.py writes it (token + position embedding, pre-LN
blocks with a fused QKV projection, causal attention, tanh-GELU MLP, final LayerNorm, output head
tied to the token embedding), in a small configuration, float32, trained for STEPS AdamW steps
(nanoGPT's weight-decay groups: tensors with dim >= 2 decayed, the rest not; betas (0.9, 0.95);
gradient clipping at 1.0; linear warm-up then cosine learning rate, precomputed here per step).

Writes:
  tests/golden/gpt_init.safetensors   the initial state_dict (both tied keys, same values)
  tests/golden/gpt_grads.safetensors  the gradient of every parameter after the first backward,
                                      by named_parameters() name (the tied weight once)
  tests/golden/gpt_final.safetensors  the state_dict after STEPS steps
  tests/golden/gpt_final_f64.safetensors  the same STEPS steps in float64 (from the same weights)
  tests/golden/gpt.json               config, the batches (token ids), the first step's logits,
                                      every step's loss, learning rate and pre-clipping grad norm
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(2027)

CONFIG = {"vocab_size": 65, "block_size": 16, "n_layer": 2, "n_head": 4, "n_embd": 32, "dropout": 0.0, "bias": True}
BATCH, STEPS = 6, 10
OPT = {"lr": 3e-3, "min_lr": 3e-4, "warmup": 3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0}


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd, bias=c["bias"])
        self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=c["bias"])

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


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
        self.transformer.wte.weight = self.lm_head.weight  # nanoGPT's tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def lr_at(step):
    """Linear warm-up to lr over `warmup` steps, then cosine down to min_lr at step STEPS."""
    if step < OPT["warmup"]:
        return OPT["lr"] * (step + 1) / OPT["warmup"]
    ratio = (step - OPT["warmup"]) / (STEPS - OPT["warmup"])
    return OPT["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (OPT["lr"] - OPT["min_lr"])


def write_safetensors(tensors, path):
    """A minimal safetensors writer (float32 and float64 tensors)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": "F64" if t.dtype == torch.float64 else "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def t2j(t):
    t = t.detach().contiguous()
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data": t.reshape(-1).tolist()}


model = GPT(CONFIG)
write_safetensors(model.state_dict(), os.path.join(HERE, "gpt_init.safetensors"))

T, V = CONFIG["block_size"], CONFIG["vocab_size"]
batches = []
for s in range(STEPS):
    idx = torch.randint(0, V, (BATCH, T))
    tgt = torch.randint(0, V, (BATCH, T))
    if s == 0:  # an ignored target position (ignore_index=-1), as padding would give
        tgt[1, -3:] = -1
    batches.append((idx, tgt))

def train(model, write_first_step):
    """STEPS steps of the recipe; returns each step's loss, lr and pre-clipping norm, and step 0's logits."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=tuple(OPT["betas"]), eps=OPT["eps"])
    steps, first_logits = [], None
    for s, (idx, tgt) in enumerate(batches):
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr
        logits, loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if s == 0:
            first_logits = logits
            if write_first_step:
                write_safetensors({n: p.grad for n, p in model.named_parameters()}, os.path.join(HERE, "gpt_grads.safetensors"))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["clip"])
        opt.step()
        steps.append({"loss": loss.item(), "lr": lr, "grad_norm": norm.item()})
    return steps, first_logits


# float64: the same run from the same initial weights. Ten float32 AdamW steps amplify rounding: the
# key third of c_attn.bias has a gradient of exactly zero in exact arithmetic (softmax ignores a
# constant added to every key's score), so in float32 its gradient is rounding noise that Adam
# turns into steps of size lr; PyTorch's own float32 runs on 1 and 2 threads end 1.3e-4 apart there.
# In float64 that noise is ~1e-16, so the ten steps can be compared tightly.
model64 = GPT(CONFIG).double()
model64.load_state_dict(model.state_dict())
steps64, _ = train(model64, False)
write_safetensors(model64.state_dict(), os.path.join(HERE, "gpt_final_f64.safetensors"))
steps, first_logits = train(model, True)
write_safetensors(model.state_dict(), os.path.join(HERE, "gpt_final.safetensors"))
with open(os.path.join(HERE, "gpt.json"), "w") as f:
    json.dump({"generator": "gen_gpt.py", "torch": torch.__version__, "config": CONFIG, "batch": BATCH, "optimizer": OPT,
               "parameter_names": [n for n, _ in model.named_parameters()],
               "state_dict_keys": list(model.state_dict().keys()),
               "batches": [{"idx": t2j(i), "targets": t2j(t)} for i, t in batches],
               "logits": t2j(first_logits), "steps": steps, "steps_f64": steps64}, f)
print("wrote gpt_init/gpt_grads/gpt_final.safetensors and gpt.json;", sum(p.numel() for p in model.parameters()), "parameters")
