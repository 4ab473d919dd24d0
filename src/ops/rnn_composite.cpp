// The recurrent layers written with ordinary differentiable dp ops, padded or packed: the reference
// for the fused ops, what runs on devices without fused kernels, and the create_graph backward of
// the fused ops (their gradient formulas as dp ops on a recomputed forward, so that the gradients
// have history and can be differentiated again). The step plan is the fused kernels'
// (backend::RnnSteps): step t's rows are a prefix of the batch; rows [0, carried(t)) continue from
// the step run before, the others start from h0 (c0).
#include <algorithm>
#include <tuple>
#include <vector>

#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/rnn.h"
#include "dp/ops/shape.h"
#include "ops/rnn_internal.h"

namespace dp {
namespace rnn_detail {
namespace {

// What one step computed (for the backward formulas).
struct StepState {
  Tensor h_prev, c_prev;  // [n, H]: the state the step read
  Tensor a0, a1, a2, a3;  // LSTM: i, f, g, o; GRU: r, z, n, W_hn h + b_hn
  Tensor c, h;            // the step's cell state (LSTM) and output
};

// Rows [0, n) of the state a step reads: rows [0, nc) of prev (what the step before left), the
// others rows of init (h0, c0, or the final states' gradients in backward).
Tensor state_rows(const Tensor& prev, const Tensor& init, int64_t nc, int64_t n) {
  if (nc == 0) return n == init.size(0) ? init : init.narrow(0, 0, n);
  Tensor carried = nc == prev.size(0) ? prev : prev.narrow(0, 0, nc);
  if (nc == n) return carried;
  return dp::cat({carried, init.narrow(0, nc, n - nc)}, 0);
}

// Rows [start, start + rows.size(0)) of a [B, H] result, gathered over the steps.
struct Piece {
  int64_t start;
  Tensor rows;
};

Tensor assemble(std::vector<Piece> pieces, int64_t B, int64_t H, const Tensor& like) {
  if (pieces.empty()) return dp::zeros({B, H}, options_of(like));
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.start < b.start; });
  if (pieces.size() == 1) return pieces[0].rows;
  std::vector<Tensor> parts;
  for (const Piece& p : pieces) parts.push_back(p.rows);
  return dp::cat(parts, 0);
}

Tensor rows_of(const Tensor& t, int64_t start, int64_t n) { return start == 0 && n == t.size(0) ? t : t.narrow(0, start, n); }

std::array<Tensor, 3> forward_impl(RnnCell cell, const LayerInputs& in, const LayerInfo& info, std::vector<StepState>* rec) {
  const RnnSteps& st = info.steps;
  const bool lstm = cell == RnnCell::LSTM;
  const int64_t T = st.steps(), N = st.total_rows(), B = st.batch(), H = info.H;
  const Tensor x2 = info.packed ? in.x : in.x.reshape({N, info.I});
  const Tensor gx = dp::linear(x2, in.w_ih, in.b_ih);  // [N, G]
  Tensor h, c;                                         // the state the previous step left
  std::vector<Tensor> outs(static_cast<size_t>(T));
  std::vector<Piece> h_final, c_final;
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = st.time(s), n = st.rows(t), nc = st.carried(t);
    StepState S;
    S.h_prev = state_rows(h, in.h0, nc, n);
    if (lstm) S.c_prev = state_rows(c, in.c0, nc, n);
    const Tensor gxt = rows_of(gx, st.offset(t), n);
    const Tensor gh = dp::linear(S.h_prev, in.w_hh, in.b_hh);
    switch (cell) {
      case RnnCell::Tanh:
        S.h = dp::tanh(dp::add(gxt, gh));
        break;
      case RnnCell::ReLU:
        S.h = dp::relu(dp::add(gxt, gh));
        break;
      case RnnCell::LSTM: {
        const std::vector<Tensor> b = dp::add(gxt, gh).chunk(4, 1);
        S.a0 = dp::sigmoid(b[0]);
        S.a1 = dp::sigmoid(b[1]);
        S.a2 = dp::tanh(b[2]);
        S.a3 = dp::sigmoid(b[3]);
        S.c = dp::add(dp::mul(S.a1, S.c_prev), dp::mul(S.a0, S.a2));
        S.h = dp::mul(S.a3, dp::tanh(S.c));
        break;
      }
      case RnnCell::GRU: {
        const std::vector<Tensor> xs = gxt.chunk(3, 1), hs = gh.chunk(3, 1);
        S.a0 = dp::sigmoid(dp::add(xs[0], hs[0]));
        S.a1 = dp::sigmoid(dp::add(xs[1], hs[1]));
        S.a3 = hs[2];
        S.a2 = dp::tanh(dp::add(xs[2], dp::mul(S.a0, S.a3)));
        S.h = dp::add(S.a2, dp::mul(S.a1, dp::sub(S.h_prev, S.a2)));
        break;
      }
    }
    outs[static_cast<size_t>(t)] = S.h;
    h = S.h;
    c = S.c;
    const int64_t f = st.first_final(t);
    if (f < n) {
      h_final.push_back({f, rows_of(S.h, f, n - f)});
      if (lstm) c_final.push_back({f, rows_of(S.c, f, n - f)});
    }
    if (rec) (*rec)[static_cast<size_t>(t)] = std::move(S);
  }
  Tensor output = info.packed ? dp::cat(outs, 0) : dp::stack(outs, 0);
  return {output, assemble(h_final, B, H, in.h0), lstm ? assemble(c_final, B, H, in.h0) : Tensor()};
}

}  // namespace

std::array<Tensor, 3> layer_composite(RnnCell cell, const LayerInputs& in, const LayerInfo& info) { return forward_impl(cell, in, info, nullptr); }

autograd::variable_list layer_backward_composite(RnnCell cell, const Tensor& d_out, const Tensor& d_hn, const Tensor& d_cn, const LayerInputs& in,
                                                 const LayerInfo& info, const Needed& needed) {
  const RnnSteps& st = info.steps;
  const bool lstm = cell == RnnCell::LSTM, gru = cell == RnnCell::GRU;
  const int64_t T = st.steps(), N = st.total_rows(), B = st.batch(), H = info.H;
  std::vector<StepState> rec(static_cast<size_t>(T));
  forward_impl(cell, in, info, &rec);

  const Tensor dhn = d_hn.defined() ? d_hn : dp::zeros({B, H}, options_of(in.h0));
  const Tensor dcn = !lstm ? Tensor() : d_cn.defined() ? d_cn : dp::zeros({B, H}, options_of(in.h0));
  const Tensor dout = !d_out.defined() ? Tensor() : info.packed ? d_out : d_out.reshape({N, H});
  Tensor dh_next, dc_next;  // gradients w.r.t. the state read by the step run after t
  std::vector<Piece> dh0, dc0;
  std::vector<Tensor> dgx(static_cast<size_t>(T)), dgh(static_cast<size_t>(T)), hprev(static_cast<size_t>(T));
  for (int64_t s = T - 1; s >= 0; --s) {
    const int64_t t = st.time(s), n = st.rows(t), nc = st.carried(t);
    const int64_t cont = s == T - 1 ? 0 : st.carried(st.time(s + 1));  // rows of t read by the next step
    const StepState& S = rec[static_cast<size_t>(t)];
    Tensor dh = state_rows(dh_next, dhn, cont, n);
    if (dout.defined()) dh = dp::add(dh, rows_of(dout, st.offset(t), n));
    Tensor dh_direct;  // GRU: the part of dh_prev that does not go through W_hh
    Tensor& gx = dgx[static_cast<size_t>(t)];
    Tensor& gh = dgh[static_cast<size_t>(t)];
    switch (cell) {
      case RnnCell::Tanh:
        gx = gh = dp::mul(dh, dp::rsub(dp::mul(S.h, S.h), 1));
        break;
      case RnnCell::ReLU:
        gx = gh = dp::where(dp::gt(S.h, 0), dh, 0);
        break;
      case RnnCell::LSTM: {
        const Tensor dc = state_rows(dc_next, dcn, cont, n);
        const Tensor tc = dp::tanh(S.c);
        const Tensor dct = dp::add(dc, dp::mul(dp::mul(dh, S.a3), dp::rsub(dp::mul(tc, tc), 1)));
        const Tensor di = dp::mul(dp::mul(dct, S.a2), dp::mul(S.a0, dp::rsub(S.a0, 1)));
        const Tensor df = dp::mul(dp::mul(dct, S.c_prev), dp::mul(S.a1, dp::rsub(S.a1, 1)));
        const Tensor dg = dp::mul(dp::mul(dct, S.a0), dp::rsub(dp::mul(S.a2, S.a2), 1));
        const Tensor dov = dp::mul(dp::mul(dh, tc), dp::mul(S.a3, dp::rsub(S.a3, 1)));
        gx = gh = dp::cat({di, df, dg, dov}, 1);
        dc_next = dp::mul(dct, S.a1);
        if (nc < n) dc0.push_back({nc, rows_of(dc_next, nc, n - nc)});
        break;
      }
      case RnnCell::GRU: {
        const Tensor &r = S.a0, &z = S.a1, &nn = S.a2, &hn = S.a3;
        const Tensor dpn = dp::mul(dp::mul(dh, dp::rsub(z, 1)), dp::rsub(dp::mul(nn, nn), 1));
        const Tensor dpr = dp::mul(dp::mul(dpn, hn), dp::mul(r, dp::rsub(r, 1)));
        const Tensor dpz = dp::mul(dp::mul(dh, dp::sub(S.h_prev, nn)), dp::mul(z, dp::rsub(z, 1)));
        gx = dp::cat({dpr, dpz, dpn}, 1);
        gh = dp::cat({dpr, dpz, dp::mul(dpn, r)}, 1);
        dh_direct = dp::mul(dh, z);
        break;
      }
    }
    Tensor dhp = dp::mm(gh, in.w_hh);
    if (gru) dhp = dp::add(dhp, dh_direct);
    if (nc < n) dh0.push_back({nc, rows_of(dhp, nc, n - nc)});
    dh_next = dhp;
    hprev[static_cast<size_t>(t)] = S.h_prev;
  }
  const Tensor dGx = T == 1 ? dgx[0] : dp::cat(dgx, 0);  // [N, G]
  const Tensor dGh = !gru ? dGx : T == 1 ? dgh[0] : dp::cat(dgh, 0);
  autograd::variable_list grads(7);
  if (needed[kX]) grads[kX] = dp::mm(dGx, in.w_ih).reshape(in.x.sizes());
  if (needed[kH0]) grads[kH0] = assemble(dh0, B, H, in.h0);
  if (needed[kC0]) grads[kC0] = assemble(dc0, B, H, in.h0);
  if (needed[kWih]) grads[kWih] = dp::mm(dGx.t(), info.packed ? in.x : in.x.reshape({N, info.I}));
  if (needed[kWhh]) grads[kWhh] = dp::mm(dGh.t(), T == 1 ? hprev[0] : dp::cat(hprev, 0));
  if (needed[kBih]) grads[kBih] = dp::sum(dGx, {0});
  if (needed[kBhh]) grads[kBhh] = gru || !needed[kBih] ? dp::sum(dGh, {0}) : dp::clone(grads[kBih]);
  return grads;
}

}  // namespace rnn_detail

namespace {

using rnn_detail::LayerInputs;
using rnn_detail::RnnCell;

std::array<Tensor, 3> composite(const char* op, RnnCell cell, const LayerInputs& in, bool reverse, const Tensor& batch_sizes) {
  return rnn_detail::layer_composite(cell, in, rnn_detail::check_layer_args(op, cell, in, batch_sizes, reverse));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse,
                                                        const Tensor& batch_sizes) {
  auto r = composite("lstm_layer_composite", RnnCell::LSTM, LayerInputs{input, h0, c0, w_ih, w_hh, b_ih, b_hh}, reverse, batch_sizes);
  return {r[0], r[1], r[2]};
}

std::tuple<Tensor, Tensor> gru_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                               const Tensor& b_hh, bool reverse, const Tensor& batch_sizes) {
  auto r = composite("gru_layer_composite", RnnCell::GRU, LayerInputs{input, h0, Tensor(), w_ih, w_hh, b_ih, b_hh}, reverse, batch_sizes);
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> rnn_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                               const Tensor& b_hh, RNNNonlinearity nonlinearity, bool reverse, const Tensor& batch_sizes) {
  const RnnCell cell = nonlinearity == RNNNonlinearity::ReLU ? RnnCell::ReLU : RnnCell::Tanh;
  auto r = composite("rnn_layer_composite", cell, LayerInputs{input, h0, Tensor(), w_ih, w_hh, b_ih, b_hh}, reverse, batch_sizes);
  return {r[0], r[1]};
}

}  // namespace dp
