#pragma once
// The kernel interface of the fused (flash) scaled-dot-product attention (dp::scaled_dot_product_attention,
// src/ops/attention.cpp): forward and backward over `batch` independent attention problems, tiled
// with an online softmax, never holding an L x S matrix. Implemented by the CPU backend
// (src/backend/cpu/attention.cpp); CUDA tensors take the op's exact path, composed of other ops.
//
// Problem b reads Q_b [L, E], K_b [S, E], V_b [S, Ev] and writes O_b [L, Ev] and the log-sum-exp
// of its softmax rows lse_b [L]:
//   O_b = softmax(scale * Q_b K_b^T + bias_b) V_b
// bias_b: the mask's values (float), -inf where a bool mask is false, -inf above the diagonal
// (key j > query i) when causal. A fully masked row gives O = 0 and lse = +inf.
#include <cstdint>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// A matrix operand as the kernels read (or write) it: problem b's matrix starts `offsets[b]`
// elements after t's data_ptr(); consecutive rows are `row_stride` elements apart; columns are
// contiguous (stride 1). Undefined `t`: the operand is absent (not needed, or not computed).
struct AttnOperand {
  Tensor t;
  std::vector<int64_t> offsets;
  int64_t row_stride = 0;
  bool defined() const { return t.defined(); }
};

// The attention mask (bool: true = may attend; float32 or float64: added to the scores), read in
// place by strides: element (i, j) of problem b is at offsets[b] + i * row_stride + j * col_stride
// (a stride is 0 where the mask broadcasts). Undefined `t`: no mask.
struct AttnMask {
  Tensor t;
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;
  bool defined() const { return t.defined(); }
};

struct AttentionShape {
  int64_t batch = 0;  // problems
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  double scale = 1.0;
  bool causal = false;  // top-left aligned: query i sees keys 0 .. i
  // Query and key tile rows; 0: the backend's choice (tests force small tiles to cover the tile
  // edges on small inputs).
  int64_t block_q = 0, block_k = 0;
};

// q, k, v (read) and out (written) are float32 or float64, all one dtype; lse [batch, L]
// contiguous, the same dtype.
struct AttentionForwardArgs {
  AttentionShape shape;
  AttnOperand q, k, v, out;
  AttnMask mask;
  Tensor lse;
};

// The saved forward (q, k, v, out, lse, mask) and the incoming gradient dout [L, Ev] per problem.
// Writes the defined ones of dq [L, E], dk [S, E], dv [S, Ev] per problem (every problem its own
// matrices: the op sums them where operands were broadcast or heads shared) and of dmask, the
// gradient of the scores ([batch, L, S] contiguous, the compute dtype), for a float mask that
// requires grad.
struct AttentionBackwardArgs {
  AttentionShape shape;
  AttnOperand q, k, v, out, dout;
  AttnMask mask;
  Tensor lse;
  AttnOperand dq, dk, dv;
  Tensor dmask;
};

using AttentionForward = void(const AttentionForwardArgs& a);
using AttentionBackward = void(const AttentionBackwardArgs& a);

DP_DECLARE_KERNEL(attention_forward_kernel, AttentionForward);
DP_DECLARE_KERNEL(attention_backward_kernel, AttentionBackward);

}  // namespace dp::backend
