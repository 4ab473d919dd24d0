#pragma once
// Helpers of the CUDA reduction, softmax and autograd tests (beside support/cuda_compare.h, whose
// `sample`, `values` and `kGpu` they use): poisoned outputs, the in-group reduction emulated, and
// the comparison of a CUDA result with the CPU's (same dtype and shape; NaN and infinities at the
// same places; finite values within a norm-wise relative error ||gpu - cpu|| / ||cpu|| per dtype,
// exact for integers and bool).
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include <cstddef>
#include <vector>
#include "dp/dp.h"
#include "support/cuda_compare.h"

namespace dp::test {

// float32 results accumulate in float on the GPU and in double on the CPU; 16-bit results may
// round the other way at one ulp.
inline double rel_tol_for(DType dt) {
  switch (dt) {
    case DType::Float64:
      return 1e-10;
    case DType::Float32:
      return 2e-5;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1e-2;
    default:
      return 0.0;
  }
}

// got against ref (any devices): same dtype and shape, NaN / inf at the same places, finite values
// within the relative error tol (default per dtype; exact for integers and bool).
inline void expect_same_values(const Tensor& gpu, const Tensor& cpu, const std::string& what, double tol = -1.0) {
  ASSERT_TRUE(gpu.defined() && cpu.defined()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  if (tol < 0) tol = rel_tol_for(cpu.dtype());
  const auto g = values(gpu), c = values(cpu);
  double diff2 = 0, ref2 = 0;
  int bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i]) || std::isinf(c[i])) {
      const bool same = std::isnan(c[i]) ? std::isnan(g[i]) : g[i] == c[i];
      if (!same && ++bad <= 5) ADD_FAILURE() << what << " element " << i << ": " << g[i] << " on the GPU, " << c[i] << " on the CPU";
      continue;
    }
    if (tol == 0.0) {
      if (g[i] != c[i] && ++bad <= 5) ADD_FAILURE() << what << " element " << i << ": " << g[i] << " on the GPU, " << c[i] << " on the CPU";
      continue;
    }
    if (!std::isfinite(g[i]) && ++bad <= 5) ADD_FAILURE() << what << " element " << i << ": " << g[i] << " on the GPU, " << c[i] << " on the CPU";
    diff2 += (g[i] - c[i]) * (g[i] - c[i]);
    ref2 += c[i] * c[i];
  }
  if (tol > 0.0) {
    const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
    EXPECT_LE(rel, tol) << what << ": relative error " << rel;
  }
}

// The CUDA result (checked to be on a CUDA device) against the CPU's.
inline void expect_matches_cpu(const Tensor& gpu, const Tensor& cpu, const std::string& what, double tol = -1.0) {
  ASSERT_TRUE(gpu.defined() && gpu.is_cuda()) << what << ": " << (gpu.defined() ? gpu.describe() : "undefined");
  expect_same_values(gpu, cpu, what, tol);
}

// The kernels' in-group combination, emulated on the host: `v` holds the values of a group of
// width threads (a power of two >= 32) in lane order; each warp reduces as warp_reduce does
// (lane i takes lane i + d for d = 16, 8, .., 1; lane 0 keeps the result), then the warps' results
// are combined in warp order as group_allreduce does (cuda/reduce.cuh).
template <typename A, typename C>
A emulate_group_reduce(const std::vector<A>& v, const C& combine) {
  std::vector<A> warp_results;
  for (size_t w = 0; w < v.size(); w += 32) {
    std::vector<A> lanes(v.begin() + static_cast<std::ptrdiff_t>(w), v.begin() + static_cast<std::ptrdiff_t>(w + 32));
    for (int d = 16; d > 0; d >>= 1) {
      std::vector<A> next = lanes;
      for (int i = 0; i < 32; ++i) next[i] = combine(lanes[i], i + d < 32 ? lanes[i + d] : lanes[i]);
      lanes = next;
    }
    warp_results.push_back(lanes[0]);
  }
  A t = warp_results[0];
  for (size_t k = 1; k < warp_results.size(); ++k) t = combine(t, warp_results[k]);
  return t;
}

// Every float element a NaN, so a result element the kernel fails to write shows up.
inline Tensor poisoned(IntArrayRef sizes, DType dt, Device device) {
  Tensor t = empty(sizes, TensorOptions().dtype(dt).device(device));
  if (is_floating_point(dt))
    t.copy_(full(sizes, std::nan(""), TensorOptions().dtype(dt)));
  else
    t.copy_(full(sizes, -77, TensorOptions().dtype(dt)));
  return t;
}

}  // namespace dp::test
