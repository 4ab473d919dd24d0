// sum and mean kernels. Floating inputs accumulate in double (float32 sums of millions of elements
// stay exact to float rounding); integer and bool inputs accumulate in int64.
#include "backend/cpu/reduce.h"

namespace dp::backend::cpu {
namespace {

template <typename T>
using sum_acc_t = std::conditional_t<is_float_v<T>, double, int64_t>;

// Sum of n contiguous elements with 16 independent accumulators (vectorised), combined pairwise.
template <typename A, typename T>
inline A sum_row(const T* p, int64_t n) {
  if (n < 32) {
    A t = 0;
    for (int64_t i = 0; i < n; ++i) t += convert<A>(p[i]);
    return t;
  }
  A s[16];
  for (int k = 0; k < 16; ++k) s[k] = convert<A>(p[k]);
  int64_t i = 16;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) s[k] += convert<A>(p[i + k]);
  A tail = 0;
  for (; i < n; ++i) tail += convert<A>(p[i]);
  for (int k = 0; k < 8; ++k) s[k] += s[k + 8];
  for (int k = 0; k < 4; ++k) s[k] += s[k + 4];
  return ((s[0] + s[2]) + (s[1] + s[3])) + tail;
}

template <typename T, typename O>
struct SumOp : ReduceOpBase<SumOp<T, O>, T, sum_acc_t<T>> {
  using A = sum_acc_t<T>;
  O* out;
  double divisor;  // 1 for sum, N for mean
  A identity() const { return A(0); }
  A step(A a, T v, int64_t) const { return a + convert<A>(v); }
  A combine(A a, A b) const { return a + b; }
  A row(const T* p, int64_t n, int64_t) const { return sum_row<A>(p, n); }
  void accumulate(A* a, const T* q, int64_t rs, int64_t rows, int64_t n, int64_t) const { add_rows_by_four(a, q, rs, rows, n); }
  void store(A a, int64_t o) const {
    if constexpr (std::is_same_v<A, double>)
      out[o] = convert<O>(a / divisor);
    else
      out[o] = convert<O>(a);
  }
};

template <typename T, typename O>
void run_sum(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, double divisor) {
  ReducePlan plan = make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  SumOp<T, O> op;
  op.out = out.data_ptr<O>();
  op.divisor = divisor;
  run_reduce<T>(plan, in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr, op);
}

}  // namespace

void sum_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  dispatch_all(in.dtype(), "sum", [&]<typename T>() {
    if constexpr (is_float_v<T>) {
      DP_CHECK(out.dtype() == in.dtype(), DTypeError, "sum: internal dtype mismatch");
      run_sum<T, T>(out, in, reduced, keepdim, 1.0);
    } else {
      DP_CHECK(out.dtype() == kInt64, DTypeError, "sum: internal dtype mismatch");
      run_sum<T, int64_t>(out, in, reduced, keepdim, 1.0);
    }
  });
}

void mean_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  int64_t n = 1;
  for (int64_t d = 0; d < in.dim(); ++d)
    if (reduced[d]) n *= in.sizes()[d];
  // 0 / 0 = nan for an empty reduction, as in PyTorch.
  dispatch_floating(in.dtype(), "mean", [&]<typename T>() { run_sum<T, T>(out, in, reduced, keepdim, static_cast<double>(n)); });
}

namespace {

// Column sums of a contiguous [rows, inner] block, accumulated in double as sum_kernel does (same
// grouping of four rows per pass), written to out[inner].
template <typename T>
void column_sums(const T* p, int64_t rows, int64_t inner, T* out) {
  constexpr int64_t kStack = 512;
  double stack_acc[kStack];
  std::vector<double> heap_acc;
  double* acc = stack_acc;
  if (inner > kStack) {
    heap_acc.resize(static_cast<size_t>(inner));
    acc = heap_acc.data();
  }
  std::fill(acc, acc + inner, 0.0);
  add_rows_by_four(acc, p, inner, rows, inner);
  for (int64_t j = 0; j < inner; ++j) out[j] = static_cast<T>(acc[j]);
}

}  // namespace

void sum_rows_kernel(const Tensor& out, const Tensor& a, int64_t rows, int64_t inner) {
  if (inner == 0) return;
  if (a.dtype() == kFloat32)
    column_sums(rows ? a.data_ptr<float>() : nullptr, rows, inner, out.data_ptr<float>());
  else if (a.dtype() == kFloat64)
    column_sums(rows ? a.data_ptr<double>() : nullptr, rows, inner, out.data_ptr<double>());
  else
    unsupported_dtype("sum_to", a.dtype(), "float32, float64");
}

}  // namespace dp::backend::cpu
