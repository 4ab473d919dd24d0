// torch.nn.utils.rnn.pad_sequence: one output filled with the padding value, each sequence copied
// into its slice, one autograd node whose backward hands every sequence its slice of the gradient.
#include <cmath>
#include <limits>
#include <string>
#include "dp/autograd/function.h"
#include "dp/nn/utils/rnn.h"
#include "dp/ops/factory.h"

namespace dp::nn::utils::rnn {

namespace {

// PyTorch fills an integer output with the padding value truncated toward zero and refuses one that
// does not fit ("value cannot be converted to type int64_t without overflow").
void check_padding_value(double v, DType dtype) {
  if (is_floating_point(dtype) || dtype == kBool) return;
  double lo = 0, hi = 0;
  switch (dtype) {
    case kUInt8:
      lo = 0, hi = 255;
      break;
    case kInt32:
      lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
      break;
    default:  // int64: the doubles in [-2^63, 2^63)
      lo = -9223372036854775808.0, hi = 9223372036854775807.0;
      break;
  }
  const double t = std::trunc(v);
  DP_CHECK(std::isfinite(v) && t >= lo && (dtype == kInt64 ? t < hi : t <= hi), ValueError, "pad_sequence: padding_value ", v,
           " cannot be converted to the sequences' dtype ", dtype_name(dtype), " without overflow");
}

}  // namespace

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  DP_CHECK(!sequences.empty(), ValueError, "pad_sequence: received an empty list of sequences");
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    DP_CHECK(s.defined(), ValueError, "pad_sequence: sequence ", i, " is an undefined tensor");
    DP_CHECK(s.dim() >= 1, ShapeError, "pad_sequence: sequence ", i,
             " is a 0-dimensional tensor; every sequence needs a length dimension (dim 0) and has shape [L, *]");
  }
  const Tensor& first = sequences.front();
  const Shape& trailing = first.sizes();
  int64_t max_len = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    // PyTorch broadcasts a sequence into the slot and casts its dtype; a mismatch is far more often a
    // bug than an intent, so it is refused here, naming the first sequence that differs.
    bool same_trailing = s.dim() == first.dim();
    for (int64_t d = 1; same_trailing && d < s.dim(); ++d) same_trailing = s.sizes()[d] == trailing[d];
    DP_CHECK(same_trailing, ShapeError, "pad_sequence: sequence ", i, " has shape ", s.size_str(), " but sequence 0 has shape ", first.size_str(),
             ": the sequences must agree in every dimension after the first (shape [L_i, *] with one *)");
    DP_CHECK(s.dtype() == first.dtype(), DTypeError, "pad_sequence: sequence ", i, " has dtype ", dtype_name(s.dtype()), " but sequence 0 has ",
             dtype_name(first.dtype()));
    DP_CHECK(s.device() == first.device(), DeviceError, "pad_sequence: sequence ", i, " is on ", s.device().str(), " but sequence 0 is on ",
             first.device().str());
    max_len = std::max(max_len, s.size(0));
  }
  check_padding_value(padding_value, first.dtype());

  const auto batch = static_cast<int64_t>(sequences.size());
  const int64_t batch_dim = batch_first ? 0 : 1;  // after selecting it, time is dim 0 either way
  Shape out_sizes = trailing;
  out_sizes[0] = max_len;
  out_sizes.insert(out_sizes.begin() + batch_dim, batch);
  Tensor out = empty(out_sizes, options_of(first));
  {
    // The copies are the op's own work: recorded below as one node, not as B in-place copies.
    // Each slot is written once: the sequence, then the padding after it.
    NoGradGuard no_grad;
    for (int64_t i = 0; i < batch; ++i) {
      const Tensor& s = sequences[static_cast<size_t>(i)];
      const int64_t len = s.size(0);
      Tensor slot = out.select(batch_dim, i);
      if (len > 0) slot.narrow(0, 0, len).copy_(s);
      if (len < max_len) slot.narrow(0, len, max_len - len).fill_(padding_value);
    }
  }
  if (autograd::any_needs_grad(sequences)) {
    std::vector<int64_t> lengths(sequences.size());
    std::vector<bool> floating(sequences.size());
    for (size_t i = 0; i < sequences.size(); ++i) {
      lengths[i] = sequences[i].size(0);
      floating[i] = is_floating_point(sequences[i].dtype());
    }
    autograd::record("PadSequenceBackward0", sequences, {out}, [lengths, floating, batch_dim](autograd::variable_list&& g) {
      autograd::variable_list grads(lengths.size());
      for (size_t i = 0; i < lengths.size(); ++i)
        if (floating[i]) grads[i] = g[0].select(batch_dim, static_cast<int64_t>(i)).narrow(0, 0, lengths[i]);
      return grads;
    });
  }
  return out;
}

}  // namespace dp::nn::utils::rnn
