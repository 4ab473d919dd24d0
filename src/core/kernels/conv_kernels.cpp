#include "core/kernels/conv_kernels.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/blas.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/loops.h"
#include "core/kernels/reduce.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"

namespace dp::kernels {
namespace {

// The output columns ow whose input column iw0 + ow * sw lies inside [0, W): [lo, hi).
struct ColRange {
  int64_t lo, hi;
};
ColRange valid_cols(int64_t iw0, int64_t sw, int64_t W, int64_t OW) {
  int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
  int64_t hi = W - 1 - iw0 < 0 ? 0 : (W - 1 - iw0) / sw + 1;
  lo = std::min(lo, OW);
  hi = std::max(lo, std::min(hi, OW));
  return {lo, hi};
}

// True when a kernel offset (kh, kw) maps output plane row-major positions to input positions by
// one constant shift: stride 1 and OW == W (a "same" convolution). Then a whole column-matrix row
// is one contiguous run of the input plane, except the columns that wrap around a row edge.
bool plane_shift(const Conv2dGeometry& g) { return g.sh == 1 && g.sw == 1 && g.OW == g.W; }

// Zeroes columns [0, cols.lo) and [cols.hi, OW) of rows [rows.lo, rows.hi) of a row-major
// matrix: a few elements per row, written column by column (strided) so that the compiler does
// not turn each row's run into a memset call.
template <typename T>
void zero_columns(T* m, int64_t OW, ColRange rows, ColRange cols) {
  for (int64_t ow = 0; ow < cols.lo; ++ow)
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) m[oh * OW + ow] = T(0);
  for (int64_t ow = cols.hi; ow < OW; ++ow)
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) m[oh * OW + ow] = T(0);
}

// cols[(c*KH + kh)*KW + kw][oh*OW + ow] = x[c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw] (0 outside).
template <typename T>
void im2col(const T* x, int64_t channels, const Conv2dGeometry& g, T* cols) {
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW, P = OH * OW;
  const bool shift = plane_shift(g);
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * H * W;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      // Output rows whose input row is inside the plane: [oh_lo, oh_hi).
      const int64_t ih0 = kh * g.dh - g.ph;
      const ColRange rows = valid_cols(ih0, g.sh, H, OH);
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        T* row = cols + ((c * g.KH + kh) * g.KW + kw) * P;
        const int64_t iw0 = kw * g.dw - g.pw;
        const ColRange r = valid_cols(iw0, g.sw, W, OW);
        std::fill(row, row + rows.lo * OW, T(0));
        std::fill(row + rows.hi * OW, row + P, T(0));
        if (rows.lo == rows.hi) continue;
        if (r.lo == r.hi) {  // every column reads padding
          std::fill(row + rows.lo * OW, row + rows.hi * OW, T(0));
          continue;
        }
        if (shift) {
          // One copy of the shifted plane, then zero the columns that wrapped into a neighbour row.
          const int64_t first = rows.lo * OW + r.lo, last = (rows.hi - 1) * OW + r.hi;
          const int64_t off = ih0 * W + iw0;  // input index = output position + off
          std::memcpy(row + first, xc + (first + off), static_cast<size_t>(last - first) * sizeof(T));
          zero_columns(row, OW, rows, r);
          continue;
        }
        zero_columns(row, OW, rows, r);
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          T* dst = row + oh * OW;
          const T* src = xc + (oh * g.sh + ih0) * W;
          if (g.sw == 1) {
            std::memcpy(dst + r.lo, src + (iw0 + r.lo), static_cast<size_t>(r.hi - r.lo) * sizeof(T));
          } else {
            for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] = src[iw0 + ow * g.sw];
          }
        }
      }
    }
  }
}

// The adjoint of im2col: gx[c][ih][iw] += every column entry read from (c, ih, iw). gx must be
// initialised by the caller. The columns are consumed: they are all zero on return, so the next
// image's GEMM can accumulate into them (beta = 1) and OpenBLAS skips its separate zeroing pass.
template <typename T>
void col2im(T* cols, int64_t channels, const Conv2dGeometry& g, T* gx) {
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW, P = OH * OW;
  const bool shift = plane_shift(g);
  for (int64_t c = 0; c < channels; ++c) {
    T* gc = gx + c * H * W;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t ih0 = kh * g.dh - g.ph;
      const ColRange rows = valid_cols(ih0, g.sh, H, OH);
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        T* row = cols + ((c * g.KH + kh) * g.KW + kw) * P;
        const int64_t iw0 = kw * g.dw - g.pw;
        const ColRange r = valid_cols(iw0, g.sw, W, OW);
        if (rows.lo < rows.hi && r.lo < r.hi) {
          if (shift) {
            // One contiguous run over the shifted plane. The entries of wrapped columns belong to
            // padding positions (their gradient is dropped); zeroing them first makes them add
            // nothing to the neighbour row they land on.
            zero_columns(row, OW, rows, r);
            const int64_t first = rows.lo * OW + r.lo, last = (rows.hi - 1) * OW + r.hi, off = ih0 * W + iw0;
            T* dst = gc + (first + off);
            const T* src = row + first;
            for (int64_t p = 0; p < last - first; ++p) dst[p] += src[p];
          } else {
            for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
              const T* src = row + oh * OW;
              T* dst = gc + (oh * g.sh + ih0) * W;
              if (g.sw == 1) {
                T* d = dst + (iw0 + r.lo);
                const T* s = src + r.lo;
                for (int64_t i = 0; i < r.hi - r.lo; ++i) d[i] += s[i];
              } else {
                for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[iw0 + ow * g.sw] += src[ow];
              }
            }
          }
        }
        std::memset(row, 0, static_cast<size_t>(P) * sizeof(T));  // still in L1
      }
    }
  }
}

template <typename T>
T* scratch(Tensor& holder, int64_t n, const Tensor& like) {
  holder = make_empty({std::max<int64_t>(n, 1)}, like.dtype(), like.device());
  return static_cast<T*>(holder.data_ptr());
}

template <typename T>
void forward_impl(const Tensor& out_t, const Tensor& x_t, const Tensor& w_t, const Tensor& b_t, const Conv2dGeometry& g) {
  const int64_t Cg = g.group_in(), OCg = g.group_out(), Kg = g.group_k();
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  const T* x = static_cast<const T*>(x_t.data_ptr());
  const T* w = static_cast<const T*>(w_t.data_ptr());
  const T* b = b_t.defined() ? static_cast<const T*>(b_t.data_ptr()) : nullptr;
  T* out = static_cast<T*>(out_t.data_ptr());
  const bool pointwise = g.is_pointwise();
  Tensor buf;
  T* cols = pointwise || Kg == 0 ? nullptr : scratch<T>(buf, Kg * P, out_t);
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = x + (n * g.C + grp * Cg) * HW;
      T* og = out + (n * g.OC + grp * OCg) * P;
      if (b) {
        for (int64_t oc = 0; oc < OCg; ++oc) std::fill(og + oc * P, og + (oc + 1) * P, b[grp * OCg + oc]);
      } else if (Kg == 0) {
        std::fill(og, og + OCg * P, T(0));
      }
      if (Kg == 0) continue;
      const T* cg = xg;
      if (!pointwise) {
        im2col(xg, Cg, g, cols);
        cg = cols;
      }
      blas::gemm(false, false, OCg, P, Kg, T(1), w + grp * OCg * Kg, Kg, cg, P, b ? T(1) : T(0), og, P);
    }
  }
}

template <typename T>
void backward_impl(const Tensor& gx_t, const Tensor& gw_t, const Tensor& gb_t, const Tensor& x_t, const Tensor& w_t, const Tensor& go_t,
                   const Conv2dGeometry& g) {
  const int64_t Cg = g.group_in(), OCg = g.group_out(), Kg = g.group_k();
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  const T* go = static_cast<const T*>(go_t.data_ptr());
  T* gx = gx_t.defined() ? static_cast<T*>(gx_t.data_ptr()) : nullptr;
  T* gw = gw_t.defined() ? static_cast<T*>(gw_t.data_ptr()) : nullptr;
  T* gb = gb_t.defined() ? static_cast<T*>(gb_t.data_ptr()) : nullptr;
  const T* x = gw ? static_cast<const T*>(x_t.data_ptr()) : nullptr;
  const T* w = gx ? static_cast<const T*>(w_t.data_ptr()) : nullptr;
  const bool pointwise = g.is_pointwise();

  // Sums start from zero so that N == 0 (and empty groups) give zero gradients.
  if (gw) std::fill(gw, gw + g.OC * Kg, T(0));
  if (gb) std::fill(gb, gb + g.OC, T(0));
  // With OCg > 0 a pointwise GEMM writes all of gx, else col2im adds into it per image (zeroed
  // just before, so that image's gradient stays in cache between the two).
  if (gx && OCg == 0) std::fill(gx, gx + g.N * g.C * HW, T(0));

  const bool work = OCg > 0 && Kg > 0;
  Tensor cols_buf, dcols_buf, ones_buf;
  T* cols = !pointwise && work && gw ? scratch<T>(cols_buf, Kg * P, go_t) : nullptr;
  T* dcols = !pointwise && work && gx ? scratch<T>(dcols_buf, Kg * P, go_t) : nullptr;
  if (dcols) std::memset(dcols, 0, static_cast<size_t>(Kg * P) * sizeof(T));  // col2im keeps it zero
  T* ones = nullptr;
  if (gb) {
    ones = scratch<T>(ones_buf, P, go_t);
    std::fill(ones, ones + P, T(1));
  }
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* gog = go + (n * g.OC + grp * OCg) * P;
      if (gb) blas::gemm(false, false, OCg, 1, P, T(1), gog, P, ones, 1, T(1), gb + grp * OCg, 1);
      if (!work) continue;
      if (gw) {
        const T* xg = x + (n * g.C + grp * Cg) * HW;
        const T* cg = xg;
        if (!pointwise) {
          im2col(xg, Cg, g, cols);
          cg = cols;
        }
        blas::gemm(false, true, OCg, Kg, P, T(1), gog, P, cg, P, T(1), gw + grp * OCg * Kg, Kg);
      }
      if (gx) {
        T* gxg = gx + (n * g.C + grp * Cg) * HW;
        if (pointwise) {
          blas::gemm(true, false, Kg, P, OCg, T(1), w + grp * OCg * Kg, Kg, gog, P, T(0), gxg, P);
        } else {
          std::memset(gxg, 0, static_cast<size_t>(Cg * HW) * sizeof(T));
          blas::gemm(true, false, Kg, P, OCg, T(1), w + grp * OCg * Kg, Kg, gog, P, T(1), dcols, P);
          col2im(dcols, Cg, g, gxg);
        }
      }
    }
  }
}

void check_dtype(const char* op, DType dt) {
  DP_CHECK(dt == kFloat32 || dt == kFloat64 || dt == kBFloat16, DTypeError, op, ": unsupported dtype ", dtype_name(dt),
           " (supported on the CPU: float32, float64, bfloat16)");
}

// bfloat16 on the CPU computes as PyTorch's does: float32 arithmetic, one rounding per result.
// Each operand is widened once into a float32 workspace, the float32 kernel runs on those, and
// each result is rounded once into its bfloat16 tensor. The two conversion passes are linear in
// the tensor sizes; the GEMMs they feed are not, so they stay a small part of the cost (and the
// GEMMs run at float32 speed instead of converting in their inner loops).
Tensor widen(const Tensor& t) { return t.defined() ? convert_nograd(t, kFloat32) : Tensor(); }
Tensor f32_workspace(const Tensor& t) { return t.defined() ? make_empty(t.sizes(), kFloat32, t.device()) : Tensor(); }
void round_into(const Tensor& dst, const Tensor& src) {
  if (dst.defined()) copy_kernel(dst, src);
}

}  // namespace

void conv2d_forward_kernel(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  DP_ROUTE_CUDA(out, conv2d_forward_kernel(out, input, weight, bias, g));
  check_dtype("conv2d", input.dtype());
  if (input.dtype() == kFloat32) {
    forward_impl<float>(out, input, weight, bias, g);
  } else if (input.dtype() == kFloat64) {
    forward_impl<double>(out, input, weight, bias, g);
  } else {
    Tensor out32 = f32_workspace(out);
    forward_impl<float>(out32, widen(input), widen(weight), widen(bias), g);
    round_into(out, out32);
  }
}

void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input,
                            const Tensor& weight, const Tensor& grad_output, const Conv2dGeometry& g) {
  DP_ROUTE_CUDA(grad_output, conv2d_backward_kernel(grad_input, grad_weight, grad_bias, input, weight, grad_output, g));
  check_dtype("conv2d backward", grad_output.dtype());
  if (grad_output.dtype() == kFloat32) {
    backward_impl<float>(grad_input, grad_weight, grad_bias, input, weight, grad_output, g);
  } else if (grad_output.dtype() == kFloat64) {
    backward_impl<double>(grad_input, grad_weight, grad_bias, input, weight, grad_output, g);
  } else {
    // input is read only for grad_weight, weight only for grad_input (either may be undefined).
    Tensor gx32 = f32_workspace(grad_input), gw32 = f32_workspace(grad_weight), gb32 = f32_workspace(grad_bias);
    backward_impl<float>(gx32, gw32, gb32, grad_weight.defined() ? widen(input) : Tensor(), grad_input.defined() ? widen(weight) : Tensor(),
                         widen(grad_output), g);
    round_into(grad_input, gx32);
    round_into(grad_weight, gw32);
    round_into(grad_bias, gb32);
  }
}

}  // namespace dp::kernels
