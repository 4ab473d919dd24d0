#include "dp/nn/modules/rnn.h"

#include <charconv>
#include <cmath>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/init.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/rnn.h"
#include "dp/ops/shape.h"

namespace dp::nn {
namespace {

// Python's repr of a float (shortest round-trip digits, always with a '.' or exponent): 0.25, 1.0.
std::string python_float(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "n": nan/inf
  return s;
}

// PyTorch's shape tuple spelling in "Expected hidden[0] size (2, 3, 20), got [1, 3, 20]".
std::string tuple_str(IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// "torch.float32", as Python prints a dtype.
std::string torch_dtype_name(DType t) { return std::string("torch.") + dtype_name(t); }

// PyTorch's RNN init: every parameter U(-1/sqrt(H), 1/sqrt(H)).
void init_rnn_params(std::vector<Tensor> params, int64_t hidden_size) {
  const double stdv = hidden_size > 0 ? 1.0 / std::sqrt(static_cast<double>(hidden_size)) : 0.0;
  for (Tensor& p : params)
    if (p.defined()) init::uniform_(p, -stdv, stdv);
}

// at::dropout on a layer's output: zero with probability p, scale the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p) {
  if (p >= 1.0) return dp::mul(x, dp::zeros_like(x));
  Tensor mask = dp::empty(x.sizes(), options_of(x));
  dp::bernoulli_(mask, 1.0 - p);
  dp::mul_(mask, 1.0 / (1.0 - p));
  return dp::mul(x, mask);
}

}  // namespace

// ------------------------------------------------------------------------------------------ LSTM

LSTMImpl::LSTMImpl(const LSTMOptions& opts) : options(opts) {
  const double p = options.dropout();
  DP_CHECK(p >= 0.0 && p <= 1.0, ValueError,
           "dropout should be a number in range [0, 1] representing the probability of an element being zeroed (LSTM got dropout=", python_float(p),
           ")");
  DP_CHECK(options.input_size() >= 0, ValueError, "LSTM: input_size must be non-negative, got ", options.input_size());
  DP_CHECK(options.hidden_size() > 0, ValueError, "hidden_size must be greater than zero (LSTM got ", options.hidden_size(), ")");
  DP_CHECK(options.num_layers() > 0, ValueError, "num_layers must be greater than zero (LSTM got ", options.num_layers(), ")");
  const int64_t H = options.hidden_size(), G = 4 * H, D = options.bidirectional() ? 2 : 1;
  for (int64_t layer = 0; layer < options.num_layers(); ++layer) {
    const int64_t in = layer == 0 ? options.input_size() : H * D;
    for (int64_t dir = 0; dir < D; ++dir) {
      const std::string suffix = "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      std::vector<std::pair<std::string, Shape>> slots = {{"weight_ih" + suffix, {G, in}}, {"weight_hh" + suffix, {G, H}}};
      if (options.bias()) {
        slots.push_back({"bias_ih" + suffix, {G}});
        slots.push_back({"bias_hh" + suffix, {G}});
      }
      for (auto& [name, shape] : slots) {
        flat_weights.push_back(register_parameter(name, dp::empty(shape)));
        flat_weights_names.push_back(name);
      }
    }
  }
  reset_parameters();
}

void LSTMImpl::reset_parameters() { init_rnn_params(flat_weights, options.hidden_size()); }

std::tuple<Tensor, Tensor, Tensor, Tensor> LSTMImpl::layer_weights(int64_t layer, int64_t direction) const {
  const int64_t per = options.bias() ? 4 : 2;
  const size_t base = static_cast<size_t>((layer * (options.bidirectional() ? 2 : 1) + direction) * per);
  if (!options.bias()) return {flat_weights[base], flat_weights[base + 1], Tensor(), Tensor()};
  return {flat_weights[base], flat_weights[base + 1], flat_weights[base + 2], flat_weights[base + 3]};
}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) const {
  DP_CHECK(input.defined(), ValueError, "LSTM: input is an undefined tensor");
  DP_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, "LSTM: Expected input to be 2-D or 3-D but received ", input.dim(), "-D tensor (input ",
           input.size_str(), ")");
  const DType wdt = flat_weights[0].dtype();
  DP_CHECK(input.dtype() == wdt, DTypeError, "LSTM: input must have the type ", torch_dtype_name(wdt), ", got type ",
           torch_dtype_name(input.dtype()));
  DP_CHECK(input.size(-1) == options.input_size(), ShapeError, "input.size(-1) must be equal to input_size. Expected ", options.input_size(),
           ", got ", input.size(-1));
  const bool batched = input.dim() == 3;
  const int64_t batch_dim = options.batch_first() ? 0 : 1;
  const int64_t L = options.num_layers(), D = options.bidirectional() ? 2 : 1, H = options.hidden_size();
  // [T, B, I] from here on.
  Tensor x = batched ? input : input.unsqueeze(batch_dim);
  if (options.batch_first()) x = x.transpose(0, 1);
  const int64_t B = x.size(1);

  Tensor h0, c0;
  if (hx) {
    std::tie(h0, c0) = *hx;
    DP_CHECK(h0.defined() && c0.defined(), ValueError, "LSTM: hx = (h0, c0) holds an undefined tensor");
    if (batched) {
      DP_CHECK(h0.dim() == 3 && c0.dim() == 3, ShapeError, "For batched 3-D input, hx and cx should also be 3-D but got (", h0.dim(), "-D, ",
               c0.dim(), "-D) tensors");
    } else {
      DP_CHECK(h0.dim() == 2 && c0.dim() == 2, ShapeError, "For unbatched 2-D input, hx and cx should also be 2-D but got (", h0.dim(), "-D, ",
               c0.dim(), "-D) tensors");
      h0 = h0.unsqueeze(1);
      c0 = c0.unsqueeze(1);
    }
    const Shape expected = {L * D, B, H};
    DP_CHECK(h0.sizes() == expected, ShapeError, "Expected hidden[0] size ", tuple_str(expected), ", got ", h0.size_str());
    DP_CHECK(c0.sizes() == expected, ShapeError, "Expected hidden[1] size ", tuple_str(expected), ", got ", c0.size_str());
  } else {
    h0 = zeros({L * D, B, H}, options_of(input));
    c0 = h0;
  }

  const bool drop = is_training() && options.dropout() > 0.0;
  std::vector<Tensor> hn(static_cast<size_t>(L * D)), cn(static_cast<size_t>(L * D));
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < L; ++layer) {
    std::vector<Tensor> outs;
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = layer * D + dir;
      auto [w_ih, w_hh, b_ih, b_hh] = layer_weights(layer, dir);
      auto [out, h, c] = lstm_layer(layer_input, h0.select(0, k), c0.select(0, k), w_ih, w_hh, b_ih, b_hh, dir == 1);
      outs.push_back(out);
      hn[k] = h;
      cn[k] = c;
    }
    layer_input = D == 1 ? outs[0] : dp::cat(outs, 2);
    if (drop && layer + 1 < L) layer_input = dropout(layer_input, options.dropout());
  }
  Tensor output = options.batch_first() ? layer_input.transpose(0, 1) : layer_input;
  Tensor h_n = dp::stack(hn, 0), c_n = dp::stack(cn, 0);
  if (!batched) {
    output = output.squeeze(batch_dim);
    h_n = h_n.squeeze(1);
    c_n = c_n.squeeze(1);
  }
  return {output, {h_n, c_n}};
}

std::string LSTMImpl::extra_repr() const {
  std::string s = std::to_string(options.input_size()) + ", " + std::to_string(options.hidden_size());
  if (options.num_layers() != 1) s += ", num_layers=" + std::to_string(options.num_layers());
  if (!options.bias()) s += ", bias=False";
  if (options.batch_first()) s += ", batch_first=True";
  if (options.dropout() != 0.0) s += ", dropout=" + python_float(options.dropout());
  if (options.bidirectional()) s += ", bidirectional=True";
  return s;
}

// -------------------------------------------------------------------------------------- LSTMCell

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& opts) : options(opts) {
  DP_CHECK(options.input_size() >= 0 && options.hidden_size() >= 0, ValueError,
           "LSTMCell: sizes must be non-negative, got input_size=", options.input_size(), ", hidden_size=", options.hidden_size());
  const int64_t H = options.hidden_size(), G = 4 * H;
  weight_ih = register_parameter("weight_ih", empty({G, options.input_size()}));
  weight_hh = register_parameter("weight_hh", empty({G, H}));
  bias_ih = register_parameter("bias_ih", options.bias() ? empty({G}) : Tensor());
  bias_hh = register_parameter("bias_hh", options.bias() ? empty({G}) : Tensor());
  bind_tensor<&LSTMCellImpl::weight_ih>("weight_ih");
  bind_tensor<&LSTMCellImpl::weight_hh>("weight_hh");
  bind_tensor<&LSTMCellImpl::bias_ih>("bias_ih");
  bind_tensor<&LSTMCellImpl::bias_hh>("bias_hh");
  reset_parameters();
}

void LSTMCellImpl::reset_parameters() { init_rnn_params({weight_ih, weight_hh, bias_ih, bias_hh}, options.hidden_size()); }

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) const {
  DP_CHECK(input.defined(), ValueError, "LSTMCell: input is an undefined tensor");
  DP_CHECK(input.dim() == 1 || input.dim() == 2, ShapeError, "LSTMCell: Expected input to be 1-D or 2-D but received ", input.dim(), "-D tensor");
  const bool batched = input.dim() == 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  DP_CHECK(x.size(1) == options.input_size(), ShapeError, "input has inconsistent input_size: got ", x.size(1), " expected ", options.input_size());
  DP_CHECK(input.dtype() == weight_ih.dtype(), DTypeError, "LSTMCell: input must have the type ", torch_dtype_name(weight_ih.dtype()), ", got type ",
           torch_dtype_name(input.dtype()));
  const int64_t B = x.size(0), H = options.hidden_size();
  Tensor h, c;
  if (hx) {
    std::tie(h, c) = *hx;
    DP_CHECK(h.defined() && c.defined(), ValueError, "LSTMCell: hx = (h, c) holds an undefined tensor");
    const int64_t want = batched ? 2 : 1;
    for (const auto& [idx, t] : {std::pair<int, const Tensor*>{0, &h}, {1, &c}}) {
      DP_CHECK(t->dim() == want, ShapeError, "LSTMCell: Expected hx[", idx, "] to be ", want, "-D for ", batched ? "batched 2-D" : "unbatched 1-D",
               " input, got ", t->dim(), "-D tensor ", t->size_str());
    }
    if (!batched) {
      h = h.unsqueeze(0);
      c = c.unsqueeze(0);
    }
    for (const auto& [idx, t] : {std::pair<int, const Tensor*>{0, &h}, {1, &c}}) {
      DP_CHECK(t->size(0) == B, ShapeError, "Input batch size ", B, " doesn't match hidden", idx, " batch size ", t->size(0));
      DP_CHECK(t->size(1) == H, ShapeError, "hidden", idx, " has inconsistent hidden_size: got ", t->size(1), ", expected ", H);
    }
  } else {
    h = zeros({B, H}, options_of(input));
    c = h;
  }
  auto [h1, c1] = lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh);
  if (!batched) return {h1.squeeze(0), c1.squeeze(0)};
  return {h1, c1};
}

std::string LSTMCellImpl::extra_repr() const {
  std::string s = std::to_string(options.input_size()) + ", " + std::to_string(options.hidden_size());
  if (!options.bias()) s += ", bias=False";
  return s;
}

}  // namespace dp::nn
