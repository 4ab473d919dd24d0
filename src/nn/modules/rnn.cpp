#include "dp/nn/modules/rnn.h"

#include <charconv>
#include <cmath>
#include "dp/nn/init.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
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

using Mode = detail::RNNImplBase::Mode;

int64_t gate_count(Mode m) { return m == Mode::LSTM ? 4 : m == Mode::GRU ? 3 : 1; }

}  // namespace

// ---------------------------------------------------------------------------------- RNNImplBase

namespace detail {

RNNImplBase::RNNImplBase(const Config& c) : config_(c) {
  const char* name = type_name();
  const double p = c.dropout;
  DP_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout should be a number in range [0, 1] representing the probability of an element being zeroed (",
           name, " got dropout=", python_float(p), ")");
  DP_CHECK(c.input_size >= 0, ValueError, name, ": input_size must be non-negative, got ", c.input_size);
  DP_CHECK(c.hidden_size > 0, ValueError, "hidden_size must be greater than zero (", name, " got ", c.hidden_size, ")");
  DP_CHECK(c.num_layers > 0, ValueError, "num_layers must be greater than zero (", name, " got ", c.num_layers, ")");
  const int64_t H = c.hidden_size, G = gate_count(c.mode) * H, D = c.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const int64_t in = layer == 0 ? c.input_size : H * D;
    for (int64_t dir = 0; dir < D; ++dir) {
      const std::string suffix = "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      std::vector<std::pair<std::string, Shape>> slots = {{"weight_ih" + suffix, {G, in}}, {"weight_hh" + suffix, {G, H}}};
      if (c.bias) {
        slots.push_back({"bias_ih" + suffix, {G}});
        slots.push_back({"bias_hh" + suffix, {G}});
      }
      for (auto& [pname, shape] : slots) {
        flat_weights.push_back(register_parameter(pname, dp::empty(shape)));
        flat_weights_names.push_back(pname);
      }
    }
  }
  reset_parameters();
}

const char* RNNImplBase::type_name() const {
  switch (config_.mode) {
    case Mode::LSTM:
      return "LSTM";
    case Mode::GRU:
      return "GRU";
    case Mode::RNN_TANH:
    case Mode::RNN_RELU:
      break;
  }
  return "RNN";
}

void RNNImplBase::reset_parameters() { init_rnn_params(flat_weights, config_.hidden_size); }

std::string RNNImplBase::extra_repr() const {
  const Config& c = config_;
  std::string s = std::to_string(c.input_size) + ", " + std::to_string(c.hidden_size);
  if (c.num_layers != 1) s += ", num_layers=" + std::to_string(c.num_layers);
  if (!c.bias) s += ", bias=False";
  if (c.batch_first) s += ", batch_first=True";
  if (c.dropout != 0.0) s += ", dropout=" + python_float(c.dropout);
  if (c.bidirectional) s += ", bidirectional=True";
  return s;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> RNNImplBase::layer_weights(int64_t layer, int64_t direction) const {
  const int64_t per = config_.bias ? 4 : 2;
  const size_t base = static_cast<size_t>((layer * (config_.bidirectional ? 2 : 1) + direction) * per);
  if (!config_.bias) return {flat_weights[base], flat_weights[base + 1], Tensor(), Tensor()};
  return {flat_weights[base], flat_weights[base + 1], flat_weights[base + 2], flat_weights[base + 3]};
}

void RNNImplBase::check_hidden(const Tensor& hx, const Tensor& cx, int64_t batch) const {
  const int64_t D = config_.bidirectional ? 2 : 1;
  const Shape expected = {config_.num_layers * D, batch, config_.hidden_size};
  if (config_.mode == Mode::LSTM) {
    DP_CHECK(hx.sizes() == expected, ShapeError, "Expected hidden[0] size ", tuple_str(expected), ", got ", hx.size_str());
    DP_CHECK(cx.sizes() == expected, ShapeError, "Expected hidden[1] size ", tuple_str(expected), ", got ", cx.size_str());
  } else {
    DP_CHECK(hx.sizes() == expected, ShapeError, "Expected hidden size ", tuple_str(expected), ", got ", hx.size_str());
  }
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run_layers(const Tensor& x, const Tensor& batch_sizes, const Tensor& h0, const Tensor& c0) const {
  const Config& c = config_;
  const int64_t L = c.num_layers, D = c.bidirectional ? 2 : 1;
  const bool lstm = c.mode == Mode::LSTM;
  const bool drop = is_training() && c.dropout > 0.0;
  std::vector<Tensor> hn(static_cast<size_t>(L * D)), cn(lstm ? static_cast<size_t>(L * D) : 0);
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < L; ++layer) {
    std::vector<Tensor> outs;
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = layer * D + dir;
      const bool reverse = dir == 1;
      auto [w_ih, w_hh, b_ih, b_hh] = layer_weights(layer, dir);
      const Tensor h = h0.select(0, k);
      switch (c.mode) {
        case Mode::LSTM: {
          auto [out, hk, ck] = lstm_layer(layer_input, h, c0.select(0, k), w_ih, w_hh, b_ih, b_hh, reverse, batch_sizes);
          outs.push_back(out);
          hn[k] = hk;
          cn[k] = ck;
          break;
        }
        case Mode::GRU: {
          auto [out, hk] = gru_layer(layer_input, h, w_ih, w_hh, b_ih, b_hh, reverse, batch_sizes);
          outs.push_back(out);
          hn[k] = hk;
          break;
        }
        case Mode::RNN_TANH:
        case Mode::RNN_RELU: {
          const RNNNonlinearity nl = c.mode == Mode::RNN_RELU ? RNNNonlinearity::ReLU : RNNNonlinearity::Tanh;
          auto [out, hk] = rnn_layer(layer_input, h, w_ih, w_hh, b_ih, b_hh, nl, reverse, batch_sizes);
          outs.push_back(out);
          hn[k] = hk;
          break;
        }
      }
    }
    layer_input = D == 1 ? outs[0] : dp::cat(outs, -1);
    if (drop && layer + 1 < L) layer_input = dropout(layer_input, c.dropout);
  }
  return {layer_input, dp::stack(hn, 0), lstm ? dp::stack(cn, 0) : Tensor()};
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::forward_tensor(const Tensor& input, const Tensor& hx_in, const Tensor& cx_in) const {
  const Config& c = config_;
  const char* name = type_name();
  const bool lstm = c.mode == Mode::LSTM;
  DP_CHECK(input.defined(), ValueError, name, ": input is an undefined tensor");
  DP_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, name, ": Expected input to be 2-D or 3-D but received ", input.dim(),
           "-D tensor (input ", input.size_str(), ")");
  const DType wdt = flat_weights[0].dtype();
  DP_CHECK(input.dtype() == wdt, DTypeError, name, ": input must have the type ", torch_dtype_name(wdt), ", got type ",
           torch_dtype_name(input.dtype()));
  DP_CHECK(input.size(-1) == c.input_size, ShapeError, "input.size(-1) must be equal to input_size. Expected ", c.input_size, ", got ",
           input.size(-1));
  const bool batched = input.dim() == 3;
  const int64_t batch_dim = c.batch_first ? 0 : 1;
  const int64_t L = c.num_layers, D = c.bidirectional ? 2 : 1, H = c.hidden_size;
  // [T, B, I] from here on.
  Tensor x = batched ? input : input.unsqueeze(batch_dim);
  if (c.batch_first) x = x.transpose(0, 1);
  const int64_t B = x.size(1);

  Tensor h0 = hx_in, c0 = cx_in;
  if (h0.defined()) {
    DP_CHECK(!lstm || c0.defined(), ValueError, name, ": hx = (h0, c0) holds an undefined tensor");
    if (lstm) {
      DP_CHECK(h0.dim() == (batched ? 3 : 2) && c0.dim() == (batched ? 3 : 2), ShapeError, "For ", batched ? "batched 3-D" : "unbatched 2-D",
               " input, hx and cx should also be ", batched ? "3-D" : "2-D", " but got (", h0.dim(), "-D, ", c0.dim(), "-D) tensors");
    } else {
      DP_CHECK(h0.dim() == (batched ? 3 : 2), ShapeError, "For ", batched ? "batched 3-D" : "unbatched 2-D", " input, hx should also be ",
               batched ? "3-D" : "2-D", " but got ", h0.dim(), "-D tensor");
    }
    if (!batched) {
      h0 = h0.unsqueeze(1);
      if (lstm) c0 = c0.unsqueeze(1);
    }
    check_hidden(h0, c0, B);
  } else {
    DP_CHECK(!c0.defined(), ValueError, name, ": hx = (h0, c0) holds an undefined tensor");
    h0 = zeros({L * D, B, H}, options_of(input));
    if (lstm) c0 = h0;
  }

  auto [out, hn, cn] = run_layers(x, Tensor(), h0, c0);
  Tensor output = c.batch_first ? out.transpose(0, 1) : out;
  if (!batched) {
    output = output.squeeze(batch_dim);
    hn = hn.squeeze(1);
    if (lstm) cn = cn.squeeze(1);
  }
  return {output, hn, cn};
}

std::tuple<PackedSequence, Tensor, Tensor> RNNImplBase::forward_packed(const PackedSequence& input, const Tensor& hx_in, const Tensor& cx_in) const {
  const Config& c = config_;
  const char* name = type_name();
  const bool lstm = c.mode == Mode::LSTM;
  DP_CHECK(input.defined(), ValueError, name, ": the PackedSequence is empty (default-constructed)");
  const Tensor& data = input.data();
  DP_CHECK(data.dim() == 2, ShapeError, name, ": input must have 2 dimensions, got ", data.dim(), " (packed data ", data.size_str(), ")");
  const DType wdt = flat_weights[0].dtype();
  DP_CHECK(data.dtype() == wdt, DTypeError, name, ": input must have the type ", torch_dtype_name(wdt), ", got type ",
           torch_dtype_name(data.dtype()));
  DP_CHECK(data.size(-1) == c.input_size, ShapeError, "input.size(-1) must be equal to input_size. Expected ", c.input_size, ", got ", data.size(-1));
  DP_CHECK(input.batch_sizes().numel() > 0, ValueError, name, ": the PackedSequence has no steps (batch_sizes is empty)");
  const int64_t B = input.batch_sizes().data_ptr<int64_t>()[0];  // batch_sizes is a CPU tensor (PackedSequence's contract)
  const int64_t L = c.num_layers, D = c.bidirectional ? 2 : 1, H = c.hidden_size;
  const Tensor& sorted = input.sorted_indices();
  Tensor h0 = hx_in, c0 = cx_in;
  if (h0.defined()) {
    DP_CHECK(!lstm || c0.defined(), ValueError, name, ": hx = (h0, c0) holds an undefined tensor");
    // The states come in the batch's original order: sorted like the packed rows.
    if (sorted.defined()) {
      DP_CHECK(h0.dim() == 3 && (!lstm || c0.dim() == 3), ShapeError, name, ": with a packed input, hx", lstm ? " and cx" : "",
               " should be 3-D ([num_layers * num_directions, batch, hidden_size]), got ", h0.size_str());
      h0 = index_select(h0, 1, sorted);
      if (lstm) c0 = index_select(c0, 1, sorted);
    }
    check_hidden(h0, c0, B);
  } else {
    DP_CHECK(!c0.defined(), ValueError, name, ": hx = (h0, c0) holds an undefined tensor");
    h0 = zeros({L * D, B, H}, options_of(data));
    if (lstm) c0 = h0;
  }
  auto [out, hn, cn] = run_layers(data, input.batch_sizes(), h0, c0);
  const Tensor& unsorted = input.unsorted_indices();
  if (unsorted.defined()) {
    hn = index_select(hn, 1, unsorted);
    if (lstm) cn = index_select(cn, 1, unsorted);
  }
  return {PackedSequence(out, input.batch_sizes(), input.sorted_indices(), input.unsorted_indices()), hn, cn};
}

}  // namespace detail

// ------------------------------------------------------------------------------ RNN, LSTM, GRU

RNNImpl::RNNImpl(const RNNOptions& opts)
    : RNNImplBase(config_of(opts.nonlinearity() == RNNNonlinearity::ReLU ? Mode::RNN_RELU : Mode::RNN_TANH, opts)), options(opts) {}

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, const Tensor& hx) const {
  auto [out, hn, cn] = forward_tensor(input, hx, Tensor());
  return {out, hn};
}

std::tuple<PackedSequence, Tensor> RNNImpl::forward(const PackedSequence& input, const Tensor& hx) const {
  auto [out, hn, cn] = forward_packed(input, hx, Tensor());
  return {out, hn};
}

LSTMImpl::LSTMImpl(const LSTMOptions& opts) : RNNImplBase(config_of(Mode::LSTM, opts)), options(opts) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) const {
  Tensor h0, c0;
  if (hx) {
    std::tie(h0, c0) = *hx;
    DP_CHECK(h0.defined() && c0.defined(), ValueError, "LSTM: hx = (h0, c0) holds an undefined tensor");
  }
  auto [out, hn, cn] = forward_tensor(input, h0, c0);
  return {out, {hn, cn}};
}

std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const PackedSequence& input,
                                                                         std::optional<std::tuple<Tensor, Tensor>> hx) const {
  Tensor h0, c0;
  if (hx) {
    std::tie(h0, c0) = *hx;
    DP_CHECK(h0.defined() && c0.defined(), ValueError, "LSTM: hx = (h0, c0) holds an undefined tensor");
  }
  auto [out, hn, cn] = forward_packed(input, h0, c0);
  return {out, {hn, cn}};
}

GRUImpl::GRUImpl(const GRUOptions& opts) : RNNImplBase(config_of(Mode::GRU, opts)), options(opts) {}

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, const Tensor& hx) const {
  auto [out, hn, cn] = forward_tensor(input, hx, Tensor());
  return {out, hn};
}

std::tuple<PackedSequence, Tensor> GRUImpl::forward(const PackedSequence& input, const Tensor& hx) const {
  auto [out, hn, cn] = forward_packed(input, hx, Tensor());
  return {out, hn};
}

// ------------------------------------------------------------------------------------------ cells

namespace detail {

RNNCellImplBase::RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t gates, std::optional<RNNNonlinearity> nonlinearity)
    : input_size_(input_size), hidden_size_(hidden_size), nonlinearity_(nonlinearity) {
  const char* type = gates == 4 ? "LSTMCell" : gates == 3 ? "GRUCell" : "RNNCell";
  DP_CHECK(input_size >= 0 && hidden_size >= 0, ValueError, type, ": sizes must be non-negative, got input_size=", input_size,
           ", hidden_size=", hidden_size);
  const int64_t G = gates * hidden_size;
  weight_ih = register_parameter("weight_ih", empty({G, input_size}));
  weight_hh = register_parameter("weight_hh", empty({G, hidden_size}));
  bias_ih = register_parameter("bias_ih", bias ? empty({G}) : Tensor());
  bias_hh = register_parameter("bias_hh", bias ? empty({G}) : Tensor());
  bind_tensor<&RNNCellImplBase::weight_ih>("weight_ih");
  bind_tensor<&RNNCellImplBase::weight_hh>("weight_hh");
  bind_tensor<&RNNCellImplBase::bias_ih>("bias_ih");
  bind_tensor<&RNNCellImplBase::bias_hh>("bias_hh");
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() { init_rnn_params({weight_ih, weight_hh, bias_ih, bias_hh}, hidden_size_); }

std::string RNNCellImplBase::extra_repr() const {
  std::string s = std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (!bias_ih.defined()) s += ", bias=False";
  if (nonlinearity_ && *nonlinearity_ != RNNNonlinearity::Tanh) s += std::string(", nonlinearity=") + rnn_nonlinearity_name(*nonlinearity_);
  return s;
}

RNNCellImplBase::Prepared RNNCellImplBase::prepare(const char* nm, const Tensor& input, std::vector<Tensor> states) const {
  DP_CHECK(input.defined(), ValueError, nm, ": input is an undefined tensor");
  DP_CHECK(input.dim() == 1 || input.dim() == 2, ShapeError, nm, ": Expected input to be 1-D or 2-D but received ", input.dim(), "-D tensor");
  Prepared p;
  p.batched = input.dim() == 2;
  p.x = p.batched ? input : input.unsqueeze(0);
  DP_CHECK(p.x.size(1) == input_size_, ShapeError, "input has inconsistent input_size: got ", p.x.size(1), " expected ", input_size_);
  DP_CHECK(input.dtype() == weight_ih.dtype(), DTypeError, nm, ": input must have the type ", torch_dtype_name(weight_ih.dtype()), ", got type ",
           torch_dtype_name(input.dtype()));
  const int64_t B = p.x.size(0), H = hidden_size_;
  const int64_t want = p.batched ? 2 : 1;
  for (size_t idx = 0; idx < states.size(); ++idx) {
    Tensor& t = states[idx];
    if (!t.defined()) {
      t = zeros({B, H}, options_of(input));
      continue;
    }
    DP_CHECK(t.dim() == want, ShapeError, nm, ": Expected hx", states.size() > 1 ? "[" + std::to_string(idx) + "]" : std::string(), " to be ", want,
             "-D for ", p.batched ? "batched 2-D" : "unbatched 1-D", " input, got ", t.dim(), "-D tensor ", t.size_str());
    if (!p.batched) t = t.unsqueeze(0);
    DP_CHECK(t.size(0) == B, ShapeError, "Input batch size ", B, " doesn't match hidden", idx, " batch size ", t.size(0));
    DP_CHECK(t.size(1) == H, ShapeError, "hidden", idx, " has inconsistent hidden_size: got ", t.size(1), ", expected ", H);
  }
  p.states = std::move(states);
  return p;
}

}  // namespace detail

RNNCellImpl::RNNCellImpl(const RNNCellOptions& opts)
    : RNNCellImplBase(opts.input_size(), opts.hidden_size(), opts.bias(), 1, opts.nonlinearity()), options(opts) {}

Tensor RNNCellImpl::forward(const Tensor& input, const Tensor& hx) const {
  Prepared p = prepare("RNNCell", input, {hx});
  Tensor h = options.nonlinearity() == RNNNonlinearity::ReLU ? rnn_relu_cell(p.x, p.states[0], weight_ih, weight_hh, bias_ih, bias_hh)
                                                             : rnn_tanh_cell(p.x, p.states[0], weight_ih, weight_hh, bias_ih, bias_hh);
  return p.batched ? h : h.squeeze(0);
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& opts)
    : RNNCellImplBase(opts.input_size(), opts.hidden_size(), opts.bias(), 4, std::nullopt), options(opts) {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) const {
  Tensor h, c;
  if (hx) {
    std::tie(h, c) = *hx;
    DP_CHECK(h.defined() && c.defined(), ValueError, "LSTMCell: hx = (h, c) holds an undefined tensor");
  }
  Prepared p = prepare("LSTMCell", input, {h, c});
  auto [h1, c1] = lstm_cell(p.x, p.states[0], p.states[1], weight_ih, weight_hh, bias_ih, bias_hh);
  if (!p.batched) return {h1.squeeze(0), c1.squeeze(0)};
  return {h1, c1};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& opts)
    : RNNCellImplBase(opts.input_size(), opts.hidden_size(), opts.bias(), 3, std::nullopt), options(opts) {}

Tensor GRUCellImpl::forward(const Tensor& input, const Tensor& hx) const {
  Prepared p = prepare("GRUCell", input, {hx});
  Tensor h = gru_cell(p.x, p.states[0], weight_ih, weight_hh, bias_ih, bias_hh);
  return p.batched ? h : h.squeeze(0);
}

}  // namespace dp::nn
