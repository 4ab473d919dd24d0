// The CUDA backend's kernels of the LSTM, normalization, random and transfer kernel interfaces
// (src/backend/*_kernels.h), and its capabilities; registered from register_cuda_kernels()
// (register_kernels.cpp). The device work is in the .cu files and the host files beside them; what
// is here adapts it to the interfaces' signatures.
#include "backend/capabilities.h"
#include "backend/lstm_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/random_kernels.h"
#include "backend/transfer_kernels.h"
#include "cuda/lstm.h"
#include "cuda/norm_pool.h"
#include "cuda/random.h"
#include "cuda/transfer.h"

namespace dp::backend {
namespace {

// ---- random fills: the Philox kernel, with the CPU's stream layout (cuda/random.h) ----

void random_fill_cuda(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b) {
  cuda::RandomKind k = cuda::RandomKind::Uniform;
  switch (kind) {
    case RandomKind::Uniform: k = cuda::RandomKind::Uniform; break;
    case RandomKind::Normal: k = cuda::RandomKind::Normal; break;
    case RandomKind::Bernoulli: k = cuda::RandomKind::Bernoulli; break;
  }
  cuda::random_fill(k, t, seed, first, a, b);
}

}  // namespace

void register_cuda_ops_kernels() {
  // The nn kernels (norm_pool.cu, cuDNN convolutions, loss.cu) compute float16 / bfloat16 in float32.
  set_capabilities(DeviceType::CUDA, Capabilities{.kernels = true, .half_nn = true});

  lstm_layer_forward.set(DeviceType::CUDA, &cuda::lstm_layer_forward);
  lstm_layer_backward.set(DeviceType::CUDA, &cuda::lstm_layer_backward);

  batch_norm_update_running.set(DeviceType::CUDA, &cuda::batch_norm_update_running);
  batch_norm_invstd.set(DeviceType::CUDA, &cuda::batch_norm_invstd);

  random_fill.set(DeviceType::CUDA, &random_fill_cuda);

  copy_across.set(DeviceType::CUDA, &cuda::copy_across);
}

}  // namespace dp::backend
