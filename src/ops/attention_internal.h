#pragma once
// Internal hooks of scaled_dot_product_attention (src/ops/attention.cpp) for the tests and the
// benchmark: the fused kernel's tile sizes.
#include <cstdint>

namespace dp::detail {

// While alive, the fused attention kernel uses bq query rows and bk keys per tile in the calling
// thread's calls (0: the kernel's own choice), so that small inputs cover several tiles and ragged
// last tiles. The sizes are taken when the forward runs and kept for its backward.
class SdpaTilesGuard {
 public:
  SdpaTilesGuard(int64_t bq, int64_t bk);
  ~SdpaTilesGuard();
  SdpaTilesGuard(const SdpaTilesGuard&) = delete;
  SdpaTilesGuard& operator=(const SdpaTilesGuard&) = delete;

 private:
  int64_t prev_q_, prev_k_;
};

}  // namespace dp::detail
