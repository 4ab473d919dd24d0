#pragma once
// Recurrent layers with PyTorch's semantics, parameter names and printing: RNN (tanh or ReLU), LSTM
// and GRU, on padded or packed sequences, and their cells RNNCell, LSTMCell and GRUCell.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>
#include "dp/core/errors.h"
#include "dp/nn/module.h"
#include "dp/nn/utils/rnn.h"
#include "dp/ops/rnn.h"

namespace dp::nn {

using utils::rnn::PackedSequence;

namespace detail {

// The options RNN, LSTM and GRU share (chainable setters return the derived options).
template <typename Derived>
class RNNOptionsBase {
 public:
  RNNOptionsBase(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  Derived& num_layers(int64_t n) {
    num_layers_ = n;
    return self();
  }
  Derived& bias(bool b) {
    bias_ = b;
    return self();
  }
  // Input and output are [B, T, *] instead of [T, B, *] (h0/c0 and h_n/c_n keep batch on dim 1).
  Derived& batch_first(bool b) {
    batch_first_ = b;
    return self();
  }
  // Dropout on the outputs of every layer but the last, in training mode only.
  Derived& dropout(double p) {
    dropout_ = p;
    return self();
  }
  Derived& bidirectional(bool b) {
    bidirectional_ = b;
    return self();
  }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return num_layers_; }
  bool bias() const { return bias_; }
  bool batch_first() const { return batch_first_; }
  double dropout() const { return dropout_; }
  bool bidirectional() const { return bidirectional_; }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  int64_t input_size_;
  int64_t hidden_size_;
  int64_t num_layers_ = 1;
  bool bias_ = true;
  bool batch_first_ = false;
  double dropout_ = 0.0;
  bool bidirectional_ = false;
};

// "tanh" / "relu" -> the enum; anything else is PyTorch's ValueError.
inline RNNNonlinearity parse_rnn_nonlinearity(const std::string& name) {
  DP_CHECK(name == "tanh" || name == "relu", ValueError, "Unknown nonlinearity '", name, "'. Select from 'tanh' or 'relu'.");
  return name == "relu" ? RNNNonlinearity::ReLU : RNNNonlinearity::Tanh;
}

}  // namespace detail

struct RNNOptions : detail::RNNOptionsBase<RNNOptions> {
  using detail::RNNOptionsBase<RNNOptions>::RNNOptionsBase;
  // tanh (default) or ReLU: RNNOptions(10, 20).nonlinearity(dp::RNNNonlinearity::ReLU) or .nonlinearity("relu").
  RNNOptions& nonlinearity(RNNNonlinearity n) {
    nonlinearity_ = n;
    return *this;
  }
  RNNOptions& nonlinearity(const std::string& name) { return nonlinearity(detail::parse_rnn_nonlinearity(name)); }
  RNNNonlinearity nonlinearity() const { return nonlinearity_; }

 private:
  RNNNonlinearity nonlinearity_ = RNNNonlinearity::Tanh;
};

struct LSTMOptions : detail::RNNOptionsBase<LSTMOptions> {
  using detail::RNNOptionsBase<LSTMOptions>::RNNOptionsBase;
};

struct GRUOptions : detail::RNNOptionsBase<GRUOptions> {
  using detail::RNNOptionsBase<GRUOptions>::RNNOptionsBase;
};

namespace detail {

// What RNN, LSTM and GRU share (torch.nn.RNNBase): the parameters and the driver that runs the
// layers and directions (one fused op each, dp/ops/rnn.h), dropout between layers, batch_first,
// unbatched input and packed sequences.
//
// Parameters, per layer l and direction (suffix "" or "_reverse"), registered in PyTorch's order:
// weight_ih_l{l}{suffix} [G*H, in], weight_hh_l{l}{suffix} [G*H, H], bias_ih_l{l}{suffix} [G*H],
// bias_hh_l{l}{suffix} [G*H] (no biases with bias(false)); G = 1 (RNN), 4 (LSTM), 3 (GRU); in =
// input_size for layer 0, D*H after (D = 2 when bidirectional). All U(-1/sqrt(H), 1/sqrt(H)).
class RNNImplBase : public Module {
 public:
  enum class Mode : uint8_t { RNN_TANH, RNN_RELU, LSTM, GRU };

  void reset_parameters();
  std::string extra_repr() const override;

  // Every parameter in registration order (PyTorch's _flat_weights) and their names.
  std::vector<Tensor> flat_weights;
  std::vector<std::string> flat_weights_names;

 protected:
  struct Config {
    Mode mode;
    int64_t input_size, hidden_size, num_layers;
    bool bias, batch_first;
    double dropout;
    bool bidirectional;
  };
  template <typename O>
  static Config config_of(Mode mode, const O& o) {
    return Config{mode, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(), o.dropout(), o.bidirectional()};
  }
  explicit RNNImplBase(const Config& config);

  // A tensor input ([T, B, I], [B, T, I] with batch_first, or unbatched [T, I]) with optional
  // initial states (undefined: zeros; cx only for the LSTM). Returns (output, h_n, c_n).
  std::tuple<Tensor, Tensor, Tensor> forward_tensor(const Tensor& input, const Tensor& hx, const Tensor& cx) const;
  // A packed input; hx/cx in the batch's original order, as are h_n/c_n.
  std::tuple<PackedSequence, Tensor, Tensor> forward_packed(const PackedSequence& input, const Tensor& hx, const Tensor& cx) const;

 private:
  const char* type_name() const;
  // The 2 or 4 parameters of (layer, direction): w_ih, w_hh, b_ih, b_hh (undefined without bias).
  std::tuple<Tensor, Tensor, Tensor, Tensor> layer_weights(int64_t layer, int64_t direction) const;
  void check_hidden(const Tensor& hx, const Tensor& cx, int64_t batch) const;
  // The layers over x ([T, B, I], or packed data [N, I] with batch_sizes) from h0/c0 [L*D, B, H].
  std::tuple<Tensor, Tensor, Tensor> run_layers(const Tensor& x, const Tensor& batch_sizes, const Tensor& h0, const Tensor& c0) const;

  Config config_;
};

}  // namespace detail

// A multi-layer Elman RNN (torch.nn.RNN): h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),
// act = tanh or relu (options.nonlinearity()).
//
//   forward(input [T, B, I] ([B, T, I] with batch_first, or unbatched [T, I]),
//           h0 [num_layers * num_directions, B, H] (unbatched: [L*D, H]); undefined: zeros)
//     -> (output [T, B, D*H] (batch_first: [B, T, D*H]; unbatched [T, D*H]), h_n like h0)
//   forward(PackedSequence, h0 in the batch's original order) -> (PackedSequence, h_n in that order)
// Layer l > 0 reads the (dropped-out, in training) output of layer l-1; with bidirectional, output
// concatenates the forward and backward directions. Each layer and direction runs as one fused
// autograd node (dp::rnn_layer). For DataParallel: the batch dimension is 0 with batch_first,
// else 1; h0 has it on dim 1.
class RNNImpl : public detail::RNNImplBase {
 public:
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  explicit RNNImpl(const RNNOptions& options);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = Tensor()) const;
  std::tuple<PackedSequence, Tensor> forward(const PackedSequence& input, const Tensor& hx = Tensor()) const;
  // libtorch's name for the packed forward.
  std::tuple<PackedSequence, Tensor> forward_with_packed_input(const PackedSequence& input, const Tensor& hx = Tensor()) const {
    return forward(input, hx);
  }

  RNNOptions options;
};
using RNN = ModuleHolder<RNNImpl>;

// A multi-layer LSTM (torch.nn.LSTM without proj_size). Gate blocks in order i, f, g, o.
//
//   forward(input as RNN's, optional (h0, c0) each [num_layers * num_directions, B, H])
//     -> (output, (h_n, c_n)); absent (h0, c0) are zeros.
//   forward(PackedSequence, optional (h0, c0) in the batch's original order)
//     -> (PackedSequence, (h_n, c_n) in that order)
// Each layer and direction runs as one fused autograd node (dp::lstm_layer).
class LSTMImpl : public detail::RNNImplBase {
 public:
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  explicit LSTMImpl(const LSTMOptions& options);
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const;
  std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> forward(const PackedSequence& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const;
  std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const PackedSequence& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const {
    return forward(input, std::move(hx));
  }

  LSTMOptions options;
};
using LSTM = ModuleHolder<LSTMImpl>;

// A multi-layer GRU (torch.nn.GRU). Gate blocks in order r, z, n:
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
// forward as RNN's. Each layer and direction runs as one fused autograd node (dp::gru_layer).
class GRUImpl : public detail::RNNImplBase {
 public:
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  explicit GRUImpl(const GRUOptions& options);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = Tensor()) const;
  std::tuple<PackedSequence, Tensor> forward(const PackedSequence& input, const Tensor& hx = Tensor()) const;
  std::tuple<PackedSequence, Tensor> forward_with_packed_input(const PackedSequence& input, const Tensor& hx = Tensor()) const {
    return forward(input, hx);
  }

  GRUOptions options;
};
using GRU = ModuleHolder<GRUImpl>;

// ------------------------------------------------------------------------------------------ cells

struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  RNNCellOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  RNNCellOptions& nonlinearity(RNNNonlinearity n) {
    nonlinearity_ = n;
    return *this;
  }
  RNNCellOptions& nonlinearity(const std::string& name) { return nonlinearity(detail::parse_rnn_nonlinearity(name)); }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  bool bias() const { return bias_; }
  RNNNonlinearity nonlinearity() const { return nonlinearity_; }

 private:
  int64_t input_size_;
  int64_t hidden_size_;
  bool bias_ = true;
  RNNNonlinearity nonlinearity_ = RNNNonlinearity::Tanh;
};

struct LSTMCellOptions {
  LSTMCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  LSTMCellOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  bool bias() const { return bias_; }

 private:
  int64_t input_size_;
  int64_t hidden_size_;
  bool bias_ = true;
};

struct GRUCellOptions {
  GRUCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  GRUCellOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  bool bias() const { return bias_; }

 private:
  int64_t input_size_;
  int64_t hidden_size_;
  bool bias_ = true;
};

namespace detail {

// What the cells share (torch.nn.RNNCellBase): parameters weight_ih [G*H, I], weight_hh [G*H, H],
// bias_ih, bias_hh [G*H] (absent with bias = false), all U(-1/sqrt(H), 1/sqrt(H)), and the checks of
// input [B, I] or unbatched [I] and hidden states [B, H] or [H].
class RNNCellImplBase : public Module {
 public:
  void reset_parameters();
  std::string extra_repr() const override;

  Tensor weight_ih;
  Tensor weight_hh;
  Tensor bias_ih;
  Tensor bias_hh;

 protected:
  RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t gates, std::optional<RNNNonlinearity> nonlinearity);
  // input as [B, I] (unbatched [I] gets a batch of 1) and each given state as [B, H] (zeros when
  // undefined); `batched` tells whether to squeeze the results. Errors are PyTorch's.
  struct Prepared {
    Tensor x;
    std::vector<Tensor> states;
    bool batched;
  };
  Prepared prepare(const char* name, const Tensor& input, std::vector<Tensor> states) const;

 private:
  int64_t input_size_, hidden_size_;
  std::optional<RNNNonlinearity> nonlinearity_;  // RNNCell only (printed when relu)
};

}  // namespace detail

// One Elman RNN step (torch.nn.RNNCell): forward(input [B, I] or [I], h [B, H] or [H] (undefined:
// zeros)) -> h'.
class RNNCellImpl : public detail::RNNCellImplBase {
 public:
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  explicit RNNCellImpl(const RNNCellOptions& options);
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor()) const;

  RNNCellOptions options;
};
using RNNCell = ModuleHolder<RNNCellImpl>;

// One LSTM step (torch.nn.LSTMCell): forward(input [B, I] or [I], optional (h, c) [B, H] or [H])
// -> (h', c'); absent (h, c) are zeros.
class LSTMCellImpl : public detail::RNNCellImplBase {
 public:
  LSTMCellImpl(int64_t input_size, int64_t hidden_size, bool bias = true) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size).bias(bias)) {}
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const;

  LSTMCellOptions options;
};
using LSTMCell = ModuleHolder<LSTMCellImpl>;

// One GRU step (torch.nn.GRUCell): forward(input [B, I] or [I], h [B, H] or [H] (undefined:
// zeros)) -> h'.
class GRUCellImpl : public detail::RNNCellImplBase {
 public:
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  explicit GRUCellImpl(const GRUCellOptions& options);
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor()) const;

  GRUCellOptions options;
};
using GRUCell = ModuleHolder<GRUCellImpl>;

}  // namespace dp::nn
