#pragma once
// The kernel interface of the fused recurrent layers (dp::rnn_layer, gru_layer, lstm_layer, on a
// padded [T, B, I] sequence or on a packed one; src/ops/rnn_layer.cpp): one direction of one layer,
// forward and backward (BPTT). The CPU backend implements it (src/backend/cpu/rnn_layer.cpp:
// OpenBLAS GEMMs and vectorised gate loops). A device without these kernels runs the ops' composite
// form (dp ops), except the padded LSTM, which has its own kernels on CUDA (lstm_kernels.h).
// The algorithm and the workspace layout are in the header comment of src/ops/rnn_layer.cpp.
#include <cstdint>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// The cell of a layer. Gate blocks of H rows in the weights: 1 (RNN), 4 (LSTM: i, f, g, o), 3
// (GRU: r, z, n).
enum class RnnCell : uint8_t { Tanh, ReLU, LSTM, GRU };

inline int64_t rnn_gate_count(RnnCell c) { return c == RnnCell::LSTM ? 4 : c == RnnCell::GRU ? 3 : 1; }

// The rows of one layer's sequence, time-major, as a packed sequence lays them out: step t has
// rows(t) rows, the first rows(t) sequences of the batch, at row offset(t) of the [N, *] data
// (N = total_rows()). rows() never grows with t. A padded [T, B, *] sequence is the case where every
// step has B rows (dense()). The layer runs the steps in the order time(0), time(1), ... (T-1 down
// to 0 when reverse); a row's state at a step comes from the step run just before (prev_time), or,
// for a row that step did not have, from h0/c0: rows [0, carried(t)) continue, rows
// [carried(t), rows(t)) start at t. Rows [first_final(t), rows(t)) are the last step of their
// sequence: h_n's rows.
class RnnSteps {
 public:
  static RnnSteps dense(int64_t T, int64_t B, bool reverse);
  // batch_sizes: T >= 1 positive, non-increasing counts (checked by the op).
  static RnnSteps packed(std::vector<int64_t> batch_sizes, bool reverse);

  int64_t steps() const { return static_cast<int64_t>(rows_.size()); }
  int64_t batch() const { return rows_.empty() ? 0 : rows_[0]; }
  int64_t total_rows() const { return total_; }
  bool dense() const { return dense_; }
  bool reverse() const { return reverse_; }
  int64_t rows(int64_t t) const { return rows_[static_cast<size_t>(t)]; }
  int64_t offset(int64_t t) const { return offset_[static_cast<size_t>(t)]; }
  int64_t time(int64_t s) const { return reverse_ ? steps() - 1 - s : s; }
  int64_t prev_time(int64_t t) const { return reverse_ ? t + 1 : t - 1; }
  int64_t carried(int64_t t) const {
    if (reverse_) return t == steps() - 1 ? 0 : rows(t + 1);
    return t == 0 ? 0 : rows(t);
  }
  int64_t first_final(int64_t t) const {
    if (reverse_) return t == 0 ? 0 : rows(t);
    return t == steps() - 1 ? 0 : rows(t + 1);
  }
  const std::vector<int64_t>& batch_sizes() const { return rows_; }

 private:
  std::vector<int64_t> rows_, offset_;
  int64_t total_ = 0;
  bool dense_ = true;
  bool reverse_ = false;
};

// Sizes of one layer call, after its arguments were checked.
struct RnnLayerDims {
  RnnCell cell;
  int64_t I, H;
  bool bias;
};

// All tensors contiguous, of one floating dtype (float32 or float64), on one device. B is
// steps.batch(), N steps.total_rows(), G rnn_gate_count(cell) * H.
struct RnnForwardArgs {
  Tensor x, h0, c0;               // [N, I], [B, H], [B, H] (c0: LSTM only)
  Tensor w_ih, w_hh, b_ih, b_hh;  // [G, I], [G, H], [G], [G] (biases undefined without bias)
  Tensor out, hn, cn;             // results: [N, H], [B, H], [B, H] (cn: LSTM only)
  Tensor acts, aux;               // results saved for backward: LSTM acts [N, 4H] (i, f, g, o), aux [N, H]
                                  // (cell states); GRU acts [N, 3H] (r, z, n), aux [N, H] (W_hn h + b_hn);
                                  // RNN: neither (undefined)
};
struct RnnBackwardArgs {
  Tensor x, h0, c0, w_ih, w_hh;           // as in forward
  Tensor out, acts, aux;                  // forward's results
  Tensor d_out, d_hn, d_cn;               // incoming gradients; any may be undefined (none arrived)
  Tensor dx, dw_ih, dw_hh, db_ih, db_hh;  // results, undefined when not needed
  Tensor dh0, dc0;                        // results [B, H], always (BPTT's running buffers); dc0 LSTM only
  bool need_dh0 = false;                  // false: dh0's value may be left incomplete
};

using RnnLayerForward = void(const RnnLayerDims& d, const RnnSteps& steps, RnnForwardArgs& a);
using RnnLayerBackward = void(const RnnLayerDims& d, const RnnSteps& steps, RnnBackwardArgs& a);

DP_DECLARE_KERNEL(rnn_layer_forward_kernel, RnnLayerForward);
DP_DECLARE_KERNEL(rnn_layer_backward_kernel, RnnLayerBackward);

}  // namespace dp::backend
