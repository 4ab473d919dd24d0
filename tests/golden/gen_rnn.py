#!/usr/bin/python3
"""Golden values for nn::RNN, nn::GRU, their cells, packed sequences through RNN, GRU and LSTM, and
the pack/pad functions (include/dp/nn/modules/rnn.h, include/dp/nn/utils/rnn.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_rnn.py
Writes tests/golden/rnn.json: {"cases": [...]}. Each case has a "name" and a "kind":
  "rnn":    "config" {mode (RNN_TANH, RNN_RELU, GRU, LSTM), input_size, hidden_size, num_layers,
            bias, batch_first, bidirectional, dropout, dtype}, "train", "params" [[name, tensor],
            ...] in PyTorch's order, "input", optional "h0" (and "c0" for LSTM), the loss weights
            "r_out", "r_h" ("r_c"), the results "output", "h_n" ("c_n") and "grads" {name: tensor}
            for "input", "h0" ("c0") and every parameter, of loss = sum(output * r_out) +
            sum(h_n * r_h) (+ sum(c_n * r_c)).
  "packed": the same for a packed input: "input" is the padded batch, "lengths", "enforce_sorted",
            "total_length"; the module runs on pack_padded_sequence(input, lengths, batch_first,
            enforce_sorted) and "output" is pad_packed_sequence(result, batch_first,
            total_length=total_length)[0]; also "out_data" (the packed result's data). Gradients as
            for "rnn" (w.r.t. the padded input).
  "cell":   RNNCell / GRUCell: "config" {mode (RNN_TANH, RNN_RELU, GRU), input_size, hidden_size,
            bias, dtype}, "params", "input", optional "h0", "r_h", results "h" and "grads" of
            loss = sum(h * r_h).
  "pack":   pack_padded_sequence / pack_sequence / pad_packed_sequence: "fn", arguments, results.
  "meta":   "repr", "keys", "shapes" of a module.
  "errors": {"key": PyTorch's message} for the messages dparallel repeats.
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os

import numpy
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pack_sequence

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:  # the shortest decimal that reads back as the same float32 (smaller JSON)
        data = [float(repr(numpy.float32(v))) for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


cases = []


def make_module(mode, I, H, layers, bias, batch_first, bidirectional, dropout, dtype):
    kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, dropout=dropout, bidirectional=bidirectional)
    if mode == "LSTM":
        m = nn.LSTM(I, H, **kw)
    elif mode == "GRU":
        m = nn.GRU(I, H, **kw)
    else:
        m = nn.RNN(I, H, nonlinearity="relu" if mode == "RNN_RELU" else "tanh", **kw)
    return m.to(dtype)


def config(mode, I, H, layers, bias, batch_first, bidirectional, dropout, dtype):
    return {"mode": mode, "input_size": I, "hidden_size": H, "num_layers": layers, "bias": bias, "batch_first": batch_first,
            "bidirectional": bidirectional, "dropout": dropout, "dtype": DT[dtype]}


def finish(c, m, leaves, out, state, lstm):
    hn, cn = state if lstm else (state, None)
    r_out, r_h = torch.randn_like(out), torch.randn_like(hn)
    loss = (out * r_out).sum() + (hn * r_h).sum()
    c.update({"r_out": t2j(r_out), "r_h": t2j(r_h), "output": t2j(out), "h_n": t2j(hn)})
    if lstm:
        r_c = torch.randn_like(cn)
        loss = loss + (cn * r_c).sum()
        c.update({"r_c": t2j(r_c), "c_n": t2j(cn)})
    loss.backward()
    grads = {k: t2j(v.grad) for k, v in leaves.items()}
    grads.update({n: t2j(p.grad) for n, p in m.named_parameters()})
    c["grads"] = grads
    cases.append(c)


def hidden(lstm, shape, dtype, c, leaves):
    h0 = torch.randn(*shape, dtype=dtype, requires_grad=True)
    c["h0"] = t2j(h0)
    leaves["h0"] = h0
    if not lstm:
        return h0
    c0 = torch.randn(*shape, dtype=dtype, requires_grad=True)
    c["c0"] = t2j(c0)
    leaves["c0"] = c0
    return (h0, c0)


def rnn_case(name, mode, I, H, T, B, layers=1, bias=True, batch_first=False, bidirectional=False, dropout=0.0,
             dtype=torch.float32, give_hx=True, unbatched=False, train=True):
    m = make_module(mode, I, H, layers, bias, batch_first, bidirectional, dropout, dtype)
    m.train(train)
    lstm = mode == "LSTM"
    D = 2 if bidirectional else 1
    if unbatched:
        x_shape, hx_shape = (T, I), (layers * D, H)
    else:
        x_shape = (B, T, I) if batch_first else (T, B, I)
        hx_shape = (layers * D, B, H)
    x = torch.randn(*x_shape, dtype=dtype, requires_grad=True)
    c = {"name": name, "kind": "rnn", "train": train, "config": config(mode, I, H, layers, bias, batch_first, bidirectional, dropout, dtype),
         "params": [[n, t2j(p)] for n, p in m.named_parameters()], "input": t2j(x)}
    leaves = {"input": x}
    if give_hx:
        out, state = m(x, hidden(lstm, hx_shape, dtype, c, leaves))
    else:
        out, state = m(x)
    finish(c, m, leaves, out, state, lstm)


def packed_case(name, mode, I, H, lengths, layers=2, bias=True, batch_first=False, bidirectional=True, enforce_sorted=False,
                dtype=torch.float32, give_hx=True, total_length=None):
    m = make_module(mode, I, H, layers, bias, batch_first, bidirectional, 0.0, dtype)
    lstm = mode == "LSTM"
    D = 2 if bidirectional else 1
    B = len(lengths)
    T = total_length or max(lengths)
    x = torch.randn(*((B, T, I) if batch_first else (T, B, I)), dtype=dtype, requires_grad=True)
    c = {"name": name, "kind": "packed", "train": True,
         "config": config(mode, I, H, layers, bias, batch_first, bidirectional, 0.0, dtype),
         "params": [[n, t2j(p)] for n, p in m.named_parameters()], "input": t2j(x), "lengths": lengths,
         "enforce_sorted": enforce_sorted, "total_length": total_length}
    leaves = {"input": x}
    packed = pack_padded_sequence(x, torch.tensor(lengths, dtype=torch.int64), batch_first=batch_first, enforce_sorted=enforce_sorted)
    if give_hx:
        res, state = m(packed, hidden(lstm, (layers * D, B, H), dtype, c, leaves))
    else:
        res, state = m(packed)
    c["out_data"] = t2j(res.data)
    out, out_lengths = pad_packed_sequence(res, batch_first=batch_first, total_length=total_length)
    assert out_lengths.tolist() == lengths
    finish(c, m, leaves, out, state, lstm)


def cell_case(name, mode, I, H, B, bias=True, dtype=torch.float32, give_hx=True, unbatched=False):
    if mode == "GRU":
        m = nn.GRUCell(I, H, bias=bias)
    else:
        m = nn.RNNCell(I, H, bias=bias, nonlinearity="relu" if mode == "RNN_RELU" else "tanh")
    m = m.to(dtype)
    x = torch.randn(*((I,) if unbatched else (B, I)), dtype=dtype, requires_grad=True)
    c = {"name": name, "kind": "cell", "config": {"mode": mode, "input_size": I, "hidden_size": H, "bias": bias, "dtype": DT[dtype]},
         "params": [[n, t2j(p)] for n, p in m.named_parameters()], "input": t2j(x)}
    leaves = {"input": x}
    if give_hx:
        h0 = torch.randn(*((H,) if unbatched else (B, H)), dtype=dtype, requires_grad=True)
        c["h0"] = t2j(h0)
        leaves["h0"] = h0
        h = m(x, h0)
    else:
        h = m(x)
    r_h = torch.randn_like(h)
    (h * r_h).sum().backward()
    c.update({"r_h": t2j(r_h), "h": t2j(h)})
    grads = {k: t2j(v.grad) for k, v in leaves.items()}
    grads.update({n: t2j(p.grad) for n, p in m.named_parameters()})
    c["grads"] = grads
    cases.append(c)


# ---------------------------------------------------------------- RNN and GRU modules
rnn_case("tanh_l1_hx", "RNN_TANH", 3, 4, 5, 2)
rnn_case("relu_l2_nohx", "RNN_RELU", 3, 4, 5, 2, layers=2, give_hx=False)
rnn_case("relu_bi_batch_first_hx", "RNN_RELU", 3, 4, 5, 2, bidirectional=True, batch_first=True)
rnn_case("tanh_bi_l2_nobias_nohx", "RNN_TANH", 3, 4, 5, 2, layers=2, bidirectional=True, bias=False, give_hx=False)
rnn_case("tanh_unbatched_hx", "RNN_TANH", 3, 4, 5, 1, layers=2, unbatched=True)
rnn_case("relu_f64_bi_hx", "RNN_RELU", 3, 4, 6, 3, bidirectional=True, dtype=torch.float64)
rnn_case("gru_l1_hx", "GRU", 3, 4, 5, 2)
rnn_case("gru_l2_nohx", "GRU", 3, 4, 5, 2, layers=2, give_hx=False)
rnn_case("gru_bi_l3_hx", "GRU", 2, 3, 4, 3, layers=3, bidirectional=True)
rnn_case("gru_batch_first_bi_nohx", "GRU", 3, 4, 5, 2, bidirectional=True, batch_first=True, give_hx=False)
rnn_case("gru_nobias_l2_hx", "GRU", 3, 4, 5, 2, layers=2, bias=False)
rnn_case("gru_unbatched_hx", "GRU", 3, 4, 5, 1, unbatched=True)
rnn_case("gru_unbatched_batch_first_bi_nohx", "GRU", 3, 4, 5, 1, bidirectional=True, batch_first=True, unbatched=True, give_hx=False)
rnn_case("gru_f64_l2_bi_hx", "GRU", 3, 4, 5, 2, layers=2, bidirectional=True, dtype=torch.float64)
rnn_case("gru_dropout_eval_l2_hx", "GRU", 3, 4, 5, 2, layers=2, dropout=0.5, train=False)
rnn_case("gru_seq1_bi_hx", "GRU", 3, 4, 1, 2, layers=2, bidirectional=True)
rnn_case("gru_larger_bi_l2_hx", "GRU", 4, 9, 6, 3, layers=2, bidirectional=True)

# ---------------------------------------------------------------- cells
cell_case("rnncell_tanh_hx", "RNN_TANH", 3, 4, 2)
cell_case("rnncell_relu_nohx", "RNN_RELU", 3, 4, 2, give_hx=False)
cell_case("rnncell_relu_nobias_unbatched_hx", "RNN_RELU", 3, 4, 1, bias=False, unbatched=True)
cell_case("grucell_hx", "GRU", 3, 4, 2)
cell_case("grucell_nobias_nohx", "GRU", 3, 4, 2, bias=False, give_hx=False)
cell_case("grucell_unbatched_hx", "GRU", 3, 4, 1, unbatched=True)
cell_case("grucell_f64_hx", "GRU", 5, 3, 4, dtype=torch.float64)

# ---------------------------------------------------------------- packed sequences through the modules
# Unsorted, distinct random lengths (ties would make torch.sort's order of equal lengths matter).
for mode in ["RNN_TANH", "RNN_RELU", "GRU", "LSTM"]:
    lengths = [int(v) for v in torch.randperm(6)[:5] + 1]
    if 6 not in lengths:
        lengths[int(torch.randint(0, 5, (1,)))] = 6
    tag = mode.lower()
    packed_case(f"packed_{tag}_unsorted_hx", mode, 3, 4, lengths)
    packed_case(f"packed_{tag}_sorted_nohx", mode, 3, 4, sorted(lengths, reverse=True), enforce_sorted=True, give_hx=False)
packed_case("packed_gru_batch_first_total_length_hx", "GRU", 3, 4, [2, 4, 1, 3], batch_first=True, total_length=6)
packed_case("packed_lstm_batch_first_nohx", "LSTM", 3, 4, [3, 5, 1, 4, 2], batch_first=True, give_hx=False)
packed_case("packed_lstm_f64_l1_uni_hx", "LSTM", 2, 3, [1, 4, 2], layers=1, bidirectional=False, dtype=torch.float64)
packed_case("packed_gru_f64_nobias_hx", "GRU", 2, 3, [3, 1, 4, 2], bias=False, dtype=torch.float64)

# ---------------------------------------------------------------- pack / pad functions
for name, T, B, lengths, batch_first, enforce in [("pack_unsorted", 5, 4, [2, 5, 1, 3], False, False),
                                                  ("pack_sorted_batch_first", 4, 3, [4, 2, 1], True, True),
                                                  ("pack_unsorted_batch_first", 4, 5, [3, 1, 4, 2, 2], True, False)]:
    x = torch.randn(*((B, T, 2) if batch_first else (T, B, 2)), requires_grad=True)
    p = pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=enforce)
    r = torch.randn_like(p.data)
    (p.data * r).sum().backward()
    padded, lens = pad_packed_sequence(p, batch_first=batch_first, padding_value=-1.5, total_length=T + 1)
    c = {"name": name, "kind": "pack", "fn": "pack_padded_sequence", "input": t2j(x), "lengths": lengths, "batch_first": batch_first,
         "enforce_sorted": enforce, "data": t2j(p.data), "batch_sizes": t2j(p.batch_sizes), "r": t2j(r), "grad_input": t2j(x.grad),
         "padded": t2j(padded), "padded_lengths": t2j(lens), "padding_value": -1.5, "total_length": T + 1}
    if p.sorted_indices is not None:
        c["sorted_indices"] = t2j(p.sorted_indices)
        c["unsorted_indices"] = t2j(p.unsorted_indices)
    cases.append(c)

seqs = [torch.randn(L, 2, requires_grad=True) for L in [2, 4, 1, 3]]
p = pack_sequence(seqs, enforce_sorted=False)
r = torch.randn_like(p.data)
(p.data * r).sum().backward()
cases.append({"name": "pack_sequence_unsorted", "kind": "pack", "fn": "pack_sequence", "sequences": [t2j(s) for s in seqs],
              "data": t2j(p.data), "batch_sizes": t2j(p.batch_sizes), "sorted_indices": t2j(p.sorted_indices),
              "unsorted_indices": t2j(p.unsorted_indices), "r": t2j(r), "grads": [t2j(s.grad) for s in seqs]})
seqs = [torch.randn(L, requires_grad=True) for L in [4, 3, 3, 1]]
p = pack_sequence(seqs)
cases.append({"name": "pack_sequence_sorted_1d", "kind": "pack", "fn": "pack_sequence", "sequences": [t2j(s) for s in seqs],
              "data": t2j(p.data), "batch_sizes": t2j(p.batch_sizes)})

# ---------------------------------------------------------------- names, shapes, printing
for name, m in [("meta_rnn", nn.RNN(10, 20)),
                ("meta_rnn_relu_full", nn.RNN(10, 20, num_layers=2, nonlinearity="relu", bias=False, batch_first=True, dropout=0.25,
                                              bidirectional=True)),
                ("meta_gru", nn.GRU(10, 20)),
                ("meta_gru_full", nn.GRU(7, 5, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)),
                ("meta_rnncell", nn.RNNCell(3, 4)),
                ("meta_rnncell_relu_nobias", nn.RNNCell(3, 4, bias=False, nonlinearity="relu")),
                ("meta_grucell", nn.GRUCell(3, 4)),
                ("meta_grucell_nobias", nn.GRUCell(3, 4, bias=False))]:
    cases.append({"name": name, "kind": "meta", "repr": repr(m), "keys": list(m.state_dict().keys()),
                  "shapes": [list(p.shape) for p in m.parameters()]})

# ---------------------------------------------------------------- PyTorch's messages


def message(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return str(e)
    raise AssertionError("no error")


errors = {
    "unsorted": message(lambda: pack_padded_sequence(torch.zeros(3, 3, 1), torch.tensor([3, 1, 2]))),
    "lengths_count": message(lambda: pack_padded_sequence(torch.zeros(3, 3, 1), torch.tensor([3, 1]))),
    "zero_length": message(lambda: pack_padded_sequence(torch.zeros(3, 3, 1), torch.tensor([3, 0, 1]), enforce_sorted=False)),
    "lengths_2d": message(lambda: pack_padded_sequence(torch.zeros(3, 3, 1), torch.tensor([[3, 1, 1]]))),
    "total_length": message(lambda: pad_packed_sequence(pack_padded_sequence(torch.zeros(3, 2, 1), torch.tensor([3, 2])), total_length=2)),
    "gru_hidden": message(lambda: nn.GRU(5, 4, num_layers=2)(torch.zeros(3, 2, 5), torch.zeros(1, 2, 4))),
    "gru_batched_hx": message(lambda: nn.GRU(5, 4)(torch.zeros(3, 2, 5), torch.zeros(2, 4))),
    "rnn_unbatched_hx": message(lambda: nn.RNN(5, 4)(torch.zeros(3, 5), torch.zeros(1, 1, 4))),
    "gru_input_size": message(lambda: nn.GRU(5, 4)(torch.zeros(3, 2, 6))),
    "packed_hidden": message(lambda: nn.GRU(1, 4)(pack_padded_sequence(torch.zeros(3, 2, 1), torch.tensor([3, 2])), torch.zeros(1, 3, 4))),
    "packed_lstm_hidden": message(lambda: nn.LSTM(1, 4)(pack_padded_sequence(torch.zeros(3, 2, 1), torch.tensor([3, 2])),
                                                        (torch.zeros(1, 2, 4), torch.zeros(1, 3, 4)))),
    "nonlinearity": message(lambda: nn.RNN(5, 4, nonlinearity="sigmoid")),
    "grucell_input_size": message(lambda: nn.GRUCell(5, 4)(torch.zeros(3, 6))),
    "grucell_batch": message(lambda: nn.GRUCell(5, 4)(torch.zeros(3, 5), torch.zeros(2, 4))),
    "rnncell_hidden_size": message(lambda: nn.RNNCell(5, 4)(torch.zeros(3, 5), torch.zeros(3, 3))),
}
cases.append({"name": "errors", "kind": "errors", "messages": errors})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rnn.json")
with open(out, "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {out}")
