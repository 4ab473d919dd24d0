// The CUDA matrix products' TF32 switch (dp/cuda/matmul.h), read by the CUDA backend's GEMMs
// (src/backend/cuda/blas.cpp) each time they choose a compute type.
#include "dp/cuda/matmul.h"

#include <atomic>

namespace dp::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace dp::cuda
