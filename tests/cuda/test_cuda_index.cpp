// Index ops on a CUDA device against the CPU: index_select, gather, scatter_add(_), index_add(_),
// embedding (padding_idx, double backward), one_hot, masked_fill, forward and gradients, every
// dtype the ops move, non-contiguous operands, int32 indices; out-of-range indices give the CPU's
// IndexError (and leave in-place targets untouched). Every test needs a GPU and skips without one.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"

namespace dp {
namespace {

using test::compare;
using test::error_of;
using test::expect_rel;
using test::expect_same;
using test::kGpu;
using test::run_on;
using test::sample;
using test::tol_for;

Tensor indices(IntArrayRef sizes, int64_t high, uint64_t seed, DType dt = kInt64) {
  Generator g(seed);
  return randint(0, high, sizes, kInt64, &g).to(dt);
}

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool};

Tensor values_of(DType dt, IntArrayRef sizes, uint64_t seed) {
  if (dt == kBool) return dp::gt(sample(sizes, kFloat32, seed), 0.0);
  if (dt == kUInt8) return sample(sizes, kFloat32, seed, 0, 100).to(dt);
  if (dt == kInt32 || dt == kInt64) return sample(sizes, kFloat32, seed, -1000, 1000).to(dt);
  return sample(sizes, dt, seed);
}

TEST(CudaIndex, IndexSelectEveryDtypeDimAndLayout) {
  DP_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    const Tensor a = values_of(dt, {5, 6, 7}, 1);
    for (int64_t dim : {0, 1, 2, -1}) {
      for (DType it : {kInt64, kInt32}) {
        const Tensor idx = indices({9}, a.size(dim < 0 ? dim + 3 : dim), 2, it);
        compare(
            std::string("index_select ") + dtype_name(dt) + " dim " + std::to_string(dim) + " " + dtype_name(it), {a, idx}, {},
            [dim](const std::vector<Tensor>& x) { return index_select(x[0], dim, x[1]); }, true);
      }
    }
    // Non-contiguous input (transposed) and index (every other element).
    const Tensor idx = indices({12}, 5, 3);
    compare(
        std::string("index_select strided ") + dtype_name(dt), {a, idx}, {},
        [](const std::vector<Tensor>& x) { return index_select(x[0].transpose(0, 2), 2, x[1].slice(0, 0, 12, 2)); }, true);
  }
}

TEST(CudaIndex, IndexSelectGradientAddsRepeatedRows) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor a = sample({6, 33}, dt, 4);
    const Tensor idx = tensor<int64_t>({0, 5, 5, 2, 0, 5, 1, 1, 3}, {9});
    for (int64_t dim : {0, 1}) {
      const Tensor i = dim == 0 ? idx : indices({40}, 33, 5);
      compare(
          std::string("index_select backward ") + dtype_name(dt) + " dim " + std::to_string(dim), {a, i}, {true},
          [dim](const std::vector<Tensor>& x) { return index_select(x[0], dim, x[1]); }, true, tol_for(dt) * 10);
    }
  }
}

TEST(CudaIndex, GatherForwardAndBackward) {
  DP_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    const Tensor a = values_of(dt, {4, 5, 6}, 6);
    for (int64_t dim : {0, 1, 2}) {
      // index smaller than the input in the other dims, larger along dim
      const Tensor idx = indices({3, dim == 1 ? 8 : 4, dim == 2 ? 9 : 5}, a.size(dim), 7);
      compare(
          std::string("gather ") + dtype_name(dt) + " dim " + std::to_string(dim), {a, idx}, {},
          [dim](const std::vector<Tensor>& x) { return gather(x[0], dim, x[1]); }, true);
    }
  }
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor a = sample({7, 50}, dt, 8);
    const Tensor idx = indices({7, 80}, 50, 9);  // repeated positions along dim 1
    compare(
        std::string("gather backward ") + dtype_name(dt), {a, idx}, {true}, [](const std::vector<Tensor>& x) { return gather(x[0], 1, x[1]); }, true,
        tol_for(dt) * 10);
    compare(
        std::string("gather backward, transposed input ") + dtype_name(dt), {a, indices({50, 5}, 7, 10)}, {true},
        [](const std::vector<Tensor>& x) { return gather(x[0].t(), 1, x[1]); }, true, tol_for(dt) * 10);
  }
}

TEST(CudaIndex, ScatterAddForwardBackward) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor self = sample({5, 8}, dt, 11);
    const Tensor src = sample({6, 9}, dt, 12);  // larger than index: the gradient pads with zeros
    for (int64_t dim : {0, 1}) {
      const Tensor idx = indices({4, 7}, self.size(dim), 13);
      compare(
          std::string("scatter_add ") + dtype_name(dt) + " dim " + std::to_string(dim), {self, idx, src}, {true, false, true},
          [dim](const std::vector<Tensor>& x) { return scatter_add(x[0], dim, x[1], x[2]); }, false, tol_for(dt) * 10);
    }
  }
}

TEST(CudaIndex, ScatterAddEveryDtypeAndInPlace) {
  DP_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    const Tensor self = values_of(dt, {6, 5}, 14);
    const Tensor src = values_of(dt, {20, 5}, 15);
    const Tensor idx = indices({20, 5}, 6, 16);  // many collisions per row: atomics
    const bool exact = !is_floating_point(dt);
    compare(
        std::string("scatter_add ") + dtype_name(dt), {self, idx, src}, {},
        [](const std::vector<Tensor>& x) { return scatter_add(x[0], 0, x[1], x[2]); }, exact, tol_for(dt) * 4);
    compare(
        std::string("scatter_add_ ") + dtype_name(dt), {self, idx, src}, {},
        [](const std::vector<Tensor>& x) {
          Tensor s = x[0].clone();
          scatter_add_(s, 0, x[1], x[2]);
          return s;
        },
        exact, tol_for(dt) * 4);
  }
  // In place through a non-contiguous view of a larger tensor.
  const Tensor base = sample({8, 6}, kFloat32, 17);
  const Tensor src = sample({3, 4}, kFloat32, 18);
  const Tensor idx = indices({3, 4}, 6, 19);
  compare(
      "scatter_add_ into a transposed view", {base, idx, src}, {},
      [](const std::vector<Tensor>& x) {
        Tensor b = x[0].clone();
        Tensor v = b.t();  // [6, 8]
        scatter_add_(v, 0, x[1], x[2]);
        return b;
      },
      false, 1e-6);
}

TEST(CudaIndex, IndexAddForwardBackwardEveryDtype) {
  DP_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    const Tensor self = values_of(dt, {7, 4, 3}, 20);
    for (int64_t dim : {0, 1, 2}) {
      Shape ss = {7, 4, 3};
      ss[dim] = 11;
      const Tensor src = values_of(dt, ss, 21);
      for (DType it : {kInt64, kInt32}) {
        const Tensor idx = indices({11}, self.size(dim), 22, it);
        const bool exact = !is_floating_point(dt);
        compare(
            std::string("index_add ") + dtype_name(dt) + " dim " + std::to_string(dim), {self, idx, src}, {},
            [dim](const std::vector<Tensor>& x) { return index_add(x[0], dim, x[1], x[2]); }, exact, tol_for(dt) * 4);
        compare(
            std::string("index_add_ ") + dtype_name(dt) + " dim " + std::to_string(dim), {self, idx, src}, {},
            [dim](const std::vector<Tensor>& x) {
              Tensor s = x[0].clone();
              index_add_(s, dim, x[1], x[2]);
              return s;
            },
            exact, tol_for(dt) * 4);
      }
    }
  }
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor self = sample({9, 16}, dt, 23), src = sample({9, 40}, dt, 24);
    compare(
        std::string("index_add backward ") + dtype_name(dt), {self, indices({40}, 16, 25), src}, {true, false, true},
        [](const std::vector<Tensor>& x) { return index_add(x[0], 1, x[1], x[2]); }, false, tol_for(dt) * 10);
  }
}

TEST(CudaIndex, EmbeddingForwardBackward) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor w = sample({50, 24}, dt, 26);
    for (int64_t padding : {int64_t{-1}, int64_t{3}}) {
      for (DType it : {kInt64, kInt32}) {
        Tensor idx = indices({4, 7, 5}, 50, 27, it);
        const std::string what = std::string("embedding ") + dtype_name(dt) + " padding " + std::to_string(padding) + " " + dtype_name(it);
        const bool grads = dt == kFloat32 || dt == kFloat64;
        compare(
            what, {w, idx}, {grads}, [padding](const std::vector<Tensor>& x) { return embedding(x[0], x[1], padding); }, true, tol_for(dt) * 10);
      }
    }
  }
  // Every token the same row (all collide in the backward), the padding row among them; a
  // transposed weight; a non-contiguous index tensor.
  const Tensor w = sample({10, 16}, kFloat32, 28);
  compare(
      "embedding, one row", {w, full({64}, int64_t{2}, TensorOptions().dtype(kInt64))}, {true},
      [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, true, 1e-5);
  compare(
      "embedding, transposed weight and strided index", {sample({16, 10}, kFloat32, 29), indices({6, 8}, 10, 30)}, {true},
      [](const std::vector<Tensor>& x) { return embedding(x[0].t(), x[1].t(), 0); }, true, 1e-5);
}

TEST(CudaIndex, EmbeddingDoubleBackward) {
  DP_REQUIRE_GPU();
  // create_graph: the backward is written with dp ops, so the gradient is differentiable w.r.t.
  // the upstream gradient: d/dgo sum(grad_w * v) = v gathered by the indices (padding row: 0).
  const Tensor w0 = sample({12, 8}, kFloat64, 31), idx = indices({5, 3}, 12, 32), v0 = sample({12, 8}, kFloat64, 33);
  std::vector<Tensor> res[2];
  int k = 0;
  for (Device dev : {Device::cpu(), kGpu}) {
    Tensor w = w0.to(dev).detach().requires_grad_(true);
    Tensor go = sample({5, 3, 8}, kFloat64, 34).to(dev).detach().requires_grad_(true);
    Tensor out = embedding(w, idx.to(dev), 4);
    Tensor gw = autograd::grad({out}, {w}, {go}, true, true)[0];
    Tensor s = dp::sum(dp::mul(gw, v0.to(dev)));
    res[k++] = {gw.detach(), autograd::grad({s}, {go})[0]};
  }
  expect_rel(res[1][0], res[0][0], 1e-12, "embedding gradient under create_graph");
  expect_rel(res[1][1], res[0][1], 1e-12, "embedding double backward");
}

TEST(CudaIndex, ZeroDimEmptyAndLargeRows) {
  DP_REQUIRE_GPU();
  const Tensor s = tensor({3.5}).reshape({});
  compare(
      "index_select of a 0-dim tensor", {s, tensor<int64_t>({0}, {1})}, {true},
      [](const std::vector<Tensor>& x) { return index_select(x[0], 0, x[1]); }, true);
  compare(
      "index_select, empty index", {sample({4, 3}, kFloat32, 35), tensor<int64_t>({}, {0})}, {},
      [](const std::vector<Tensor>& x) { return index_select(x[0], 0, x[1]); }, true);
  compare(
      "embedding, empty rows", {sample({4, 0}, kFloat32, 36), indices({3}, 4, 37)}, {},
      [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, true);
  compare(
      "gather of a 0-dim tensor", {s, tensor<int64_t>({0}, {1}).reshape({})}, {true},
      [](const std::vector<Tensor>& x) { return gather(x[0], 0, x[1]); }, true);
  // rows of 4096 float32: many blocks per row
  compare(
      "embedding, wide rows", {sample({30, 4096}, kFloat32, 38), indices({70}, 30, 39)}, {true},
      [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, true, 1e-5);
}

TEST(CudaIndex, OneHot) {
  DP_REQUIRE_GPU();
  for (DType it : {kInt64, kInt32}) {
    const Tensor idx = indices({3, 7}, 9, 40, it);
    for (int64_t classes : {int64_t{-1}, int64_t{9}, int64_t{12}})
      compare(
          std::string("one_hot ") + dtype_name(it) + " " + std::to_string(classes), {idx}, {},
          [classes](const std::vector<Tensor>& x) { return one_hot(x[0], classes); }, true);
  }
  compare(
      "one_hot of a strided index", {indices({8, 4}, 5, 41)}, {}, [](const std::vector<Tensor>& x) { return one_hot(x[0].t(), 5); }, true);
}

TEST(CudaIndex, MaskedFill) {
  DP_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    const Tensor a = values_of(dt, {4, 5, 6}, 42);
    const Tensor mask = dp::gt(sample({5, 1}, kFloat32, 43), 0.0);  // broadcasts
    compare(
        std::string("masked_fill ") + dtype_name(dt), {a, mask}, {}, [](const std::vector<Tensor>& x) { return masked_fill(x[0], x[1], 1); }, true);
  }
  // broadcast of the input too, a float value, and the gradient (sum_to over the broadcast dims)
  compare(
      "masked_fill backward", {sample({5, 1}, kFloat32, 44), dp::gt(sample({3, 5, 6}, kFloat32, 45), 0.0)}, {true},
      [](const std::vector<Tensor>& x) { return masked_fill(x[0], x[1], -2.5); }, true, 1e-6);
}

TEST(CudaIndex, OutOfRangeIndicesGiveTheCpuError) {
  DP_REQUIRE_GPU();
  const Tensor a = sample({4, 6}, kFloat32, 46);
  const Tensor bad1 = tensor<int64_t>({0, 3, 9, 1}, {4});  // 9 >= 6 (dim 1), and >= 4 (dim 0)
  const Tensor neg1 = tensor<int32_t>({2, -1}, {2});
  const Tensor bad2 = tensor<int64_t>({0, 1, 2, 7, 0, 1, 2, 3}, {2, 4});
  using Case = std::function<void(Device)>;
  const std::vector<std::pair<std::string, Case>> cases = {
      {"index_select", [&](Device d) { index_select(a.to(d), 1, bad1.to(d)); }},
      {"index_select negative", [&](Device d) { index_select(a.to(d), 0, neg1.to(d)); }},
      {"gather", [&](Device d) { gather(a.to(d), 1, bad2.to(d)); }},
      {"scatter_add", [&](Device d) { scatter_add(a.to(d), 1, bad2.to(d), a.to(d)); }},
      {"index_add", [&](Device d) { index_add(a.to(d), 1, bad1.to(d), a.slice(1, 0, 4).to(d)); }},
      {"embedding", [&](Device d) { embedding(a.to(d), bad1.to(d)); }},
      {"embedding, empty rows",
       [&](Device d) {
         embedding(sample({4, 0}, kFloat32, 47).to(d), bad1.to(d));
       }},
      {"one_hot", [&](Device d) { one_hot(bad1.to(d), 5); }},
      {"one_hot negative", [&](Device d) { one_hot(neg1.to(d), 5); }},
  };
  for (const auto& [name, f] : cases) {
    const std::string cpu = error_of<IndexError>([&] { f(Device::cpu()); });
    const std::string gpu = error_of<IndexError>([&] { f(kGpu); });
    EXPECT_NE(cpu, "no exception") << name;
    EXPECT_EQ(gpu, cpu) << name;
  }
  // In-place ops: the same error, and self untouched.
  for (bool scatter : {true, false}) {
    Tensor s = a.to(kGpu);
    const std::string what = scatter ? "scatter_add_" : "index_add_";
    const std::string gpu = error_of<IndexError>([&] {
      if (scatter)
        scatter_add_(s, 1, bad2.to(kGpu), a.to(kGpu));
      else
        index_add_(s, 1, bad1.to(kGpu), a.slice(1, 0, 4).to(kGpu));
    });
    Tensor c = a.clone();
    const std::string cpu = error_of<IndexError>([&] {
      if (scatter)
        scatter_add_(c, 1, bad2, a);
      else
        index_add_(c, 1, bad1, a.slice(1, 0, 4));
    });
    EXPECT_EQ(gpu, cpu) << what;
    EXPECT_TRUE(dp::equal(s.cpu(), a)) << what << " wrote through a good index before the bad one";
  }
  // The device is still usable (no sticky error): a good op right after.
  expect_same(index_select(a.to(kGpu), 1, tensor<int64_t>({5, 0}, {2}).to(kGpu)), index_select(a, 1, tensor<int64_t>({5, 0}, {2})),
              "index_select after the errors");
}

TEST(CudaIndex, DeviceMismatchIsADeviceError) {
  DP_REQUIRE_GPU();
  const Tensor a = sample({4, 6}, kFloat32, 48).to(kGpu);
  const Tensor idx = tensor<int64_t>({0, 1}, {2});  // on the host
  EXPECT_THROW(index_select(a, 0, idx), DeviceError);
  EXPECT_THROW(embedding(a, idx), DeviceError);
  EXPECT_THROW(gather(a, 0, idx.reshape({2, 1})), DeviceError);
  EXPECT_THROW(masked_fill(a, zeros({6}, TensorOptions().dtype(kBool)), 1), DeviceError);
}

}  // namespace
}  // namespace dp
