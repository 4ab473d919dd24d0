// The CPU backend's optimizer updates (backend/optim_kernels.h): each parameter of the list through
// the fused per-parameter loop of fused_updates.h. The update is memory-bound (Adam reads and writes
// 28 bytes per float32 parameter), so a large list is cut into pieces that the host's threads take
// one at a time (blas::parallel_for: the calling thread alone on a device worker or with one
// thread). Each element's update is the same whichever thread runs it: pieces start at multiples
// of blas::kRangeAlign elements, so the vector loops cover the same elements as one call would.
#include <vector>
#include "backend/cpu/blas.h"
#include "backend/cpu/fused_updates.h"

namespace dp::backend::cpu {
namespace {

struct Piece {
  size_t tensor;
  int64_t begin, end;
};

// Runs fn(tensor index, begin, end) over every parameter's elements: in order in the calling
// thread for a small list, else in pieces of about blas::kRangePiece elements over the host's threads.
template <typename List, typename F>
void for_pieces(const List& list, const F& fn) {
  int64_t total = 0;
  for (const auto& t : list) total += t.n;
  if (!backend::cpu::blas::range_is_parallel(total)) {
    for (size_t i = 0; i < list.size(); ++i) fn(i, 0, list[i].n);
    return;
  }
  std::vector<Piece> pieces;
  pieces.reserve(static_cast<size_t>(total / backend::cpu::blas::kRangePiece) + list.size());
  for (size_t i = 0; i < list.size(); ++i)
    for (int64_t b = 0; b < list[i].n; b += backend::cpu::blas::kRangePiece)
      pieces.push_back({i, b, std::min(list[i].n, b + backend::cpu::blas::kRangePiece)});
  backend::cpu::blas::parallel_for(static_cast<int64_t>(pieces.size()), backend::cpu::blas::parallel_slots(), [&](int64_t p, int) {
    const Piece& q = pieces[static_cast<size_t>(p)];
    fn(q.tensor, q.begin, q.end);
  });
}

void sgd_update_kernel(DType dtype, int /*device*/, const std::vector<SgdTensor>& list, const SgdScalars& s) {
  with_param_type(dtype, "SGD", [&](auto tag) {
    using S = decltype(tag);
    for_pieces(list, [&](size_t i, int64_t b, int64_t e) {
      const SgdTensor& t = list[i];
      S* buf = static_cast<S*>(t.momentum_buffer);
      backend::cpu::fused::sgd_update(static_cast<S*>(t.param) + b, static_cast<const S*>(t.grad) + b, buf ? buf + b : nullptr, t.buffer_initialized,
                                      e - b, s);
    });
  });
}

void adam_update_kernel(DType dtype, int /*device*/, const std::vector<AdamTensor>& list, const AdamScalars& scalars) {
  with_param_type(dtype, "Adam", [&](auto tag) {
    using S = decltype(tag);
    for_pieces(list, [&](size_t i, int64_t b, int64_t e) {
      const AdamTensor& t = list[i];
      AdamScalars s = scalars;
      s.step = t.step;
      S* max_sq = static_cast<S*>(t.max_exp_avg_sq);
      backend::cpu::fused::adam_update(static_cast<S*>(t.param) + b, static_cast<const S*>(t.grad) + b, static_cast<S*>(t.exp_avg) + b,
                                       static_cast<S*>(t.exp_avg_sq) + b, max_sq ? max_sq + b : nullptr, e - b, s);
    });
  });
}

// Nothing captures host work into a graph on the CPU.
void check_host_scalar_step_kernel(int /*device*/, const char* /*optimizer*/) {}

}  // namespace

void register_optim_kernels() {
  DP_REGISTER_KERNEL(CPU, sgd_update_kernel);
  DP_REGISTER_KERNEL(CPU, adam_update_kernel);
  DP_REGISTER_KERNEL(CPU, check_host_scalar_step_kernel);
}

}  // namespace dp::backend::cpu
