// The CPU backend's k-way sum (backend/comm_kernels.h's sum_into): DataParallel's gradient reduction
// and reduce_add_coalesced over CPU devices, whose buffers all live in host memory. The caller
// (src/parallel/reduce.cpp) splits a large reduction into ranges and runs them on the devices'
// workers; this is one range, in the calling thread.
#include <type_traits>
#include "backend/comm_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend::cpu {
namespace {

// out[i] = sum over j of ins[j][i], in j order. 16-bit floats accumulate in float; bool is "or".
template <typename T>
void sum_range(T* out, const std::vector<const void*>& in, int64_t n) {
  const size_t k = in.size();
  if constexpr (std::is_same_v<T, bool>) {
    for (int64_t i = 0; i < n; ++i) {
      bool acc = false;
      for (size_t j = 0; j < k; ++j) acc = acc || static_cast<const bool*>(in[j])[i];
      out[i] = acc;
    }
  } else {
    using Acc = std::conditional_t<backend::is_reduced_float_v<T>, float, T>;
    if (k == 2 && !backend::is_reduced_float_v<T>) {  // two devices: one vectorised pass
      const T* a = static_cast<const T*>(in[0]);
      const T* b = static_cast<const T*>(in[1]);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + b[i]);
      return;
    }
    const T* first = static_cast<const T*>(in[0]);
    for (int64_t i = 0; i < n; ++i) {
      Acc acc = static_cast<Acc>(first[i]);
      for (size_t j = 1; j < k; ++j) acc += static_cast<Acc>(static_cast<const T*>(in[j])[i]);
      out[i] = static_cast<T>(acc);
    }
  }
}

// The stream is the host's: the sum runs now, in the calling thread.
void sum_into_kernel(void* out, const std::vector<const void*>& ins, int64_t n, DType dtype, const Stream& /*stream*/) {
  DP_CHECK(!ins.empty(), ValueError, "reduce_add_coalesced: sum_into has no inputs");
  if (n <= 0) return;
  backend::dispatch_all(dtype, "reduce_add_coalesced", [&]<typename T>() { sum_range<T>(static_cast<T*>(out), ins, n); });
}

}  // namespace

void register_comm_kernels() { DP_REGISTER_KERNEL(CPU, sum_into_kernel); }

}  // namespace dp::backend::cpu
