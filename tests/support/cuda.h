#pragma once
// DP_REQUIRE_GPU(): the first statement of a test that needs a CUDA device. Without the CUDA
// backend, or without a visible GPU, the test skips and says which of the two it was. A test
// program that includes this header links the CUDA library (tests/CMakeLists.txt); one that does
// not, in a build with CUDA, fails instead of skipping: its GPU tests would never run.
#include <gtest/gtest.h>
#include "dp/config.h"
#include "dp/core/device_registry.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#define DP_REQUIRE_GPU()                                                                                                            \
  do {                                                                                                                              \
    if (!::dp::backend_linked(::dp::DeviceType::CUDA))                                                                              \
      GTEST_FAIL() << "this test program does not link dparallel::cuda, so it cannot run on a GPU: link it (tests/CMakeLists.txt)"; \
    if (!::dp::cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible (cuda::device_count() == 0)";                       \
  } while (0)
#else
#define DP_REQUIRE_GPU() GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"
#endif
