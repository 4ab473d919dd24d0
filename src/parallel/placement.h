#pragma once
// Where a tensor's memory is and how to make it appear on another device without copying.
#include "dp/core/tensor.h"

namespace dp::parallel::detail {

// Every CPU device ("cpu", "cpu:i") addresses the machine's memory.
inline bool host_memory(Device d) { return d.is_cpu(); }

// The same elements labelled as `device` (both must be host-memory devices): a new tensor over an
// alias of t's storage that keeps it alive and shares its version counter. No autograd history.
Tensor alias_on(const Tensor& t, Device device);

// t on `device` with no history: t itself, an alias (host memory), or a copy.
Tensor place_on(const Tensor& t, Device device);

}  // namespace dp::parallel::detail
