#pragma once
// Recurrent layers: LSTM and LSTMCell, with PyTorch's semantics, parameter names and printing.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

struct LSTMOptions {
  LSTMOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  LSTMOptions& num_layers(int64_t n) {
    num_layers_ = n;
    return *this;
  }
  LSTMOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  // Input and output are [B, T, *] instead of [T, B, *] (h0/c0 and h_n/c_n keep batch on dim 1).
  LSTMOptions& batch_first(bool b) {
    batch_first_ = b;
    return *this;
  }
  // Dropout on the outputs of every layer but the last, in training mode only.
  LSTMOptions& dropout(double p) {
    dropout_ = p;
    return *this;
  }
  LSTMOptions& bidirectional(bool b) {
    bidirectional_ = b;
    return *this;
  }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return num_layers_; }
  bool bias() const { return bias_; }
  bool batch_first() const { return batch_first_; }
  double dropout() const { return dropout_; }
  bool bidirectional() const { return bidirectional_; }

 private:
  int64_t input_size_;
  int64_t hidden_size_;
  int64_t num_layers_ = 1;
  bool bias_ = true;
  bool batch_first_ = false;
  double dropout_ = 0.0;
  bool bidirectional_ = false;
};

// A multi-layer LSTM (torch.nn.LSTM without proj_size and packed sequences).
//
//   forward(input [T, B, I] ([B, T, I] with batch_first, or unbatched [T, I]),
//           optional (h0, c0) each [num_layers * num_directions, B, H] (unbatched: [L*D, H]))
//     -> (output [T, B, D*H] (batch_first: [B, T, D*H]; unbatched [T, D*H]), (h_n, c_n) like h0)
//   Absent (h0, c0) are zeros. Layer l > 0 reads the (dropped-out, in training) output of layer
//   l-1; with bidirectional, output concatenates the forward and backward directions.
//
// Parameters, per layer l and direction (suffix "" or "_reverse"), registered in PyTorch's order:
// weight_ih_l{l}{suffix} [4H, in], weight_hh_l{l}{suffix} [4H, H], bias_ih_l{l}{suffix} [4H],
// bias_hh_l{l}{suffix} [4H] (no biases with bias(false)); in = input_size for layer 0, D*H after.
// All initialised U(-1/sqrt(H), 1/sqrt(H)). Gate blocks in order i, f, g, o.
// Each layer and direction runs as one fused autograd node (dp::lstm_layer, dp/ops/rnn.h). For
// DataParallel: the batch dimension is 0 with batch_first, else 1; h0/c0 have it on dim 1.
class LSTMImpl : public Module {
 public:
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  explicit LSTMImpl(const LSTMOptions& options);
  void reset_parameters();
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const;
  std::string extra_repr() const override;

  LSTMOptions options;
  // Every parameter in registration order (PyTorch's _flat_weights) and their names.
  std::vector<Tensor> flat_weights;
  std::vector<std::string> flat_weights_names;

 private:
  // The 2 or 4 parameters of (layer, direction): w_ih, w_hh, b_ih, b_hh (undefined without bias).
  std::tuple<Tensor, Tensor, Tensor, Tensor> layer_weights(int64_t layer, int64_t direction) const;
};
using LSTM = ModuleHolder<LSTMImpl>;

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

// One LSTM step (torch.nn.LSTMCell): forward(input [B, I] or [I], optional (h, c) [B, H] or [H])
// -> (h', c'); absent (h, c) are zeros. Parameters weight_ih [4H, I], weight_hh [4H, H], bias_ih,
// bias_hh [4H] (absent with bias = false), all U(-1/sqrt(H), 1/sqrt(H)).
class LSTMCellImpl : public Module {
 public:
  LSTMCellImpl(int64_t input_size, int64_t hidden_size, bool bias = true) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size).bias(bias)) {}
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  void reset_parameters();
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt) const;
  std::string extra_repr() const override;

  LSTMCellOptions options;
  Tensor weight_ih;
  Tensor weight_hh;
  Tensor bias_ih;
  Tensor bias_hh;
};
using LSTMCell = ModuleHolder<LSTMCellImpl>;

}  // namespace dp::nn
