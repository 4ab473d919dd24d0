#pragma once
// Dispatch on an element's width instead of its dtype, for kernels that only move elements
// (gather, masked_fill): one instantiation per width serves every dtype of that width. Shared by
// the CPU and CUDA backends.
#include <cstddef>
#include <cstdint>

namespace dp::backend {

template <typename F>
void dispatch_width(size_t width, F&& f) {
  switch (width) {
    case 1:
      f.template operator()<uint8_t>();
      return;
    case 2:
      f.template operator()<uint16_t>();
      return;
    case 4:
      f.template operator()<uint32_t>();
      return;
    default:
      f.template operator()<uint64_t>();
      return;
  }
}

}  // namespace dp::backend
