// The CUDA backend's kernels, registered into the kernel interfaces' stubs (called once, from
// src/backend/registry.cpp, which this file's registrar enlists the backend with when the CUDA
// library is linked or loaded). The kernels themselves are in the .cu files.
#include "backend/comm_kernels.h"
#include "backend/loss_kernels.h"
#include "backend/optim_kernels.h"
#include "backend/random_kernels.h"
#include "backend/registry.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/loss.h"
#include "backend/cuda/nccl.h"
#include "backend/cuda/optim.h"
#include "backend/cuda/random.h"
#include "backend/cuda/runtime_api.h"
#include "dp/core/device_runtime.h"
#include "dp/core/errors.h"

namespace dp::backend::cuda {

const DeviceRuntime& cuda_runtime();  // device_runtime.cpp

void register_cuda_elementwise_kernels();  // register_elementwise_kernels.cpp
void register_cuda_reduce_kernels();       // register_reduce_kernels.cpp

namespace {

// Adam's step count and bias corrections are host values: captured into a CUDA graph they would be
// frozen at their values of the captured step.
void check_host_scalar_step_kernel(int device, const char* optimizer) {
  DP_CHECK(!cuda::is_current_stream_capturing(device), NotImplementedError, optimizer, ": step() during CUDA graph capture on cuda:", device,
           ": the step count and bias corrections are host values and would be frozen into the graph; "
           "capture SGD, or run this optimizer's step outside the graph");
}

void sum_into_kernel(void* out, const std::vector<const void*>& ins, int64_t n, DType dtype, const ::dp::Stream& stream) {
  cuda::sum_into(out, ins, n, dtype, cuda::Stream::from_generic(stream));
}

// The kernel interface's peer access is the public dp::cuda::enable_peer_access.
bool peer_access_kernel(int device, int peer) { return enable_peer_access(device, peer); }

}  // namespace

void register_cuda_ops_kernels();  // register_ops_kernels.cpp

void register_cuda_kernels() {
  register_device_runtime(DeviceType::CUDA, &cuda::cuda_runtime());
  using nccl::collective_usable_kernel;
  DP_REGISTER_KERNEL(CUDA, collective_usable_kernel);
  using nccl::collective_broadcast_kernel;
  DP_REGISTER_KERNEL(CUDA, collective_broadcast_kernel);
  using nccl::collective_reduce_kernel;
  DP_REGISTER_KERNEL(CUDA, collective_reduce_kernel);
  DP_REGISTER_KERNEL(CUDA, peer_access_kernel);
  DP_REGISTER_KERNEL(CUDA, sum_into_kernel);
  register_cuda_elementwise_kernels();
  register_cuda_reduce_kernels();
  DP_REGISTER_KERNEL(CUDA, dropout_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, dropout_apply_kernel);
  using optim::sgd_update_kernel;
  DP_REGISTER_KERNEL(CUDA, sgd_update_kernel);
  using optim::adam_update_kernel;
  DP_REGISTER_KERNEL(CUDA, adam_update_kernel);
  DP_REGISTER_KERNEL(CUDA, check_host_scalar_step_kernel);
  DP_REGISTER_KERNEL(CUDA, pointwise_loss_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, pointwise_loss_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, nll_loss_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, nll_loss_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, cross_entropy_index_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, cross_entropy_index_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, cross_entropy_prob_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, cross_entropy_prob_backward_kernel);
  register_cuda_ops_kernels();
}

namespace {
// Enlists the CUDA backend when this object file is part of the program: at load time for the
// shared libdparallel_cuda.so (which its users link with --no-as-needed, cmake/Cuda.cmake); for the
// static library because the program refers to link_backend() below.
const backend::BackendRegistrar cuda_registrar(DeviceType::CUDA, &register_cuda_kernels);
}  // namespace

}  // namespace dp::backend::cuda

// The library's anchor is named in the public namespace of the CUDA library (dp::cuda), not the
// backend's, so the mangled name below does not change when the backend's internals move.
namespace dp::cuda::detail {

// What a program linking dparallel::cuda is made to refer to (CMake's INTERFACE_LINK_OPTIONS and
// dparallel-cuda.pc pass -Wl,--undefined=_ZN2dp4cuda6detail12link_backendEv, cmake/Cuda.cmake), so
// that the linker takes this object file, and its registrar, out of the static libdparallel_cuda.a
// although the program's own code names nothing of the CUDA library.
void link_backend() {}

}  // namespace dp::cuda::detail
