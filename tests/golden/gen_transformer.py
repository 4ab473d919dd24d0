#!/usr/bin/python3
"""Golden values for nn::MultiheadAttention and the Transformer layers
(include/dp/nn/modules/attention.h, include/dp/nn/modules/transformer.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_transformer.py
Writes tests/golden/transformer.json: {"cases": [...]}. Every forward runs with grad enabled and
parameters requiring grad, so PyTorch takes its reference (math) path, never the fast path.

Each case has a "name", a "kind", a "config" (the module's constructor arguments and "dtype"),
"train" (module mode), "params" [[name, tensor], ...] in PyTorch's order, "inputs" {name: tensor}
(the differentiable inputs), "masks" {name: tensor} (not differentiable), "call" (other forward
arguments), the results, the loss weights "r_*" and "grads" {name: tensor} for every input and
parameter of loss = sum(output * r_out) (+ sum(weights * r_w) when weights are returned).
  "mha":     inputs "query" and, unless "self" (query, key and value are one tensor), "key" and
             "value" (with "kv_same": key and value are one tensor, "key"); masks
             "key_padding_mask", "attn_mask"; call {need_weights, average_attn_weights}; results
             "output", "weights".
  "encoder_layer", "decoder_layer", "encoder", "decoder", "transformer": inputs "src" / "tgt" /
             "memory" as the forward takes them; masks by PyTorch's argument names; result "output".
             config "activation" is "relu", "gelu" or "sigmoid_callable" (torch.sigmoid).
  "meta":    "repr" (PyTorch's print), "keys" (state_dict keys in order), "shapes" (each state_dict
             entry's shape).
A tensor is {"dtype", "shape", "data"} (data row-major; non-finite floats as "inf", "-inf", "nan").
"""
import json
import math
import os

import numpy
import torch
import torch.nn as nn

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.bool: "bool"}


def num(v, is32):
    if isinstance(v, bool):
        return v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(repr(numpy.float32(v))) if is32 else v  # float32: the shortest decimal that reads back


def t2j(t):
    t = t.detach()
    is32 = t.dtype == torch.float32
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": [num(v, is32) for v in t.reshape(-1).tolist()]}


def randn(*shape, dtype):
    return torch.randn(*shape, dtype=dtype)


cases = []


def finish(case, module, leaves, outputs):
    """outputs: {"output": t, "weights": t or None}; adds results, loss weights and gradients."""
    loss = 0
    for key, t in outputs.items():
        if t is None:
            continue
        r = torch.randn_like(t)
        case[key] = t2j(t)
        case["r_" + ("out" if key == "output" else "w")] = t2j(r)
        loss = loss + (t * r).sum()
    loss.backward()
    grads = {k: t2j(v.grad) for k, v in leaves.items()}
    grads.update({n: t2j(p.grad) for n, p in module.named_parameters()})
    case["grads"] = grads
    cases.append(case)


def start(name, kind, module, config, train):
    module.train(train)
    return {"name": name, "kind": kind, "config": config, "train": train,
            "params": [[n, t2j(p)] for n, p in module.named_parameters()]}


# ------------------------------------------------------------------------------- MultiheadAttention

def mha_case(name, E=8, h=2, L=4, S=5, N=2, bias=True, add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
             batch_first=False, dropout=0.0, dtype=torch.float32, train=True, mode="cross", kpm=None, attn_mask=None,
             need_weights=True, average=True, unbatched=False):
    """mode: "self" (one tensor for query, key, value; S = L), "kv" (key is value), "cross" (three tensors).
    kpm / attn_mask: None or a function (N, S, L, h, dtype) -> mask."""
    m = nn.MultiheadAttention(E, h, dropout=dropout, bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                              kdim=kdim, vdim=vdim, batch_first=batch_first).to(dtype)
    config = {"embed_dim": E, "num_heads": h, "bias": bias, "add_bias_kv": add_bias_kv, "add_zero_attn": add_zero_attn,
              "kdim": kdim or E, "vdim": vdim or E, "batch_first": batch_first, "dropout": dropout, "dtype": DT[dtype]}
    c = start(name, "mha", m, config, train)
    if mode == "self":
        S = L

    def shape(T, F):
        if unbatched:
            return (T, F)
        return (N, T, F) if batch_first else (T, N, F)

    q = randn(*shape(L, E), dtype=dtype).requires_grad_()
    leaves = {"query": q}
    if mode == "self":
        k = v = q
    elif mode == "kv":
        k = v = randn(*shape(S, kdim or E), dtype=dtype).requires_grad_()
        leaves["key"] = k
    else:
        k = randn(*shape(S, kdim or E), dtype=dtype).requires_grad_()
        v = randn(*shape(S, vdim or E), dtype=dtype).requires_grad_()
        leaves["key"], leaves["value"] = k, v
    c["mode"] = mode
    c["inputs"] = {n: t2j(t) for n, t in leaves.items()}
    masks = {}
    if kpm is not None:
        masks["key_padding_mask"] = kpm(N, S, L, h, dtype)
    if attn_mask is not None:
        masks["attn_mask"] = attn_mask(N, S, L, h, dtype)
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    c["call"] = {"need_weights": need_weights, "average_attn_weights": average}
    out, w = m(q, k, v, key_padding_mask=masks.get("key_padding_mask"), need_weights=need_weights,
               attn_mask=masks.get("attn_mask"), average_attn_weights=average)
    finish(c, m, leaves, {"output": out, "weights": w})


# Masks that never block a whole row.
def kpm_bool(N, S, L, h, dtype):
    m = torch.zeros(N, S, dtype=torch.bool)
    m[0, -1] = True
    if N > 1:
        m[1, 0] = m[1, 2] = True
    return m


def kpm_bool_unbatched(N, S, L, h, dtype):
    m = torch.zeros(S, dtype=torch.bool)
    m[1] = True
    return m


def kpm_tail(N, S, L, h, dtype):  # padding at the end only (with a causal mask, no row is fully blocked)
    m = torch.zeros(N, S, dtype=torch.bool)
    m[0, -1] = True
    if N > 1:
        m[1, -2:] = True
    return m


def kpm_float(N, S, L, h, dtype):
    return torch.randn(N, S, dtype=dtype)


def causal_bool(N, S, L, h, dtype):  # True above the diagonal: blocked
    return torch.ones(L, S, dtype=torch.bool).triu(1)


def mask2d_float(N, S, L, h, dtype):
    m = torch.randn(L, S, dtype=dtype)
    m[0, 1] = float("-inf")
    return m


def mask3d_bool(N, S, L, h, dtype):
    m = torch.rand(N * h, L, S) < 0.3
    m[:, :, 0] = False
    return m


def mask3d_bool_unbatched(N, S, L, h, dtype):
    return mask3d_bool(1, S, L, h, dtype)


def mask3d_float(N, S, L, h, dtype):
    return torch.randn(N * h, L, S, dtype=dtype)


mha_case("mha_self", mode="self")
mha_case("mha_self_batch_first_f64", mode="self", batch_first=True, dtype=torch.float64)
mha_case("mha_cross", mode="cross", L=3, S=5)
mha_case("mha_kv_same", mode="kv", L=3, S=5, batch_first=True)
mha_case("mha_kdim_vdim", mode="cross", kdim=3, vdim=5, L=3, S=4)
mha_case("mha_kdim_vdim_f64", mode="cross", kdim=6, vdim=4, L=2, S=3, N=3, batch_first=True, dtype=torch.float64)
mha_case("mha_nobias", mode="cross", bias=False)
mha_case("mha_bias_kv", mode="cross", add_bias_kv=True)
mha_case("mha_zero_attn", mode="self", add_zero_attn=True)
mha_case("mha_bias_kv_zero_attn_masks", mode="cross", add_bias_kv=True, add_zero_attn=True, kpm=kpm_bool, attn_mask=mask2d_float)
mha_case("mha_kpm_bool_heads", mode="self", kpm=kpm_bool, average=False)
mha_case("mha_kpm_float", mode="cross", kpm=kpm_float, batch_first=True)
mha_case("mha_mask2d_bool", mode="self", attn_mask=causal_bool)
mha_case("mha_mask2d_float_kpm_bool", mode="cross", attn_mask=mask2d_float, kpm=kpm_bool)
mha_case("mha_mask3d_bool_kpm_bool", mode="cross", attn_mask=mask3d_bool, kpm=kpm_bool, average=False)
mha_case("mha_mask3d_float", mode="cross", attn_mask=mask3d_float, batch_first=True)
mha_case("mha_no_weights", mode="self", kpm=kpm_tail, attn_mask=causal_bool, need_weights=False)
mha_case("mha_heads4_f64", E=8, h=4, L=3, S=3, mode="cross", attn_mask=mask3d_bool, dtype=torch.float64, average=False)
mha_case("mha_unbatched", mode="cross", unbatched=True, kpm=kpm_bool_unbatched, attn_mask=mask3d_bool_unbatched)
mha_case("mha_unbatched_batch_first_self", mode="self", unbatched=True, batch_first=True, attn_mask=causal_bool, average=False)
mha_case("mha_dropout_eval", mode="self", dropout=0.5, train=False, kpm=kpm_bool)


# ------------------------------------------------------------------------------ Transformer layers

ACT = {"relu": "relu", "gelu": "gelu", "sigmoid_callable": torch.sigmoid}


def layer_config(d, nhead, ff, dropout, activation, eps, batch_first, norm_first, dtype):
    return {"d_model": d, "nhead": nhead, "dim_feedforward": ff, "dropout": dropout, "activation": activation,
            "layer_norm_eps": eps, "batch_first": batch_first, "norm_first": norm_first, "dtype": DT[dtype]}


def seq(T, N, d, batch_first, unbatched, dtype):
    if unbatched:
        return randn(T, d, dtype=dtype)
    return randn(N, T, d, dtype=dtype) if batch_first else randn(T, N, d, dtype=dtype)


def causal_float(T, dtype):
    return nn.Transformer.generate_square_subsequent_mask(T).to(dtype)


def src_kpm(N, S, unbatched):
    if unbatched:
        m = torch.zeros(S, dtype=torch.bool)
        m[-1] = True
        return m
    m = torch.zeros(N, S, dtype=torch.bool)
    m[0, -1] = True
    m[-1, 1] = True
    return m


def encoder_layer_case(name, d=4, nhead=2, ff=8, dropout=0.1, activation="relu", eps=1e-5, batch_first=False,
                       norm_first=False, dtype=torch.float32, train=False, S=5, N=2, mask=False, kpm=False, unbatched=False):
    m = nn.TransformerEncoderLayer(d, nhead, ff, dropout, ACT[activation], eps, batch_first, norm_first).to(dtype)
    c = start(name, "encoder_layer", m, layer_config(d, nhead, ff, dropout, activation, eps, batch_first, norm_first, dtype), train)
    src = seq(S, N, d, batch_first, unbatched, dtype).requires_grad_()
    masks = {}
    if mask:
        masks["src_mask"] = causal_float(S, dtype)
    if kpm:
        masks["src_key_padding_mask"] = src_kpm(N, S, unbatched)
    c["inputs"] = {"src": t2j(src)}
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    out = m(src, src_mask=masks.get("src_mask"), src_key_padding_mask=masks.get("src_key_padding_mask"))
    finish(c, m, {"src": src}, {"output": out})


def decoder_layer_case(name, d=4, nhead=2, ff=8, dropout=0.1, activation="relu", eps=1e-5, batch_first=False,
                       norm_first=False, dtype=torch.float32, train=False, T=4, S=5, N=2, tgt_mask=False, memory_mask=False,
                       tgt_kpm=False, memory_kpm=False, unbatched=False):
    m = nn.TransformerDecoderLayer(d, nhead, ff, dropout, ACT[activation], eps, batch_first, norm_first).to(dtype)
    c = start(name, "decoder_layer", m, layer_config(d, nhead, ff, dropout, activation, eps, batch_first, norm_first, dtype), train)
    tgt = seq(T, N, d, batch_first, unbatched, dtype).requires_grad_()
    memory = seq(S, N, d, batch_first, unbatched, dtype).requires_grad_()
    masks = {}
    if tgt_mask:
        masks["tgt_mask"] = causal_float(T, dtype)
    if memory_mask:
        mm = torch.zeros(T, S, dtype=torch.bool)
        mm[0, 2] = mm[T - 1, 0] = True
        masks["memory_mask"] = mm
    if tgt_kpm:
        masks["tgt_key_padding_mask"] = src_kpm(N, T, unbatched)
    if memory_kpm:
        masks["memory_key_padding_mask"] = src_kpm(N, S, unbatched)
    c["inputs"] = {"tgt": t2j(tgt), "memory": t2j(memory)}
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    out = m(tgt, memory, **masks)
    finish(c, m, {"tgt": tgt, "memory": memory}, {"output": out})


encoder_layer_case("enc_post_relu", mask=True, kpm=True)
encoder_layer_case("enc_pre_gelu_batch_first", activation="gelu", norm_first=True, batch_first=True, kpm=True)
encoder_layer_case("enc_train_dropout0", dropout=0.0, train=True, mask=True)
encoder_layer_case("enc_pre_train_f64", dropout=0.0, train=True, norm_first=True, dtype=torch.float64, kpm=True, eps=1e-6)
encoder_layer_case("enc_unbatched", unbatched=True, mask=True, kpm=True)
encoder_layer_case("enc_callable_activation", activation="sigmoid_callable", d=8, nhead=4, batch_first=True, S=3)
decoder_layer_case("dec_post_relu", tgt_mask=True, memory_kpm=True)
decoder_layer_case("dec_pre_gelu_batch_first", activation="gelu", norm_first=True, batch_first=True, tgt_mask=True,
                   memory_mask=True, tgt_kpm=True, memory_kpm=True)
decoder_layer_case("dec_train_dropout0_f64", dropout=0.0, train=True, dtype=torch.float64, tgt_mask=True, tgt_kpm=True)
decoder_layer_case("dec_unbatched", unbatched=True, tgt_mask=True, memory_kpm=True)


def encoder_case(name, layers=2, norm=True, batch_first=False, norm_first=False, dtype=torch.float32, train=False,
                 dropout=0.1, S=5, N=2, d=4, nhead=2, ff=8):
    layer = nn.TransformerEncoderLayer(d, nhead, ff, dropout, batch_first=batch_first, norm_first=norm_first)
    m = nn.TransformerEncoder(layer, layers, nn.LayerNorm(d) if norm else None).to(dtype)
    cfg = layer_config(d, nhead, ff, dropout, "relu", 1e-5, batch_first, norm_first, dtype)
    cfg.update({"num_layers": layers, "norm": norm})
    c = start(name, "encoder", m, cfg, train)
    src = seq(S, N, d, batch_first, False, dtype).requires_grad_()
    masks = {"mask": causal_float(S, dtype), "src_key_padding_mask": src_kpm(N, S, False)}
    c["inputs"] = {"src": t2j(src)}
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    out = m(src, **masks)
    finish(c, m, {"src": src}, {"output": out})


def decoder_case(name, layers=2, norm=True, batch_first=False, norm_first=False, dtype=torch.float32, train=False,
                 dropout=0.1, T=4, S=5, N=2, d=4, nhead=2, ff=8):
    layer = nn.TransformerDecoderLayer(d, nhead, ff, dropout, batch_first=batch_first, norm_first=norm_first)
    m = nn.TransformerDecoder(layer, layers, nn.LayerNorm(d) if norm else None).to(dtype)
    cfg = layer_config(d, nhead, ff, dropout, "relu", 1e-5, batch_first, norm_first, dtype)
    cfg.update({"num_layers": layers, "norm": norm})
    c = start(name, "decoder", m, cfg, train)
    tgt = seq(T, N, d, batch_first, False, dtype).requires_grad_()
    memory = seq(S, N, d, batch_first, False, dtype).requires_grad_()
    masks = {"tgt_mask": causal_float(T, dtype), "memory_key_padding_mask": src_kpm(N, S, False)}
    c["inputs"] = {"tgt": t2j(tgt), "memory": t2j(memory)}
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    out = m(tgt, memory, **masks)
    finish(c, m, {"tgt": tgt, "memory": memory}, {"output": out})


def transformer_case(name, enc=2, dec=2, batch_first=False, norm_first=False, activation="relu", dtype=torch.float32,
                     train=False, dropout=0.1, S=4, T=3, N=2, d=4, nhead=2, ff=8):
    m = nn.Transformer(d, nhead, enc, dec, ff, dropout, ACT[activation], layer_norm_eps=1e-5, batch_first=batch_first,
                       norm_first=norm_first).to(dtype)
    cfg = layer_config(d, nhead, ff, dropout, activation, 1e-5, batch_first, norm_first, dtype)
    cfg.update({"num_encoder_layers": enc, "num_decoder_layers": dec})
    c = start(name, "transformer", m, cfg, train)
    src = seq(S, N, d, batch_first, False, dtype).requires_grad_()
    tgt = seq(T, N, d, batch_first, False, dtype).requires_grad_()
    masks = {"tgt_mask": causal_float(T, dtype), "src_key_padding_mask": src_kpm(N, S, False),
             "memory_key_padding_mask": src_kpm(N, S, False)}
    c["inputs"] = {"src": t2j(src), "tgt": t2j(tgt)}
    c["masks"] = {n: t2j(t) for n, t in masks.items()}
    out = m(src, tgt, **masks)
    finish(c, m, {"src": src, "tgt": tgt}, {"output": out})


encoder_case("encoder_norm")
encoder_case("encoder_no_norm_pre_f64", norm=False, norm_first=True, dtype=torch.float64, train=True, dropout=0.0, batch_first=True)
decoder_case("decoder_norm", batch_first=True)
decoder_case("decoder_no_norm_train", norm=False, train=True, dropout=0.0, layers=3, T=3, S=3, N=1)
transformer_case("transformer")
transformer_case("transformer_pre_gelu_f64", enc=1, dec=2, batch_first=True, norm_first=True, activation="gelu",
                 dtype=torch.float64, train=True, dropout=0.0)

# ---------------------------------------------------------------- names, shapes, printing


def meta(name, m):
    sd = m.state_dict()
    cases.append({"name": name, "kind": "meta", "repr": repr(m), "keys": list(sd.keys()),
                  "shapes": [list(t.shape) for t in sd.values()]})


meta("meta_mha", nn.MultiheadAttention(8, 2))
meta("meta_mha_kdim_vdim", nn.MultiheadAttention(8, 4, dropout=0.25, add_bias_kv=True, kdim=3, vdim=5))
meta("meta_mha_nobias", nn.MultiheadAttention(6, 3, bias=False, add_zero_attn=True, batch_first=True))
meta("meta_encoder_layer", nn.TransformerEncoderLayer(8, 2, 16, activation="gelu", layer_norm_eps=1e-6, norm_first=True))
meta("meta_decoder_layer", nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True))
meta("meta_encoder", nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, nn.LayerNorm(8)))
meta("meta_decoder", nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2))
meta("meta_transformer", nn.Transformer(8, 2, 1, 1, 16, dropout=0.2))
mask = nn.Transformer.generate_square_subsequent_mask(4)
cases.append({"name": "square_subsequent_mask_4", "kind": "tensor", "value": t2j(mask)})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transformer.json")
with open(out, "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"), allow_nan=False)
print(f"wrote {len(cases)} cases to {out} ({os.path.getsize(out)} bytes)")
