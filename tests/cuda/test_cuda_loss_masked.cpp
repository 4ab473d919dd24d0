// cross_entropy on a CUDA device with masked (-inf) logits against the CPU: a lane (or, for
// [N, C, d] inputs, a thread) whose first classes are -inf must still give the finite loss and
// gradient the CPU (and PyTorch) give, for [N, C] (a warp per sample) and [N, C, d] (a thread per
// sample) inputs, with and without class weights, every reduction. The tests skip without a GPU.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"

namespace dp {
namespace {

using test::compare;
using test::sample;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Random logits [N, C, S...] with class c of sample n masked (-inf) when masked(n, c); targets
// always pick an unmasked class.
struct Masked {
  Tensor x, t;
};

Masked masked_logits(int64_t n, int64_t c, int64_t s, bool spatial, bool (*masked)(int64_t, int64_t)) {
  std::vector<float> v = sample({n * c * s}, kFloat32, 31).to_vector<float>();
  std::vector<int64_t> t(static_cast<size_t>(n * s));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < c; ++k)
      if (masked(i, k))
        for (int64_t j = 0; j < s; ++j) v[static_cast<size_t>((i * c + k) * s + j)] = kNegInf;
    int64_t target = (i * 7) % c;
    while (masked(i, target)) target = (target + 1) % c;
    for (int64_t j = 0; j < s; ++j) t[static_cast<size_t>(i * s + j)] = target;
  }
  const Shape xs = spatial ? Shape{n, c, s} : Shape{n, c};
  const Shape ts = spatial ? Shape{n, s} : Shape{n};
  return {tensor<float>(v, xs), tensor<int64_t>(t, ts)};
}

// Row 0: the first 40 classes (every lane's first element, and then some); other rows: every
// third class; the last class is never masked.
bool mask_pattern(int64_t n, int64_t c) { return c != 99 && (n == 0 ? c < 40 : c % 3 == 0); }
// Class 0 of every sample (a thread per sample meets it first) and class 2 of odd samples.
bool mask_first(int64_t n, int64_t c) { return c == 0 || (c == 2 && n % 2 == 1); }

TEST(CudaLossMasked, CrossEntropyWithNegInfLogitsMatchesCpu) {
  DP_REQUIRE_GPU();
  const Tensor w = sample({100}, kFloat32, 5, 0.5, 2.0);
  const Tensor w5 = sample({5}, kFloat32, 6, 0.5, 2.0);
  const Masked rows = masked_logits(6, 100, 1, false, mask_pattern);
  const Masked spatial = masked_logits(4, 5, 3, true, mask_first);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    const std::string red = reduction_name(r);
    compare(
        "[N, C] " + red, {rows.x, rows.t}, {true, false}, [r](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], {}, -100, r); }, false,
        1e-5);
    compare(
        "[N, C] weighted " + red, {rows.x, rows.t, w}, {true, false, false},
        [r](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, r); }, false, 1e-5);
    compare(
        "[N, C, d] " + red, {spatial.x, spatial.t}, {true, false},
        [r](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], {}, -100, r); }, false, 1e-5);
    compare(
        "[N, C, d] weighted " + red, {spatial.x, spatial.t, w5}, {true, false, false},
        [r](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, r); }, false, 1e-5);
  }
}

}  // namespace
}  // namespace dp
