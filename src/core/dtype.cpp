#include "dp/core/dtype.h"
#include "dp/core/errors.h"

namespace dp {

void throw_unknown_dtype(const char* where) { throw DTypeError(std::string(where) + ": unknown dtype"); }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::UInt8:
      return "uint8";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "unknown";
}

const char* legacy_type_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "torch.BoolTensor";
    case DType::UInt8:
      return "torch.ByteTensor";
    case DType::Int32:
      return "torch.IntTensor";
    case DType::Int64:
      return "torch.LongTensor";
    case DType::Float16:
      return "torch.HalfTensor";
    case DType::BFloat16:
      return "torch.BFloat16Tensor";
    case DType::Float32:
      return "torch.FloatTensor";
    case DType::Float64:
      return "torch.DoubleTensor";
  }
  return "torch.Tensor";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // float16 with bfloat16 has no common 16-bit type: float32, as in PyTorch.
  if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16)) return DType::Float32;
  // The enum is ordered bool < uint8 < int32 < int64 < f16 < bf16 < f32 < f64; within integers and
  // across categories the larger one wins.
  return a > b ? a : b;
}

}  // namespace dp
