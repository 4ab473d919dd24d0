#pragma once
// Variable-length sequences (torch.nn.utils.rnn): padding and packing.
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::nn::utils::rnn {

// torch.nn.utils.rnn.pad_sequence: sequences [L_i, *] (same trailing shape, dtype and device)
// stacked into [L_max, B, *] ([B, L_max, *] with batch_first), the tail filled with padding_value.
// Differentiable.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

}  // namespace dp::nn::utils::rnn

namespace dp::nn::utils::rnn {

// torch.nn.utils.rnn.PackedSequence: a batch of variable-length sequences, packed time-major.
//   data()             [N, *] (N = the sum of the lengths): for each step t, the rows of the
//                      sequences longer than t, longest first
//   batch_sizes()      a CPU int64 tensor [T_max]: how many sequences are longer than t
//   sorted_indices()   which original sequence is the k-th longest (undefined when the batch was
//                      packed already sorted, enforce_sorted = true)
//   unsorted_indices() its inverse: where original sequence b sits in the sorted order
// Made by pack_padded_sequence / pack_sequence (and returned by the recurrent modules); nn::RNN,
// GRU and LSTM take one (forward(packed, hx)) and return one. Copying aliases the tensors.
class PackedSequence {
 public:
  PackedSequence() = default;
  // As libtorch's (for internal use, as there): an undefined unsorted_indices is computed as the
  // inverse of sorted_indices. batch_sizes must be a 1-D int64 tensor on the CPU.
  explicit PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = Tensor(), Tensor unsorted_indices = Tensor());

  const Tensor& data() const { return data_; }
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  bool defined() const { return data_.defined(); }
  bool is_cuda() const { return data_.defined() && data_.is_cuda(); }

  // data and the indices moved to `device` (differentiable, as dp::to); batch_sizes stays on the
  // CPU, as in PyTorch.
  PackedSequence to(Device device) const;
  // data converted to a floating dtype (the indices stay int64).
  PackedSequence to(DType dtype) const;
  PackedSequence cpu() const { return to(Device::cpu()); }

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};

// torch.nn.utils.rnn.pack_padded_sequence: packs input [T, B, *] ([B, T, *] with batch_first),
// whose sequence b holds lengths[b] valid steps. lengths: a 1-D CPU int64 tensor or a vector, each
// in [1, T]. enforce_sorted = true requires lengths sorted in decreasing order (sorted_indices()
// undefined); false sorts them (stably: equal lengths keep their order) and records the order.
// Differentiable w.r.t. input (one index_select).
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false, bool enforce_sorted = true);
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false, bool enforce_sorted = true);

// torch.nn.utils.rnn.pad_packed_sequence: the inverse of pack_padded_sequence. Returns (padded
// [T, B, *] ([B, T, *] with batch_first), lengths: a CPU int64 tensor [B]), both in the original
// batch order; T is the longest length, or total_length (which must not be smaller). Padding
// positions hold padding_value. Differentiable w.r.t. sequence.data().
// Under DataParallel, pass total_length = the padded input's time size: every replica then
// returns the same T and the gather can concatenate them (docs/sequence-models.md).
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false, double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);

// torch.nn.utils.rnn.pack_sequence: packs sequences [L_i, *] (same trailing shape, dtype and
// device; L_i >= 1), as pack_padded_sequence(pad_sequence(sequences), lengths, false,
// enforce_sorted) would, without the padded copy. Differentiable w.r.t. every sequence.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

}  // namespace dp::nn::utils::rnn
