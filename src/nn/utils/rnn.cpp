// Packed sequences (torch.nn.utils.rnn): PackedSequence, pack_padded_sequence, pad_packed_sequence,
// pack_sequence. The packing is planned on the host (lengths are host values) and done by one
// index_select of the rows, so every function is differentiable through index_select's backward.
#include "dp/nn/utils/rnn.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>
#include "dp/core/errors.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/shape.h"

namespace dp::nn::utils::rnn {
namespace {

// A host copy of a 1-D int64 tensor's values (lengths and batch sizes: metadata the packing needs
// on the host, as PyTorch's).
std::vector<int64_t> host_values(const Tensor& t) {
  Tensor c = t.is_cpu() ? t : t.to(Device::cpu());
  c = c.contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  Tensor t = from_blob_copy(v.data(), {static_cast<int64_t>(v.size())}, kInt64);
  return device == Device::cpu() ? t : t.to(device);
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

constexpr const char* kUnsortedMessage =
    "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass `enforce_sorted=False` to "
    "pack_padded_sequence and/or pack_sequence to sidestep this requirement if you do not need ONNX exportability.";

// The sorted order of the batch (longest first; equal lengths keep their order) and the batch
// sizes. With enforce_sorted the order must be the identity.
struct PackPlan {
  std::vector<int64_t> order, batch_sizes;
};

PackPlan plan_for(const char* op, const std::vector<int64_t>& lengths, bool enforce_sorted) {
  const int64_t B = static_cast<int64_t>(lengths.size());
  for (int64_t b = 0; b < B; ++b)
    DP_CHECK(lengths[b] > 0, ValueError, op,
             ": Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0 (lengths[", b, "] = ", lengths[b],
             ")");
  PackPlan p;
  p.order.resize(static_cast<size_t>(B));
  std::iota(p.order.begin(), p.order.end(), 0);
  if (enforce_sorted) {
    for (int64_t b = 1; b < B; ++b)
      DP_CHECK(lengths[b] <= lengths[b - 1], ValueError, op, ": ", kUnsortedMessage, " (lengths ", list_str(lengths), ")");
  } else {
    std::stable_sort(p.order.begin(), p.order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  }
  const int64_t T = B == 0 ? 0 : lengths[p.order[0]];
  p.batch_sizes.assign(static_cast<size_t>(T), 0);
  for (int64_t len : lengths)
    for (int64_t t = 0; t < len; ++t) ++p.batch_sizes[t];
  return p;
}

std::vector<int64_t> invert(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

// A PackedSequence from the plan: rows gathered from `rows` (a [R, *] tensor) by row_of(t, b).
template <typename RowOf>
PackedSequence gather_packed(const Tensor& rows, const PackPlan& p, bool enforce_sorted, RowOf row_of) {
  std::vector<int64_t> idx;
  for (size_t t = 0; t < p.batch_sizes.size(); ++t)
    for (int64_t k = 0; k < p.batch_sizes[t]; ++k) idx.push_back(row_of(static_cast<int64_t>(t), p.order[static_cast<size_t>(k)]));
  Tensor data = index_select(rows, 0, index_tensor(idx, rows.device()));
  Tensor bs = from_blob_copy(p.batch_sizes.data(), {static_cast<int64_t>(p.batch_sizes.size())}, kInt64);
  if (enforce_sorted) return PackedSequence(data, bs);
  return PackedSequence(data, bs, index_tensor(p.order, rows.device()), index_tensor(invert(p.order), rows.device()));
}

PackedSequence pack_padded(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first, bool enforce_sorted) {
  const char* op = "pack_padded_sequence";
  DP_CHECK(input.defined(), ValueError, op, ": input is an undefined tensor");
  DP_CHECK(input.dim() >= 2, ShapeError, op, ": expected input of shape ", batch_first ? "[B, T, *]" : "[T, B, *]", " (at least 2-D), got ",
           input.size_str());
  const int64_t T = input.size(batch_first ? 1 : 0), B = input.size(batch_first ? 0 : 1);
  DP_CHECK(static_cast<int64_t>(lengths.size()) == B, ShapeError, op, ": Expected `len(lengths)` to be equal to batch_size, but got ", lengths.size(),
           " (batch_size=", B, ") (input ", input.size_str(), batch_first ? ", batch_first" : "", ")");
  DP_CHECK(input.numel() > 0, ValueError, op, ": Cannot pack empty tensors (input ", input.size_str(), ")");
  const PackPlan p = plan_for(op, lengths, enforce_sorted);
  for (int64_t b = 0; b < B; ++b)
    DP_CHECK(lengths[b] <= T, ValueError, op, ": lengths[", b, "] = ", lengths[b], " is longer than the input's ", T, " steps (input ",
             input.size_str(), batch_first ? ", batch_first: [B, T, *]" : ": [T, B, *]", ")");
  // The first two dimensions as one: row t * B + b (batch_first: b * T + t).
  Shape rows_shape = {T * B};
  for (int64_t d = 2; d < input.dim(); ++d) rows_shape.push_back(input.size(d));
  const Tensor rows = input.reshape(rows_shape);
  return gather_packed(rows, p, enforce_sorted, [&](int64_t t, int64_t b) { return batch_first ? b * T + t : t * B + b; });
}

}  // namespace

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices, Tensor unsorted_indices)
    : data_(std::move(data)), batch_sizes_(std::move(batch_sizes)), sorted_indices_(std::move(sorted_indices)) {
  DP_CHECK(data_.defined(), ValueError, "PackedSequence: data is an undefined tensor");
  DP_CHECK(batch_sizes_.defined(), ValueError, "PackedSequence: batch_sizes is an undefined tensor");
  DP_CHECK(batch_sizes_.is_cpu(), DeviceError,
           "batch_sizes should always be on CPU. Instances of PackedSequence should never be created manually. They should be instantiated by "
           "functions like pack_sequence and pack_padded_sequences in nn::utils::rnn. (PackedSequence: batch_sizes on ",
           batch_sizes_.device().str(), ")");
  DP_CHECK(batch_sizes_.dim() == 1 && batch_sizes_.dtype() == kInt64, ValueError, "PackedSequence: batch_sizes must be a 1-D int64 tensor, got ",
           batch_sizes_.describe());
  if (unsorted_indices.defined() || !sorted_indices_.defined()) {
    unsorted_indices_ = std::move(unsorted_indices);
  } else {
    unsorted_indices_ = index_tensor(invert(host_values(sorted_indices_)), sorted_indices_.device());
  }
}

PackedSequence PackedSequence::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return PackedSequence(move(data_), batch_sizes_, move(sorted_indices_), move(unsorted_indices_));
}

PackedSequence PackedSequence::to(DType dtype) const { return PackedSequence(data_.to(dtype), batch_sizes_, sorted_indices_, unsorted_indices_); }

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  const char* op = "pack_padded_sequence";
  DP_CHECK(lengths.defined(), ValueError, op, ": lengths is an undefined tensor");
  DP_CHECK(lengths.is_cpu(), DeviceError, op, ": 'lengths' argument should be a 1D CPU int64 tensor, but got a tensor on ", lengths.device().str(),
           " (lengths must be on the CPU: pass lengths.cpu())");
  DP_CHECK(lengths.dtype() == kInt64, DTypeError, op, ": 'lengths' argument should be a 1D CPU int64 tensor, but got ", lengths.describe());
  DP_CHECK(lengths.dim() == 1, ShapeError, op, ": 'lengths' argument should be a 1D CPU int64 tensor, but got ", lengths.describe());
  return pack_padded(input, host_values(lengths), batch_first, enforce_sorted);
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first, bool enforce_sorted) {
  return pack_padded(input, lengths, batch_first, enforce_sorted);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                               std::optional<int64_t> total_length) {
  const char* op = "pad_packed_sequence";
  DP_CHECK(sequence.defined(), ValueError, op, ": the PackedSequence is empty (default-constructed)");
  const Tensor& data = sequence.data();
  const std::vector<int64_t> bs = host_values(sequence.batch_sizes());
  const int64_t T_max = static_cast<int64_t>(bs.size()), B = T_max == 0 ? 0 : bs[0], N = data.dim() == 0 ? 0 : data.size(0);
  int64_t total = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    DP_CHECK(bs[t] > 0 && (t == 0 || bs[t] <= bs[t - 1]), ValueError, op, ": batch_sizes must be positive and non-increasing, got ", list_str(bs));
    total += bs[t];
  }
  DP_CHECK(data.dim() >= 1 && total == N, ShapeError, op, ": batch_sizes ", list_str(bs), " sum to ", total, " rows but data is ", data.size_str());
  const int64_t T = total_length.value_or(T_max);
  DP_CHECK(T >= T_max, ValueError, "Expected total_length to be at least the length of the longest sequence in input, but got total_length=", T,
           " and max sequence length being ", T_max, " (", op, ")");
  // Sorted position k's length, and the original order's position in the sorted one.
  std::vector<int64_t> len_sorted(static_cast<size_t>(B), 0), offset(bs.size(), 0);
  for (size_t t = 0; t < bs.size(); ++t) {
    offset[t] = t == 0 ? 0 : offset[t - 1] + bs[t - 1];
    for (int64_t k = 0; k < bs[t]; ++k) ++len_sorted[k];
  }
  std::vector<int64_t> pos(static_cast<size_t>(B));
  std::iota(pos.begin(), pos.end(), 0);
  if (sequence.unsorted_indices().defined()) {
    pos = host_values(sequence.unsorted_indices());
    DP_CHECK(static_cast<int64_t>(pos.size()) == B, ShapeError, op, ": unsorted_indices has ", pos.size(), " entries for a batch of ", B);
  }
  // Row N of the extended data is the padding.
  Shape pad_shape = {1};
  for (int64_t d = 1; d < data.dim(); ++d) pad_shape.push_back(data.size(d));
  const Tensor ext = cat({data, full(pad_shape, padding_value, options_of(data))}, 0);
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(T * B));
  auto row = [&](int64_t t, int64_t b) {
    const int64_t k = pos[static_cast<size_t>(b)];
    return t < len_sorted[static_cast<size_t>(k)] ? offset[static_cast<size_t>(t)] + k : N;
  };
  if (batch_first) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) idx.push_back(row(t, b));
  } else {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < B; ++b) idx.push_back(row(t, b));
  }
  Shape out_shape = batch_first ? Shape{B, T} : Shape{T, B};
  for (int64_t d = 1; d < data.dim(); ++d) out_shape.push_back(data.size(d));
  Tensor padded = index_select(ext, 0, index_tensor(idx, data.device())).reshape(out_shape);
  std::vector<int64_t> lengths(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) lengths[static_cast<size_t>(b)] = len_sorted[static_cast<size_t>(pos[static_cast<size_t>(b)])];
  return {padded, from_blob_copy(lengths.data(), {B}, kInt64)};
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  const char* op = "pack_sequence";
  DP_CHECK(!sequences.empty(), ValueError, op, ": received an empty list of sequences");
  std::vector<int64_t> lengths, start;
  int64_t rows = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    DP_CHECK(s.defined(), ValueError, op, ": sequences[", i, "] is an undefined tensor");
    DP_CHECK(s.dim() >= 1, ShapeError, op, ": sequences[", i, "] must be at least 1-D ([L, *]), got a 0-D tensor");
    const Tensor& s0 = sequences[0];
    DP_CHECK(s.dim() == s0.dim() && std::equal(s.sizes().begin() + 1, s.sizes().end(), s0.sizes().begin() + 1), ShapeError, op,
             ": every sequence must have the trailing shape of sequences[0] (", s0.size_str(), "), got sequences[", i, "] ", s.size_str());
    DP_CHECK(s.dtype() == s0.dtype(), DTypeError, op, ": every sequence must have the dtype of sequences[0] (", dtype_name(s0.dtype()),
             "), got sequences[", i, "] ", dtype_name(s.dtype()));
    DP_CHECK(s.device() == s0.device(), DeviceError, op, ": expected all tensors to be on the same device, but found at least two devices, ",
             s0.device().str(), " and ", s.device().str(), "!");
    lengths.push_back(s.size(0));
    start.push_back(rows);
    rows += s.size(0);
  }
  const PackPlan p = plan_for(op, lengths, enforce_sorted);
  const Tensor all = sequences.size() == 1 ? sequences[0] : cat(sequences, 0);
  return gather_packed(all, p, enforce_sorted, [&](int64_t t, int64_t b) { return start[static_cast<size_t>(b)] + t; });
}

}  // namespace dp::nn::utils::rnn
