// The CPU backend's kernels, registered into the kernel interfaces' stubs (called once, from
// src/backend/registry.cpp), and its capabilities. Each kernel family's file registers its own
// kernels, each under its stub's name (DP_REGISTER_KERNEL); this is the one list of those files.
#include "backend/capabilities.h"

namespace dp::backend::cpu {

void register_cross_entropy_kernels();       // loss_cross_entropy.cpp
void register_nll_loss_kernels();            // loss_nll.cpp
void register_pointwise_loss_kernels();      // loss_pointwise.cpp
void register_optim_kernels();               // optim_updates.cpp
void register_core_kernels();                // register_core_kernels.cpp
void register_attention_kernels();           // attention.cpp
void register_comm_kernels();                // comm.cpp
void register_index_kernels();               // index.cpp
void register_linalg_kernels();              // linalg.cpp
void register_rnn_kernels();                 // rnn_layer.cpp
void register_norm_kernels();                // normalization.cpp
void register_random_kernels();              // random.cpp
void register_sequence_kernels();            // sequence.cpp
void register_elementwise_binary_kernels();  // elementwise_binary.cpp
void register_elementwise_unary_kernels();   // elementwise_unary.cpp

}  // namespace dp::backend::cpu

namespace dp::backend {

void register_cpu_kernels() {
  // Host kernels for every op; 16-bit floats only where PyTorch's CPU kernels take them (the ops
  // check those per op).
  set_capabilities(DeviceType::CPU, Capabilities{.kernels = true, .half_nn = false});
  cpu::register_cross_entropy_kernels();
  cpu::register_nll_loss_kernels();
  cpu::register_pointwise_loss_kernels();
  cpu::register_optim_kernels();
  cpu::register_core_kernels();
  cpu::register_attention_kernels();
  cpu::register_comm_kernels();
  cpu::register_index_kernels();
  cpu::register_linalg_kernels();
  cpu::register_rnn_kernels();
  cpu::register_norm_kernels();
  cpu::register_random_kernels();
  cpu::register_sequence_kernels();
  cpu::register_elementwise_binary_kernels();
  cpu::register_elementwise_unary_kernels();
}

}  // namespace dp::backend
