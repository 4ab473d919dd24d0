#!/usr/bin/python3
"""Golden values for nn::LSTM and nn::LSTMCell (include/dp/nn/modules/rnn.h).

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_lstm.py
Writes tests/golden/lstm.json: {"cases": [...]}. Each case has a "name" and a "kind":
  "lstm":  "config" {input_size, hidden_size, num_layers, bias, batch_first, bidirectional, dropout,
           dtype}, "train" (module mode), "params" [[name, tensor], ...] in PyTorch's order, "input",
           optional "h0" and "c0", the loss weights "r_out", "r_h", "r_c", the results "output",
           "h_n", "c_n", and "grads" {name: tensor} for "input", "h0", "c0" (when given) and every
           parameter, of loss = sum(output * r_out) + sum(h_n * r_h) + sum(c_n * r_c).
  "cell":  the same for LSTMCell (config {input_size, hidden_size, bias, dtype}), results "h", "c",
           loss = sum(h * r_h) + sum(c * r_c).
  "meta":  "config", "repr" (PyTorch's print of the module), "keys" (state_dict keys in order),
           "shapes" (each parameter's shape).
A tensor is {"dtype", "shape", "data"} (data row-major).
"""
import json
import os

import numpy
import torch
import torch.nn as nn

torch.manual_seed(0)
DT = {torch.float32: "float32", torch.float64: "float64"}


def t2j(t):
    t = t.detach()
    data = t.reshape(-1).tolist()
    if t.dtype == torch.float32:  # the shortest decimal that reads back as the same float32 (smaller JSON)
        data = [float(repr(numpy.float32(v))) for v in data]
    return {"dtype": DT[t.dtype], "shape": list(t.shape), "data": data}


cases = []


def lstm_case(name, I, H, T, B, layers=1, bias=True, batch_first=False, bidirectional=False, dropout=0.0,
              dtype=torch.float32, give_hx=True, unbatched=False, train=True):
    m = nn.LSTM(I, H, num_layers=layers, bias=bias, batch_first=batch_first, dropout=dropout,
                bidirectional=bidirectional).to(dtype)
    m.train(train)
    D = 2 if bidirectional else 1
    if unbatched:
        x_shape = (T, I)
        hx_shape = (layers * D, H)
    else:
        x_shape = (B, T, I) if batch_first else (T, B, I)
        hx_shape = (layers * D, B, H)
    x = torch.randn(*x_shape, dtype=dtype, requires_grad=True)
    c = {"name": name, "kind": "lstm", "train": train,
         "config": {"input_size": I, "hidden_size": H, "num_layers": layers, "bias": bias, "batch_first": batch_first,
                    "bidirectional": bidirectional, "dropout": dropout, "dtype": DT[dtype]},
         "params": [[n, t2j(p)] for n, p in m.named_parameters()], "input": t2j(x)}
    leaves = {"input": x}
    if give_hx:
        h0 = torch.randn(*hx_shape, dtype=dtype, requires_grad=True)
        c0 = torch.randn(*hx_shape, dtype=dtype, requires_grad=True)
        c["h0"], c["c0"] = t2j(h0), t2j(c0)
        leaves["h0"], leaves["c0"] = h0, c0
        out, (hn, cn) = m(x, (h0, c0))
    else:
        out, (hn, cn) = m(x)
    r_out, r_h, r_c = torch.randn_like(out), torch.randn_like(hn), torch.randn_like(cn)
    loss = (out * r_out).sum() + (hn * r_h).sum() + (cn * r_c).sum()
    loss.backward()
    c.update({"r_out": t2j(r_out), "r_h": t2j(r_h), "r_c": t2j(r_c), "output": t2j(out), "h_n": t2j(hn), "c_n": t2j(cn)})
    grads = {k: t2j(v.grad) for k, v in leaves.items()}
    grads.update({n: t2j(p.grad) for n, p in m.named_parameters()})
    c["grads"] = grads
    cases.append(c)


def cell_case(name, I, H, B, bias=True, dtype=torch.float32, give_hx=True, unbatched=False):
    m = nn.LSTMCell(I, H, bias=bias).to(dtype)
    x = torch.randn(*((I,) if unbatched else (B, I)), dtype=dtype, requires_grad=True)
    hx_shape = (H,) if unbatched else (B, H)
    c = {"name": name, "kind": "cell", "config": {"input_size": I, "hidden_size": H, "bias": bias, "dtype": DT[dtype]},
         "params": [[n, t2j(p)] for n, p in m.named_parameters()], "input": t2j(x)}
    leaves = {"input": x}
    if give_hx:
        h0 = torch.randn(*hx_shape, dtype=dtype, requires_grad=True)
        c0 = torch.randn(*hx_shape, dtype=dtype, requires_grad=True)
        c["h0"], c["c0"] = t2j(h0), t2j(c0)
        leaves["h0"], leaves["c0"] = h0, c0
        h, cc = m(x, (h0, c0))
    else:
        h, cc = m(x)
    r_h, r_c = torch.randn_like(h), torch.randn_like(cc)
    ((h * r_h).sum() + (cc * r_c).sum()).backward()
    c.update({"r_h": t2j(r_h), "r_c": t2j(r_c), "h": t2j(h), "c": t2j(cc)})
    grads = {k: t2j(v.grad) for k, v in leaves.items()}
    grads.update({n: t2j(p.grad) for n, p in m.named_parameters()})
    c["grads"] = grads
    cases.append(c)


# ---------------------------------------------------------------- LSTM
lstm_case("l1_hx", 3, 4, 5, 2)
lstm_case("l1_nohx", 3, 4, 5, 2, give_hx=False)
lstm_case("l2_hx", 3, 4, 5, 2, layers=2)
lstm_case("l2_nohx", 3, 4, 5, 2, layers=2, give_hx=False)
lstm_case("bi_hx", 3, 4, 5, 2, bidirectional=True)
lstm_case("bi_l2_nohx", 3, 4, 5, 2, layers=2, bidirectional=True, give_hx=False)
lstm_case("bi_l3_hx", 2, 3, 4, 3, layers=3, bidirectional=True)
lstm_case("batch_first_l2_hx", 3, 4, 5, 2, layers=2, batch_first=True)
lstm_case("batch_first_bi_nohx", 3, 4, 5, 2, bidirectional=True, batch_first=True, give_hx=False)
lstm_case("nobias_l2_hx", 3, 4, 5, 2, layers=2, bias=False)
lstm_case("nobias_bi_nohx", 3, 4, 5, 2, bias=False, bidirectional=True, give_hx=False)
lstm_case("unbatched_hx", 3, 4, 5, 1, unbatched=True)
lstm_case("unbatched_nohx", 3, 4, 5, 1, layers=2, unbatched=True, give_hx=False)
lstm_case("unbatched_batch_first_bi_hx", 3, 4, 5, 1, bidirectional=True, batch_first=True, unbatched=True)
lstm_case("l2_f64_hx", 3, 4, 5, 2, layers=2, dtype=torch.float64)
lstm_case("bi_f64_nohx", 3, 4, 6, 3, bidirectional=True, dtype=torch.float64, give_hx=False)
lstm_case("seq1_hx", 3, 4, 1, 2, layers=2, bidirectional=True)
lstm_case("dropout_eval_l2_hx", 3, 4, 5, 2, layers=2, dropout=0.5, train=False)
lstm_case("larger_bi_l2_hx", 6, 12, 7, 4, layers=2, bidirectional=True)
lstm_case("larger_batch_first_nohx", 9, 17, 6, 3, layers=2, batch_first=True, give_hx=False)

# ---------------------------------------------------------------- LSTMCell
cell_case("cell_hx", 3, 4, 2)
cell_case("cell_nohx", 3, 4, 2, give_hx=False)
cell_case("cell_nobias_hx", 3, 4, 2, bias=False)
cell_case("cell_unbatched_hx", 3, 4, 1, unbatched=True)
cell_case("cell_unbatched_nohx", 3, 4, 1, unbatched=True, give_hx=False)
cell_case("cell_f64_hx", 5, 3, 4, dtype=torch.float64)

# ---------------------------------------------------------------- names, shapes, printing
for name, kw in [("meta_default", dict(input_size=10, hidden_size=20)),
                 ("meta_full", dict(input_size=10, hidden_size=20, num_layers=2, batch_first=True, bidirectional=True)),
                 ("meta_nobias_dropout", dict(input_size=10, hidden_size=20, num_layers=3, bias=False, dropout=0.25)),
                 ("meta_all", dict(input_size=7, hidden_size=5, num_layers=2, bias=False, batch_first=True, dropout=0.1,
                                   bidirectional=True))]:
    m = nn.LSTM(**kw)
    cases.append({"name": name, "kind": "meta", "config": kw, "repr": repr(m), "keys": list(m.state_dict().keys()),
                  "shapes": [list(p.shape) for p in m.parameters()]})


class Seq2(nn.Module):  # an LSTM inside a user model: keys prefixed, printed as a child
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, dropout=0.5)
        self.cell = nn.LSTMCell(16, 16, bias=False)
        self.head = nn.Linear(16, 3)


for name, m in [("meta_cell", nn.LSTMCell(3, 4)), ("meta_cell_nobias", nn.LSTMCell(3, 4, bias=False)), ("meta_model", Seq2())]:
    cases.append({"name": name, "kind": "meta", "config": {}, "repr": repr(m), "keys": list(m.state_dict().keys()),
                  "shapes": [list(p.shape) for p in m.parameters()]})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lstm.json")
with open(out, "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print(f"wrote {len(cases)} cases to {out}")
