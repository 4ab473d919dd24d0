// Which of dparallel's ops autocast casts, and to what: PyTorch 1.13's lists
// (aten/src/ATen/autocast_mode.cpp), restricted to the ops dparallel has. The CPU column was
// checked against torch 1.13 under torch.autocast("cpu", torch.bfloat16) (tests/golden/gen_autocast.py
// records every op's output dtypes; tests/amp/test_autocast_dtypes.cpp compares).
//
// CUDA notes: PyTorch's fp32_set_opt_dtype ops (softmax, log_softmax, sum, prod, cumsum, ...) run
// in float32 by passing dtype=float32 when their first argument is eligible; casting that argument
// to float32 gives the same result and the same gradient dtype, so they are Fp32 here (sum with an
// explicit dtype is left alone, as in PyTorch). cross_entropy is one op in dparallel but
// log_softmax (float32) + nll_loss (float32) in PyTorch, so it is Fp32 on CUDA. binary_cross_entropy
// is banned under CUDA autocast, as in PyTorch.
#include "amp/autocast_ops.h"

namespace dp::autocast::detail {

Policy policy(Op op, DeviceType device) {
  const bool cuda = device == DeviceType::CUDA;
  switch (op) {
    case Op::linear:
    case Op::mm:
    case Op::matmul:
    case Op::addmm:
    case Op::bmm:
    case Op::baddbmm:
    case Op::conv2d:
      return Policy::LowerPrecision;
    case Op::lstm_cell:  // CUDA's list only
      return cuda ? Policy::LowerPrecision : Policy::None;
    case Op::mse_loss:
    case Op::l1_loss:
    case Op::nll_loss:
    case Op::cross_entropy:
    case Op::binary_cross_entropy_with_logits:
      return Policy::Fp32;
    case Op::binary_cross_entropy:
      return cuda ? Policy::Banned : Policy::Fp32;
    case Op::cat:
    case Op::stack:  // CPU's promote list only
      return cuda ? Policy::None : Policy::Promote;
    case Op::dot:  // CUDA's promote list only (on the CPU dot is untouched)
      return cuda ? Policy::Promote : Policy::None;
    case Op::exp:
    case Op::log:
    case Op::pow:
    case Op::reciprocal:
    case Op::rsqrt:
    case Op::softplus:
    case Op::layer_norm:
    case Op::logsumexp:
    case Op::softmax:
    case Op::log_softmax:
    case Op::sum:
    case Op::norm:  // CUDA's float32 lists only (norm: fp32_append_dtype)
      return cuda ? Policy::Fp32 : Policy::None;
  }
  return Policy::None;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::linear:
      return "linear";
    case Op::mm:
      return "mm";
    case Op::matmul:
      return "matmul";
    case Op::addmm:
      return "addmm";
    case Op::bmm:
      return "bmm";
    case Op::baddbmm:
      return "baddbmm";
    case Op::conv2d:
      return "conv2d";
    case Op::lstm_cell:
      return "lstm_cell";
    case Op::dot:
      return "dot";
    case Op::mse_loss:
      return "mse_loss";
    case Op::l1_loss:
      return "l1_loss";
    case Op::nll_loss:
      return "nll_loss";
    case Op::cross_entropy:
      return "cross_entropy";
    case Op::binary_cross_entropy:
      return "binary_cross_entropy";
    case Op::binary_cross_entropy_with_logits:
      return "binary_cross_entropy_with_logits";
    case Op::cat:
      return "cat";
    case Op::stack:
      return "stack";
    case Op::exp:
      return "exp";
    case Op::log:
      return "log";
    case Op::pow:
      return "pow";
    case Op::reciprocal:
      return "reciprocal";
    case Op::rsqrt:
      return "rsqrt";
    case Op::softplus:
      return "softplus";
    case Op::layer_norm:
      return "layer_norm";
    case Op::logsumexp:
      return "logsumexp";
    case Op::softmax:
      return "softmax";
    case Op::log_softmax:
      return "log_softmax";
    case Op::sum:
      return "sum";
    case Op::norm:
      return "norm";
  }
  return "?";
}

}  // namespace dp::autocast::detail
