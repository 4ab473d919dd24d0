// The operand views the CUDA index kernels get (backend/index_kernels.h), checked on any machine: each
// plan is run through a host copy of the kernels' loops (same OffsetCalculator, same byte-offset
// arithmetic) and must give exactly the CPU op's result, for every op, dim, dtype and layout the
// GPU tests use. What stays for a GPU to prove is the kernels' memory access and atomics.
#include <gtest/gtest.h>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>
#include "dp/dp.h"
#include "backend/dispatch.h"
#include "backend/cuda/offset_calculator.h"
#include "backend/index_kernels.h"

namespace dp {
namespace {

namespace plan = backend::index_plan;

// Byte offsets of the three operands for each linear position of it's shape: the same
// OffsetCalculator (and the same stride rules as backend::cuda::detail::offsets_for) as the kernels.
template <typename F>
void for_each_position(const plan::IndexKernelPlan& p, F&& f) {
  const Tensor* ops[3] = {&p.it, &p.src, &p.index};
  const int nd = static_cast<int>(p.it.dim());
  int64_t st[3][64] = {};
  const int64_t* rows[3];
  for (int k = 0; k < 3; ++k) {
    const Tensor& t = *ops[k];
    const int td = static_cast<int>(t.dim());
    for (int d = 0; d < nd; ++d) {
      const int sd = d - (nd - td);
      st[k][d] = (sd < 0 || t.sizes()[sd] == 1) ? 0 : t.strides()[sd] * static_cast<int64_t>(t.element_size());
    }
    rows[k] = st[k];
  }
  const auto oc = backend::cuda::detail::make_offset_calculator<3, uint64_t>(nd, p.it.sizes().data(), rows);
  const int64_t n = p.it.numel();
  for (int64_t i = 0; i < n; ++i) {
    const auto o = oc.get(static_cast<uint64_t>(i));
    f(o.v[0], o.v[1], o.v[2]);
  }
}

int64_t index_at(const plan::IndexKernelPlan& p, int64_t off) {
  const char* b = static_cast<const char*>(p.index.data_ptr()) + off;
  return p.index.dtype() == kInt32 ? *reinterpret_cast<const int32_t*>(b) : *reinterpret_cast<const int64_t*>(b);
}

// The kernels' loops on the host, serial. Return whether an index was outside [0, bound) (such an
// index writes 0 in a gather, nothing in a scatter-add).
bool run_gather_on_host(const plan::IndexKernelPlan& p) {
  bool bad = false;
  const size_t es = p.it.element_size();
  char* out = static_cast<char*>(p.it.data_ptr());
  const char* src = static_cast<const char*>(p.src.data_ptr());
  const int64_t step = p.step * static_cast<int64_t>(p.src.element_size());
  for_each_position(p, [&](int64_t o0, int64_t o1, int64_t o2) {
    const int64_t v = index_at(p, o2);
    if (v < 0 || v >= p.bound) {
      bad = true;
      std::memset(out + o0, 0, es);
      return;
    }
    std::memcpy(out + o0, src + o1 + v * step, es);
  });
  return bad;
}

bool run_scatter_add_on_host(const plan::IndexKernelPlan& p) {
  bool bad = false;
  char* self = static_cast<char*>(p.it.data_ptr());
  const char* src = static_cast<const char*>(p.src.data_ptr());
  const int64_t step = p.step * static_cast<int64_t>(p.it.element_size());
  backend::dispatch_all(p.it.dtype(), "scatter_add", [&]<typename T>() {
    for_each_position(p, [&](int64_t o0, int64_t o1, int64_t o2) {
      const int64_t v = index_at(p, o2);
      if (v < 0 || v >= p.bound) {
        bad = true;
        return;
      }
      if (v == p.skip) return;
      T& d = *reinterpret_cast<T*>(self + o0 + v * step);
      const T s = *reinterpret_cast<const T*>(src + o1);
      if constexpr (std::is_same_v<T, bool>)
        d = d || s;
      else if constexpr (backend::is_reduced_float_v<T>)
        d = T(static_cast<float>(d) + static_cast<float>(s));
      else if constexpr (std::is_integral_v<T>)
        d = static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(d)) + static_cast<uint64_t>(static_cast<int64_t>(s)));
      else
        d = d + s;
    });
  });
  return bad;
}

Tensor sample(IntArrayRef sizes, DType dt, uint64_t seed) {
  Generator g(seed);
  Tensor t = dp::sub(dp::mul(rand(sizes, TensorOptions().dtype(kFloat64), &g), 200.0), 100.0);
  return dt == kBool ? dp::gt(t, 0.0) : t.to(dt);
}

Tensor indices(IntArrayRef sizes, int64_t high, uint64_t seed, DType dt = kInt64) {
  Generator g(seed);
  return randint(0, high, sizes, kInt64, &g).to(dt);
}

const std::vector<DType> kDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool};

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_TRUE(dp::equal(got, want)) << what;
}

TEST(CudaIndexPlan, IndexSelect) {
  for (DType dt : kDtypes)
    for (int64_t dim : {0, 1, 2})
      for (bool strided : {false, true}) {
        Tensor a = sample({4, 5, 6}, dt, 1);
        if (strided) a = a.transpose(0, 2);  // [6, 5, 4]
        Tensor idx = indices({14}, a.size(dim), 2, dim == 1 ? kInt32 : kInt64);
        if (strided) idx = idx.slice(0, 0, 14, 2);
        Shape os = a.sizes();
        os[dim] = idx.numel();
        Tensor out = empty(os, TensorOptions().dtype(dt));
        EXPECT_FALSE(run_gather_on_host(plan::index_select(out, a, dim, idx)));
        expect_equal(out, index_select(a, dim, idx), std::string("index_select ") + dtype_name(dt) + " dim " + std::to_string(dim));
      }
}

TEST(CudaIndexPlan, Gather) {
  for (DType dt : kDtypes)
    for (int64_t dim : {0, 1, 2}) {
      const Tensor a = sample({6, 5, 4}, dt, 3).transpose(0, 2);  // [4, 5, 6], strided
      const Tensor idx = indices({3, dim == 1 ? 8 : 4, dim == 2 ? 9 : 5}, a.size(dim), 4);
      Tensor out = empty(idx.sizes(), TensorOptions().dtype(dt));
      EXPECT_FALSE(run_gather_on_host(plan::gather(out, a, dim, idx)));
      expect_equal(out, gather(a, dim, idx), std::string("gather ") + dtype_name(dt) + " dim " + std::to_string(dim));
    }
}

TEST(CudaIndexPlan, Embedding) {
  for (DType it : {kInt64, kInt32}) {
    const Tensor w = sample({16, 10}, kFloat32, 5).t();  // [10, 16], rows strided
    const Tensor idx = indices({5, 6}, 10, 6, it).t();   // [6, 5], strided
    Tensor out = empty({6, 5, 16});
    EXPECT_FALSE(run_gather_on_host(plan::embedding(out, w, idx)));
    expect_equal(out, embedding(w, idx), std::string("embedding ") + dtype_name(it));
  }
}

TEST(CudaIndexPlan, ScatterAddAndIndexAdd) {
  for (DType dt : kDtypes) {
    for (int64_t dim : {0, 1}) {
      const Tensor self = sample({6, 7}, dt, 7), src = sample({8, 9}, dt, 8);
      const Tensor idx = indices({5, 6}, self.size(dim), 9);
      Tensor s = self.clone();
      EXPECT_FALSE(run_scatter_add_on_host(plan::scatter_add(s, dim, idx, src)));
      expect_equal(s, scatter_add(self, dim, idx, src), std::string("scatter_add ") + dtype_name(dt) + " dim " + std::to_string(dim));

      Shape ss = self.sizes();
      ss[dim] = 11;
      const Tensor src2 = sample(ss, dt, 10);
      const Tensor idx2 = indices({22}, self.size(dim), 11, kInt32).slice(0, 0, 22, 2);
      Tensor s2 = self.clone();
      EXPECT_FALSE(run_scatter_add_on_host(plan::index_add(s2, dim, idx2, src2)));
      expect_equal(s2, index_add(self, dim, idx2, src2), std::string("index_add ") + dtype_name(dt) + " dim " + std::to_string(dim));
    }
  }
  // Into a transposed view of a larger tensor (the in-place ops' self may have any layout).
  const Tensor base = sample({8, 6}, kFloat64, 12), src = sample({3, 4}, kFloat64, 13), idx = indices({3, 4}, 6, 14);
  Tensor b1 = base.clone(), b2 = base.clone();
  Tensor v1 = b1.t(), v2 = b2.t();
  EXPECT_FALSE(run_scatter_add_on_host(plan::scatter_add(v1, 0, idx, src)));
  scatter_add_(v2, 0, idx, src);
  expect_equal(b1, b2, "scatter_add_ into a transposed view");
}

TEST(CudaIndexPlan, EmbeddingBackwardAndOneHot) {
  const Tensor idx = indices({4, 9}, 7, 15);
  const Tensor g = sample({4, 9, 5}, kFloat64, 16);
  for (int64_t padding : {int64_t{-1}, int64_t{3}}) {
    Tensor gw = zeros({7, 5}, TensorOptions().dtype(kFloat64));
    EXPECT_FALSE(run_scatter_add_on_host(plan::embedding_backward(gw, g, idx, padding)));
    Tensor w = zeros({7, 5}, TensorOptions().dtype(kFloat64)).requires_grad_(true);
    const Tensor want = autograd::grad({embedding(w, idx, padding)}, {w}, {g})[0];
    EXPECT_TRUE(dp::allclose(gw, want, 1e-12, 1e-12)) << "embedding backward, padding " << padding;
  }
  for (DType it : {kInt64, kInt32}) {
    const Tensor ci = indices({3, 5}, 6, 17, it).t();
    Tensor out = zeros({5, 3, 8}, TensorOptions().dtype(kInt64));
    const Tensor one = full({}, int64_t{1}, TensorOptions().dtype(kInt64));
    EXPECT_FALSE(run_scatter_add_on_host(plan::one_hot(out, one, ci)));
    expect_equal(out, one_hot(ci, 8), std::string("one_hot ") + dtype_name(it));
  }
}

TEST(CudaIndexPlan, OutOfRangeIndicesAreReportedAndSkipped) {
  const Tensor a = sample({4, 6}, kFloat32, 18);
  Tensor out = full({4, 3}, 7.0f);
  EXPECT_TRUE(run_gather_on_host(plan::index_select(out, a, 1, tensor<int64_t>({1, 6, -1}, {3}))));
  EXPECT_TRUE(dp::equal(out.select(1, 1), zeros({4}))) << "a bad index writes 0";
  EXPECT_TRUE(dp::equal(out.select(1, 0), a.select(1, 1)));
  Tensor s = a.clone();
  EXPECT_TRUE(run_scatter_add_on_host(plan::index_add(s, 0, tensor<int64_t>({4, 0}, {2}), ones({2, 6}))));
  EXPECT_TRUE(dp::equal(s.select(0, 0), dp::add(a.select(0, 0), 1.0))) << "the good index still adds; the bad one adds nothing";
  EXPECT_TRUE(dp::equal(s.narrow(0, 1, 3), a.narrow(0, 1, 3)));
}

}  // namespace
}  // namespace dp
