// The CPU backend's kernels of the op families whose kernels live in this folder (index, matrix
// products, attention, recurrent layers, normalization, random fills, sequence ops and transfers),
// and its capabilities.
#include "backend/capabilities.h"

namespace dp::backend::cpu {

void register_attention_kernels();  // attention.cpp
void register_comm_kernels();       // comm.cpp
void register_index_kernels();      // index.cpp
void register_linalg_kernels();     // linalg.cpp
void register_rnn_kernels();        // rnn_layer.cpp
void register_norm_kernels();       // normalization.cpp
void register_random_kernels();     // random.cpp
void register_sequence_kernels();   // sequence.cpp

void register_ops_kernels() {
  // Host kernels for every op; 16-bit floats only where PyTorch's CPU kernels take them (the ops
  // check those per op).
  set_capabilities(DeviceType::CPU, Capabilities{.kernels = true, .half_nn = false});
  register_attention_kernels();
  register_comm_kernels();
  register_index_kernels();
  register_linalg_kernels();
  register_norm_kernels();
  register_random_kernels();
  register_rnn_kernels();
  register_sequence_kernels();
}

}  // namespace dp::backend::cpu
