// The stubs of the recurrent layers' kernel interface (rnn_kernels.h), and the step plan.
#include "backend/rnn_kernels.h"

#include <utility>

namespace dp::backend {

DP_DEFINE_KERNEL(rnn_layer_forward_kernel, "rnn_layer", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(rnn_layer_backward_kernel, "rnn_layer backward", KernelCoverage::CpuOnly);

RnnSteps RnnSteps::dense(int64_t T, int64_t B, bool reverse) {
  RnnSteps s;
  s.rows_.assign(static_cast<size_t>(T), B);
  s.offset_.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) s.offset_[static_cast<size_t>(t)] = t * B;
  s.total_ = T * B;
  s.dense_ = true;
  s.reverse_ = reverse;
  return s;
}

RnnSteps RnnSteps::packed(std::vector<int64_t> batch_sizes, bool reverse) {
  RnnSteps s;
  s.rows_ = std::move(batch_sizes);
  s.offset_.resize(s.rows_.size());
  int64_t total = 0;
  bool dense = true;
  for (size_t t = 0; t < s.rows_.size(); ++t) {
    s.offset_[t] = total;
    total += s.rows_[t];
    dense = dense && s.rows_[t] == s.rows_[0];
  }
  s.total_ = total;
  s.dense_ = dense;
  s.reverse_ = reverse;
  return s;
}

}  // namespace dp::backend
