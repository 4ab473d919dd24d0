// The safetensors dtype names and the reference implementation's dtype order, shared by the writer
// (which sorts by that order) and the reader.
#include <string>
#include "dp/core/errors.h"
#include "dp/core/serialize.h"

namespace dp::detail {

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "BOOL";
    case DType::UInt8:
      return "U8";
    case DType::Int32:
      return "I32";
    case DType::Int64:
      return "I64";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
  }
  throw DTypeError(str("safetensors: no format name for dtype ", static_cast<int>(dtype)));
}

// Position in the reference's `enum Dtype` (BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16,
// I32, U32, F32, F64, I64, U64), which its writer sorts by, descending.
int safetensors_dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return 0;
    case DType::UInt8:
      return 1;
    case DType::Float16:
      return 7;
    case DType::BFloat16:
      return 8;
    case DType::Int32:
      return 9;
    case DType::Float32:
      return 11;
    case DType::Float64:
      return 12;
    case DType::Int64:
      return 13;
  }
  throw DTypeError(str("safetensors: no format rank for dtype ", static_cast<int>(dtype)));
}

DType safetensors_dtype_from_name(const std::string& name, const std::string& what) {
  for (DType d : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (name == safetensors_dtype_name(d)) return d;
  // Names the format defines that dparallel has no dtype for.
  for (const char* known : {"I8", "I16", "U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"})
    if (name == known)
      throw ValueError(str(what, ": dtype '", name, "' is not supported by dparallel (supported: F64, F32, F16, BF16, I64, I32, U8, BOOL)"));
  throw ValueError(str(what, ": unknown dtype '", name, "'"));
}

}  // namespace dp::detail
