#pragma once
// Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention, PyTorch 2.x
// semantics), with a fused memory-efficient CPU kernel.
#include <optional>
#include "dp/core/tensor.h"

namespace dp {

// softmax(scale * q k^T + bias) v over the last two dims: q [N..., Hq, L, E], k [N..., H, S, E],
// v [N..., H, S, Ev] -> [N..., Hq, L, Ev]; any number of leading dims (2-D q, k, v too), which
// broadcast as torch.matmul's do.
//  - attn_mask broadcasts to [N..., Hq, L, S]: bool (true: may attend; false puts -inf) or floating
//    (float32 or q's dtype; added to the scores, differentiable).
//  - is_causal: key j is hidden from query i when j > i (top-left aligned, torch.tril); an error
//    together with attn_mask.
//  - dropout_p > 0 drops attention weights whenever given (no training flag: pass
//    `training ? p : 0`), with the device's default generator (dp::manual_seed reproduces it).
//  - scale defaults to 1/sqrt(E).
//  - enable_gqa: key and value heads are repeated (repeat_interleave on dim -3) to Hq, which
//    their head counts must divide.
//  - a row whose keys are all masked gives zeros (and zero gradients), not NaN.
// On the CPU, float32, float64 and bfloat16/float16 (computed in float32) inputs without dropout
// run one fused kernel (tiled, online softmax: memory O(L + S) per head besides the inputs and
// output, no L x S matrix, one autograd node); dropout, CUDA tensors and double backward take the
// exact path, composed of differentiable ops. Both give the same values to rounding.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                                    double dropout_p = 0.0, bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false);

// The implementations of scaled_dot_product_attention (at::SDPBackend's names): `math` is the exact,
// materialising path composed of ops; `flash_attention` the fused CPU kernel.
enum class SDPBackend { math, flash_attention };

// While alive, restricts the calling thread's scaled_dot_product_attention calls to one
// implementation (torch.nn.attention.sdpa_kernel). A call the chosen implementation cannot run
// (flash_attention with dropout or on a CUDA tensor) is a NotImplementedError naming the reason.
// Guards nest; each restores the previous choice.
class SDPAKernelGuard {
 public:
  explicit SDPAKernelGuard(SDPBackend backend);
  ~SDPAKernelGuard();
  SDPAKernelGuard(const SDPAKernelGuard&) = delete;
  SDPAKernelGuard& operator=(const SDPAKernelGuard&) = delete;

 private:
  int previous_;
};

}  // namespace dp
