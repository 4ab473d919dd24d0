#include "backend/cpu/conv_kernels.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "backend/cpu/blas.h"

namespace dp::backend::cpu {
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

// ---- bfloat16 staging
//
// bfloat16 computes as PyTorch's CPU convolution does: float32 arithmetic, one rounding per
// result. The kernels below run in float32 on bfloat16 tensors by staging one image at a time: its
// input (and grad_output) is widened into a float32 buffer that stays in cache for the im2col and
// GEMMs that read it, and its results are computed into a float32 buffer and rounded once into
// the bfloat16 output. The weight, and the weight / bias gradients summed over the batch, are
// small and converted once per call. So the GEMMs run at float32 speed, no element is converted
// inside them, and no whole-tensor float32 copy goes through memory. The conversion loops are
// plain loops over contiguous data that the compiler vectorises: a bfloat16 is the upper half of a
// float32, and rounding to nearest even is an integer add and shift (NaN stays NaN, as in
// BFloat16's constructor).
void widen_loop(float* dst, const BFloat16* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i].x) << 16);
}
void round_loop(BFloat16* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(src[i]);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    dst[i].x = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
  }
}

template <typename T>
T* scratch(Tensor& holder, int64_t n, const Tensor& like) {
  holder = make_empty({std::max<int64_t>(n, 1)}, dtype_of<T>, like.device());
  return static_cast<T*>(holder.data_ptr());
}

// S: the tensors' element type; T: the arithmetic type (float for bfloat16, else S).
template <typename S>
using conv_compute_t = std::conditional_t<std::is_same_v<S, BFloat16>, float, S>;

// A read-only view of n elements as T: the tensor itself when S is T, else a widened copy in
// `holder` (nullptr for an undefined tensor).
template <typename T, typename S>
const T* read_as(const Tensor& t, Tensor& holder) {
  if (!t.defined()) return nullptr;
  if constexpr (std::is_same_v<S, T>) {
    return static_cast<const T*>(t.data_ptr());
  } else {
    T* p = scratch<T>(holder, t.numel(), t);
    widen_loop(p, static_cast<const S*>(t.data_ptr()), t.numel());
    return p;
  }
}

template <typename S>
void forward_impl(const Tensor& out_t, const Tensor& x_t, const Tensor& w_t, const Tensor& b_t, const Conv2dGeometry& g) {
  using T = conv_compute_t<S>;
  constexpr bool staged = !std::is_same_v<S, T>;
  const int64_t Cg = g.group_in(), OCg = g.group_out(), Kg = g.group_k();
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  const S* x = static_cast<const S*>(x_t.data_ptr());
  S* out = static_cast<S*>(out_t.data_ptr());
  Tensor w_hold, b_hold, x_stage, out_stage;
  const T* w = read_as<T, S>(w_t, w_hold);
  const T* b = read_as<T, S>(b_t, b_hold);
  T* xs = staged ? scratch<T>(x_stage, g.C * HW, out_t) : nullptr;
  T* os = staged ? scratch<T>(out_stage, g.OC * P, out_t) : nullptr;
  const bool pointwise = g.is_pointwise();
  Tensor buf;
  T* cols = pointwise || Kg == 0 ? nullptr : scratch<T>(buf, Kg * P, out_t);
  for (int64_t n = 0; n < g.N; ++n) {
    const T* xn;
    T* on;
    if constexpr (staged) {
      widen_loop(xs, x + n * g.C * HW, g.C * HW);
      xn = xs;
      on = os;
    } else {
      xn = x + n * g.C * HW;
      on = out + n * g.OC * P;
    }
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = xn + grp * Cg * HW;
      T* og = on + grp * OCg * P;
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
    if constexpr (staged) round_loop(out + n * g.OC * P, os, g.OC * P);
  }
}

template <typename S>
void backward_impl(const Tensor& gx_t, const Tensor& gw_t, const Tensor& gb_t, const Tensor& x_t, const Tensor& w_t, const Tensor& go_t,
                   const Conv2dGeometry& g) {
  using T = conv_compute_t<S>;
  constexpr bool staged = !std::is_same_v<S, T>;
  const int64_t Cg = g.group_in(), OCg = g.group_out(), Kg = g.group_k();
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  const S* go_s = static_cast<const S*>(go_t.data_ptr());
  S* gx_s = gx_t.defined() ? static_cast<S*>(gx_t.data_ptr()) : nullptr;
  const S* x_s = gw_t.defined() ? static_cast<const S*>(x_t.data_ptr()) : nullptr;
  Tensor w_hold, go_stage, x_stage, gx_stage, gw_stage, gb_stage;
  const T* w = gx_s ? read_as<T, S>(w_t, w_hold) : nullptr;
  // Staged: one image of grad_output, input and grad_input at a time, and the batch sums of the
  // weight and bias gradients, in float32 (rounded into the outputs at the end).
  T* gos = staged ? scratch<T>(go_stage, g.OC * P, go_t) : nullptr;
  T* xs = staged && x_s ? scratch<T>(x_stage, g.C * HW, go_t) : nullptr;
  T* gxs = staged && gx_s ? scratch<T>(gx_stage, g.C * HW, go_t) : nullptr;
  T* gw = !gw_t.defined() ? nullptr : staged ? scratch<T>(gw_stage, g.OC * Kg, go_t) : static_cast<T*>(gw_t.data_ptr());
  T* gb = !gb_t.defined() ? nullptr : staged ? scratch<T>(gb_stage, g.OC, go_t) : static_cast<T*>(gb_t.data_ptr());
  const bool pointwise = g.is_pointwise();

  // Sums start from zero so that N == 0 (and empty groups) give zero gradients.
  if (gw) std::fill(gw, gw + g.OC * Kg, T(0));
  if (gb) std::fill(gb, gb + g.OC, T(0));

  const bool work = OCg > 0 && Kg > 0;
  Tensor cols_buf, dcols_buf, ones_buf;
  T* cols = !pointwise && work && gw ? scratch<T>(cols_buf, Kg * P, go_t) : nullptr;
  T* dcols = !pointwise && work && gx_s ? scratch<T>(dcols_buf, Kg * P, go_t) : nullptr;
  if (dcols) std::memset(dcols, 0, static_cast<size_t>(Kg * P) * sizeof(T));  // col2im keeps it zero
  T* ones = nullptr;
  if (gb) {
    ones = scratch<T>(ones_buf, P, go_t);
    std::fill(ones, ones + P, T(1));
  }
  for (int64_t n = 0; n < g.N; ++n) {
    const T* gon;
    const T* xn = nullptr;
    T* gxn = nullptr;
    if constexpr (staged) {
      widen_loop(gos, go_s + n * g.OC * P, g.OC * P);
      gon = gos;
      if (xs) {
        widen_loop(xs, x_s + n * g.C * HW, g.C * HW);
        xn = xs;
      }
      gxn = gxs;
    } else {
      gon = go_s + n * g.OC * P;
      if (x_s) xn = x_s + n * g.C * HW;
      if (gx_s) gxn = gx_s + n * g.C * HW;
    }
    // With OCg > 0 a pointwise GEMM writes all of the image's gx, else col2im adds into it (zeroed
    // just before, so that the image's gradient stays in cache between the two).
    if (gxn && OCg == 0) std::fill(gxn, gxn + g.C * HW, T(0));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* gog = gon + grp * OCg * P;
      if (gb) blas::gemm(false, false, OCg, 1, P, T(1), gog, P, ones, 1, T(1), gb + grp * OCg, 1);
      if (!work) continue;
      if (gw) {
        const T* xg = xn + grp * Cg * HW;
        const T* cg = xg;
        if (!pointwise) {
          im2col(xg, Cg, g, cols);
          cg = cols;
        }
        blas::gemm(false, true, OCg, Kg, P, T(1), gog, P, cg, P, T(1), gw + grp * OCg * Kg, Kg);
      }
      if (gxn) {
        T* gxg = gxn + grp * Cg * HW;
        if (pointwise) {
          blas::gemm(true, false, Kg, P, OCg, T(1), w + grp * OCg * Kg, Kg, gog, P, T(0), gxg, P);
        } else {
          std::memset(gxg, 0, static_cast<size_t>(Cg * HW) * sizeof(T));
          blas::gemm(true, false, Kg, P, OCg, T(1), w + grp * OCg * Kg, Kg, gog, P, T(1), dcols, P);
          col2im(dcols, Cg, g, gxg);
        }
      }
    }
    if constexpr (staged) {
      if (gx_s) round_loop(gx_s + n * g.C * HW, gxs, g.C * HW);
    }
  }
  if constexpr (staged) {
    if (gw) round_loop(static_cast<S*>(gw_t.data_ptr()), gw, g.OC * Kg);
    if (gb) round_loop(static_cast<S*>(gb_t.data_ptr()), gb, g.OC);
  }
}

void check_dtype(const char* op, DType dt) {
  DP_CHECK(dt == kFloat32 || dt == kFloat64 || dt == kBFloat16, DTypeError, op, ": unsupported dtype ", dtype_name(dt),
           " (supported on the CPU: float32, float64, bfloat16)");
}

}  // namespace

void conv2d_forward_kernel(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  check_dtype("conv2d", input.dtype());
  if (input.dtype() == kFloat32)
    forward_impl<float>(out, input, weight, bias, g);
  else if (input.dtype() == kFloat64)
    forward_impl<double>(out, input, weight, bias, g);
  else
    forward_impl<BFloat16>(out, input, weight, bias, g);
}

void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input, const Tensor& weight,
                            const Tensor& grad_output, const Conv2dGeometry& g) {
  check_dtype("conv2d backward", grad_output.dtype());
  if (grad_output.dtype() == kFloat32)
    backward_impl<float>(grad_input, grad_weight, grad_bias, input, weight, grad_output, g);
  else if (grad_output.dtype() == kFloat64)
    backward_impl<double>(grad_input, grad_weight, grad_bias, input, weight, grad_output, g);
  else
    backward_impl<BFloat16>(grad_input, grad_weight, grad_bias, input, weight, grad_output, g);
}

}  // namespace dp::backend::cpu
