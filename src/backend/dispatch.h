#pragma once
// Turns a runtime DType into a compile-time element type:
//   dispatch_all(t.dtype(), "add", [&]<typename T>() { ... });
// Each family lists the dtypes an op supports; anything else is a DTypeError naming the op.
#include <string>
#include <type_traits>
#include <utility>
#include "dp/core/dtype.h"
#include "dp/core/errors.h"

namespace dp::backend {

[[noreturn]] inline void unsupported_dtype(const char* op, DType t, const char* family) {
  throw DTypeError(detail::str(op, ": unsupported dtype ", dtype_name(t), " (supported: ", family, ")"));
}

// "float32, float64" for dispatch_types<float, double>: the list an unsupported dtype's error names.
template <typename... Ts>
std::string dtype_list() {
  std::string out;
  ((out += (out.empty() ? "" : ", "), out += dtype_name(dtype_of<Ts>)), ...);
  return out;
}

namespace detail_dispatch {
// Tries each type in turn; with no match, the error names the whole list All.
template <typename... All>
struct Ladder {
  template <typename T0, typename... Ts, typename F>
  static decltype(auto) run(DType t, const char* op, F& f) {
    if (t == dtype_of<T0>) return f.template operator()<T0>();
    if constexpr (sizeof...(Ts) > 0)
      return run<Ts...>(t, op, f);
    else
      unsupported_dtype(op, t, dtype_list<All...>().c_str());
  }
};
}  // namespace detail_dispatch

// The one dtype dispatch: f.template operator()<T>() for the T of Ts whose dtype is `t`; any other
// dtype is a DTypeError naming `op` and Ts. Every family below, and every kernel that takes its own
// set of dtypes, is a list of types given to it, never a switch of its own.
template <typename... Ts, typename F>
decltype(auto) dispatch_types(DType t, const char* op, F&& f) {
  static_assert(sizeof...(Ts) > 0, "dispatch_types: list the element types");
  return detail_dispatch::Ladder<Ts...>::template run<Ts...>(t, op, f);
}

template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  return dispatch_types<bool, uint8_t, int32_t, int64_t, Half, BFloat16, float, double>(t, op, std::forward<F>(f));
}

// Every dtype but bool (arithmetic).
template <typename F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  return dispatch_types<uint8_t, int32_t, int64_t, Half, BFloat16, float, double>(t, op, std::forward<F>(f));
}

template <typename F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  return dispatch_types<Half, BFloat16, float, double>(t, op, std::forward<F>(f));
}

template <typename F>
decltype(auto) dispatch_index(DType t, const char* op, F&& f) {
  return dispatch_types<int32_t, int64_t>(t, op, std::forward<F>(f));
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

}  // namespace dp::backend
