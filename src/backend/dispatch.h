#pragma once
// Turns a runtime DType into a compile-time element type:
//   dispatch_all(t.dtype(), "add", [&]<typename T>() { ... });
// Each family lists the dtypes an op supports; anything else is a DTypeError naming the op.
#include <type_traits>
#include "dp/core/dtype.h"
#include "dp/core/errors.h"

namespace dp::kernels {

[[noreturn]] inline void unsupported_dtype(const char* op, DType t, const char* family) {
  throw DTypeError(detail::str(op, ": unsupported dtype ", dtype_name(t), " (supported: ", family, ")"));
}

template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Bool:
      return f.template operator()<bool>();
    case DType::UInt8:
      return f.template operator()<uint8_t>();
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Float16:
      return f.template operator()<Half>();
    case DType::BFloat16:
      return f.template operator()<BFloat16>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
  }
  unsupported_dtype(op, t, "all");
}

// Every dtype but bool (arithmetic).
template <typename F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::UInt8:
      return f.template operator()<uint8_t>();
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Float16:
      return f.template operator()<Half>();
    case DType::BFloat16:
      return f.template operator()<BFloat16>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      unsupported_dtype(op, t, "uint8, int32, int64, float16, bfloat16, float32, float64");
  }
}

template <typename F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float16:
      return f.template operator()<Half>();
    case DType::BFloat16:
      return f.template operator()<BFloat16>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      unsupported_dtype(op, t, "float16, bfloat16, float32, float64");
  }
}

template <typename F>
decltype(auto) dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    default:
      unsupported_dtype(op, t, "int32, int64 (indices)");
  }
}

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// Value conversion between any two element types (16-bit floats go through float; bool is != 0).
template <typename To, typename From>
DP_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_reduced_float_v<From>)
      return static_cast<float>(v) != 0.0f;
    else
      return v != From(0);
  } else if constexpr (is_reduced_float_v<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace dp::kernels
