// Vectorisable reductions for gloo (gloo_reduce.h).
#include "distributed/gloo_reduce.h"
#include <cstdint>
#include "dp/core/errors.h"
#include "dp/core/half.h"

namespace dp::distributed::detail {
namespace {

struct SumOp {
  template <typename T>
  static T f(T a, T b) {
    return a + b;
  }
};
struct ProductOp {
  template <typename T>
  static T f(T a, T b) {
    return a * b;
  }
};
struct MinOp {
  template <typename T>
  static T f(T a, T b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename T>
  static T f(T a, T b) {
    return a < b ? b : a;
  }
};
// Bool elements are bytes holding 0 or 1.
struct OrOp {
  static uint8_t f(uint8_t a, uint8_t b) { return a | b; }
};
struct AndOp {
  static uint8_t f(uint8_t a, uint8_t b) { return a & b; }
};

// Two loops instead of one with aliasing pointers: gloo calls reduce(out, out, in, n) (in place)
// and, for its first step, reduce(out, a, b, n) with three distinct buffers. __restrict is only
// true in each case separately, and it is what lets the compiler vectorise.
template <typename T, typename Op>
void accumulate(T* __restrict out, const T* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::f(out[i], in[i]);
}
template <typename T, typename Op>
void combine(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::f(a[i], b[i]);
}

template <typename T, typename Op>
void reduce(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (o == x) {
    accumulate<T, Op>(o, y, n);
  } else if (o == y) {
    accumulate<T, Op>(o, x, n);  // every op here is commutative
  } else {
    combine<T, Op>(o, x, y, n);
  }
}

// Float16/BFloat16 on the wire (allreduce_compressed): each pair combined in float, rounded once.
template <typename H, typename Op>
void reduce_half(void* out, const void* a, const void* b, size_t n) {
  H* o = static_cast<H*>(out);
  const H* x = static_cast<const H*>(a);
  const H* y = static_cast<const H*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = H(Op::f(static_cast<float>(x[i]), static_cast<float>(y[i])));
}
template <typename H>
ReduceFn half_numeric(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return &reduce_half<H, SumOp>;
    case ReduceOp::Product:
      return &reduce_half<H, ProductOp>;
    case ReduceOp::Min:
      return &reduce_half<H, MinOp>;
    case ReduceOp::Max:
      return &reduce_half<H, MaxOp>;
  }
  throw ValueError(dp::detail::str("reduce_function: unknown ReduceOp ", static_cast<int>(op)));
}
template <typename H>
void scale_half(H* data, size_t n, float factor) {
  for (size_t i = 0; i < n; ++i) data[i] = H(static_cast<float>(data[i]) * factor);
}

template <typename T>
ReduceFn numeric(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return &reduce<T, SumOp>;
    case ReduceOp::Product:
      return &reduce<T, ProductOp>;
    case ReduceOp::Min:
      return &reduce<T, MinOp>;
    case ReduceOp::Max:
      return &reduce<T, MaxOp>;
  }
  throw ValueError(dp::detail::str("reduce_function: unknown ReduceOp ", static_cast<int>(op)));
}

template <typename T>
void scale(T* __restrict data, size_t n, T factor) {
  for (size_t i = 0; i < n; ++i) data[i] *= factor;
}

}  // namespace

ReduceFn reduce_function(DType wire, ReduceOp op) {
  switch (wire) {
    case kBool:
      if (op == ReduceOp::Avg) break;
      return op == ReduceOp::Sum || op == ReduceOp::Max ? &reduce<uint8_t, OrOp> : &reduce<uint8_t, AndOp>;
    case kUInt8:
      return numeric<uint8_t>(op);
    case kInt32:
      return numeric<int32_t>(op);
    case kInt64:
      return numeric<int64_t>(op);
    case kFloat32:
      return numeric<float>(op);
    case kFloat64:
      return numeric<double>(op);
    case kFloat16:
      return half_numeric<Half>(op);
    case kBFloat16:
      return half_numeric<BFloat16>(op);
    default:
      break;
  }
  throw DTypeError(dp::detail::str("reduce_function: no ", reduce_op_name(op), " reduction for dtype ", dtype_name(wire)));
}

void scale_in_place(void* data, DType wire, size_t n, double factor) {
  if (wire == kFloat32) return scale(static_cast<float*>(data), n, static_cast<float>(factor));
  if (wire == kFloat64) return scale(static_cast<double*>(data), n, factor);
  if (wire == kFloat16) return scale_half(static_cast<Half*>(data), n, static_cast<float>(factor));
  if (wire == kBFloat16) return scale_half(static_cast<BFloat16*>(data), n, static_cast<float>(factor));
  throw DTypeError(dp::detail::str("scale_in_place: dtype ", dtype_name(wire), " is not float32 or float64"));
}

}  // namespace dp::distributed::detail
