#pragma once
// Argument checks shared by the ops. Messages name the op and what was wrong.
#include <initializer_list>
#include "dp/core/tensor.h"

namespace dp::ops {

// Every defined tensor on one device, or DeviceError naming the op and two devices.
inline void check_same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    DP_CHECK(t->device() == first->device(), DeviceError, op, ": expected all tensors to be on the same device, but found at least two devices, ",
             first->device().str(), " and ", t->device().str(), "!");
  }
}

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  DP_CHECK(t.defined(), ValueError, op, ": ", what, " is an undefined tensor");
}

inline void check_floating(const char* op, const Tensor& t) {
  DP_CHECK(is_floating_point(t.dtype()), DTypeError, op, ": expected a floating point tensor, got ", dtype_name(t.dtype()), " ", t.size_str());
}

}  // namespace dp::ops
