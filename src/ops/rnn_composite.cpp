// lstm_layer written with ordinary differentiable dp ops: the reference for the fused op, and the
// create_graph backward of the fused op (its gradient formulas as dp ops on a recomputed forward,
// so the gradients have history and can be differentiated again).
#include <vector>

#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/rnn.h"
#include "dp/ops/shape.h"
#include "ops/rnn_internal.h"

namespace dp {
namespace {

using rnn_detail::LstmDims;

// What one step computed (for the backward formulas).
struct StepState {
  Tensor i, f, g, o, c_prev, c, h_prev;
};

std::tuple<Tensor, Tensor, Tensor> composite_forward(const LstmDims& d, const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                                     const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse,
                                                     std::vector<StepState>* steps) {
  const Tensor gx = dp::linear(input, w_ih, b_ih);  // [T, B, 4H]
  Tensor h = h0, c = c0;
  std::vector<Tensor> outs(static_cast<size_t>(d.T));
  for (int64_t s = 0; s < d.T; ++s) {
    const int64_t t = reverse ? d.T - 1 - s : s;
    const Tensor gates = dp::add(gx.select(0, t), dp::linear(h, w_hh, b_hh));
    const std::vector<Tensor> blocks = gates.chunk(4, 1);
    const Tensor i = dp::sigmoid(blocks[0]), f = dp::sigmoid(blocks[1]), g = dp::tanh(blocks[2]), o = dp::sigmoid(blocks[3]);
    const Tensor cn = dp::add(dp::mul(f, c), dp::mul(i, g));
    const Tensor hn = dp::mul(o, dp::tanh(cn));
    if (steps) (*steps)[t] = StepState{i, f, g, o, c, cn, h};
    c = cn;
    h = hn;
    outs[t] = hn;
  }
  return {dp::stack(outs, 0), h, c};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
  const LstmDims d = rnn_detail::check_lstm_layer_args("lstm_layer_composite", input, h0, c0, w_ih, w_hh, b_ih, b_hh);
  return composite_forward(d, input, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, nullptr);
}

namespace rnn_detail {

autograd::variable_list lstm_layer_backward_composite(const Tensor& d_out, const Tensor& d_hn, const Tensor& d_cn, const Tensor& input,
                                                      const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, bool reverse, const std::array<bool, 7>& needed) {
  const LstmDims d = check_lstm_layer_args("lstm_layer backward", input, h0, c0, w_ih, w_hh, b_ih, b_hh);
  std::vector<StepState> st(static_cast<size_t>(d.T));
  composite_forward(d, input, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, &st);

  Tensor dh = d_hn.defined() ? d_hn : dp::zeros_like(h0);
  Tensor dc = d_cn.defined() ? d_cn : dp::zeros_like(c0);
  std::vector<Tensor> dgates(static_cast<size_t>(d.T)), h_prev(static_cast<size_t>(d.T));
  for (int64_t s = d.T - 1; s >= 0; --s) {
    const int64_t t = reverse ? d.T - 1 - s : s;
    const StepState& S = st[t];
    const Tensor dht = d_out.defined() ? dp::add(dh, d_out.select(0, t)) : dh;
    const Tensor tc = dp::tanh(S.c);
    const Tensor dct = dp::add(dc, dp::mul(dp::mul(dht, S.o), dp::rsub(dp::mul(tc, tc), 1)));
    const Tensor di = dp::mul(dp::mul(dct, S.g), dp::mul(S.i, dp::rsub(S.i, 1)));
    const Tensor df = dp::mul(dp::mul(dct, S.c_prev), dp::mul(S.f, dp::rsub(S.f, 1)));
    const Tensor dg = dp::mul(dp::mul(dct, S.i), dp::rsub(dp::mul(S.g, S.g), 1));
    const Tensor dov = dp::mul(dp::mul(dht, tc), dp::mul(S.o, dp::rsub(S.o, 1)));
    dgates[t] = dp::cat({di, df, dg, dov}, 1);
    h_prev[t] = S.h_prev;
    dc = dp::mul(dct, S.f);
    dh = dp::mm(dgates[t], w_hh);
  }
  const int64_t G = 4 * d.H, rows = d.T * d.B;
  const Tensor dG = dp::stack(dgates, 0);  // [T, B, 4H]
  const Tensor dG_rows = dG.reshape({rows, G});
  autograd::variable_list grads(7);
  if (needed[0]) grads[0] = dp::matmul(dG, w_ih);
  if (needed[1]) grads[1] = dh;
  if (needed[2]) grads[2] = dc;
  if (needed[3]) grads[3] = dp::mm(dG_rows.t(), input.reshape({rows, d.I}));
  if (needed[4]) grads[4] = dp::mm(dG_rows.t(), dp::stack(h_prev, 0).reshape({rows, d.H}));
  if (needed[5] || needed[6]) {
    const Tensor db = dp::sum(dG_rows, {0});
    if (needed[5]) grads[5] = db;
    if (needed[6]) grads[6] = needed[5] ? dp::clone(db) : db;
  }
  return grads;
}

}  // namespace rnn_detail
}  // namespace dp
