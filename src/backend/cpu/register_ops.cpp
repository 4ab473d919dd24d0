// The CPU backend's kernels of the op families whose kernels live in this folder (index, matrix
// products, attention, recurrent layers, normalization, random fills, sequence ops and transfers),
// and its capabilities.
#include "backend/capabilities.h"

namespace dp::backend {

void register_cpu_attention_kernels();  // attention.cpp
void register_cpu_comm_kernels();       // comm.cpp
void register_cpu_index_kernels();      // index.cpp
void register_cpu_linalg_kernels();     // linalg.cpp
void register_cpu_rnn_kernels();        // rnn_layer.cpp
void register_cpu_norm_kernels();       // normalization.cpp
void register_cpu_random_kernels();     // random.cpp
void register_cpu_sequence_kernels();   // sequence.cpp

void register_cpu_ops_kernels() {
  // Host kernels for every op; 16-bit floats only where PyTorch's CPU kernels take them (the ops
  // check those per op).
  set_capabilities(DeviceType::CPU, Capabilities{.kernels = true, .half_nn = false});
  register_cpu_attention_kernels();
  register_cpu_comm_kernels();
  register_cpu_index_kernels();
  register_cpu_linalg_kernels();
  register_cpu_norm_kernels();
  register_cpu_random_kernels();
  register_cpu_rnn_kernels();
  register_cpu_sequence_kernels();
}

}  // namespace dp::backend
