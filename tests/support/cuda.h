#pragma once
// DP_REQUIRE_GPU(): the first statement of a test that needs a CUDA device. Without the CUDA
// backend, or without a visible GPU, the test skips and says which of the two it was.
#include <gtest/gtest.h>
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#define DP_REQUIRE_GPU()                                                                                      \
  do {                                                                                                        \
    if (!::dp::cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible (cuda::device_count() == 0)"; \
  } while (0)
#else
#define DP_REQUIRE_GPU() GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"
#endif
