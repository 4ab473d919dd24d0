#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include "dp/core/half.h"

namespace dp {

// Ordered by promotion category and width; promote_types relies on the order only within a category.
enum class DType : uint8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kInt = DType::Int32;

// Bytes per element. Inline (a table lookup): data_ptr() and every allocation ask for it.
[[noreturn]] void throw_unknown_dtype(const char* where);
inline size_t element_size(DType t) {
  constexpr size_t kSizes[] = {1, 1, 4, 8, 2, 2, 4, 8};  // in DType's order
  static_assert(static_cast<int>(DType::Int32) == 2 && static_cast<int>(DType::Float16) == 4 && static_cast<int>(DType::Float64) == 7,
                "element_size's table follows DType's order");
  const auto i = static_cast<size_t>(t);
  if (i >= sizeof kSizes / sizeof kSizes[0]) [[unlikely]]
    throw_unknown_dtype("element_size");
  return kSizes[i];
}
// "float32", "int64", ...
const char* dtype_name(DType t);
// PyTorch's spelling of the legacy tensor type, used in autograd messages: "torch.FloatTensor".
const char* legacy_type_name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

inline bool is_floating_point(DType t) { return t >= DType::Float16; }
inline bool is_integral(DType t, bool include_bool) { return (t >= DType::UInt8 && t <= DType::Int64) || (include_bool && t == DType::Bool); }
// PyTorch's promote_types: the smallest type both convert to without losing their category.
DType promote_types(DType a, DType b);
// The default floating type (float32); integer inputs to floating ops produce it.
inline DType default_float_dtype() { return DType::Float32; }

template <typename T>
struct CppTypeToDType;
template <>
struct CppTypeToDType<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct CppTypeToDType<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct CppTypeToDType<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct CppTypeToDType<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct CppTypeToDType<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct CppTypeToDType<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct CppTypeToDType<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct CppTypeToDType<double> {
  static constexpr DType value = DType::Float64;
};
template <typename T>
inline constexpr DType dtype_of = CppTypeToDType<T>::value;

// Accumulation type for reductions and 16-bit arithmetic.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};
template <>
struct AccType<bool> {
  using type = int64_t;
};
template <>
struct AccType<uint8_t> {
  using type = int64_t;
};
template <>
struct AccType<int32_t> {
  using type = int64_t;
};
template <typename T>
using acc_t = typename AccType<T>::type;

}  // namespace dp
