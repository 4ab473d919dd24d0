#include "backend/cpu/pool_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/dispatch.h"
#include "backend/cpu/reduce.h"
#include "dp/core/errors.h"

namespace dp::backend::cpu {
namespace {

template <typename F>
void dispatch(DType dt, const char* op, F&& f) {
  if (dt == kFloat32)
    f.template operator()<float>();
  else if (dt == kFloat64)
    f.template operator()<double>();
  else if (dt == kBFloat16)
    f.template operator()<BFloat16>();
  else
    throw DTypeError(detail::str(op, ": unsupported dtype ", dtype_name(dt), " (supported on the CPU: float32, float64, bfloat16)"));
}

// Every kernel computes in A = compute_t<T>: the element type itself for float32 / float64, float32
// for bfloat16 (sums and quotients in float32, each result rounded once; a maximum is an element,
// so it converts back exactly).

// A maximum is one of the elements (or -inf), so it converts back to T exactly: for bfloat16 the
// upper half of its float32 bits, no rounding step needed.
template <typename T, typename A>
inline T exact_back(A v) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16::from_bits(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
  else
    return v;
}

template <typename A>
inline bool takes_max(A val, A maxval) {
  return val > maxval || std::isnan(val);
}

// The backward passes add several window contributions into one input element (overlapping
// windows, or a window's maximum shared with its neighbour's). float32 / float64 gradients are
// accumulated in place; a 16-bit gradient is accumulated plane by plane in a float32 buffer and
// rounded once. plane(p, acc) adds plane p's contributions into acc[H * W], zeroed beforehand.
template <typename T, typename F>
void accumulate_planes(T* gx, int64_t planes, int64_t HW, const F& plane) {
  using A = compute_t<T>;
  if constexpr (std::is_same_v<A, T>) {
    std::fill(gx, gx + planes * HW, T(0));
    for (int64_t p = 0; p < planes; ++p) plane(p, gx + p * HW);
  } else {
    std::vector<A> acc(static_cast<size_t>(HW));
    for (int64_t p = 0; p < planes; ++p) {
      std::fill(acc.begin(), acc.end(), A(0));
      plane(p, acc.data());
      T* gp = gx + p * HW;
      for (int64_t i = 0; i < HW; ++i) gp[i] = convert<T>(acc[static_cast<size_t>(i)]);
    }
  }
}

// The 2x2, stride 2, unpadded window (the common CNN case): no clipping, fixed visiting order.
template <typename T>
void max_pool_2x2(const T* x, T* out, int64_t* ind, const Pool2dGeometry& g) {
  using A = compute_t<T>;
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    T* op = out + p * OH * OW;
    int64_t* ip = ind + p * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t base = 2 * oh * W;
      const T* r0 = xp + base;
      const T* r1 = r0 + W;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw = 2 * ow;
        A m = convert<A>(r0[iw]);
        int64_t mi = base + iw;
        // (The generic loop starts from -inf at this same index, which the first element always
        // matches.) Same visiting order and rule after it.
        const A v1 = convert<A>(r0[iw + 1]), v2 = convert<A>(r1[iw]), v3 = convert<A>(r1[iw + 1]);
        // Selects rather than branches: on real data which element wins is unpredictable.
        const bool t1 = takes_max(v1, m);
        m = t1 ? v1 : m;
        mi = t1 ? base + iw + 1 : mi;
        const bool t2 = takes_max(v2, m);
        m = t2 ? v2 : m;
        mi = t2 ? base + W + iw : mi;
        const bool t3 = takes_max(v3, m);
        m = t3 ? v3 : m;
        mi = t3 ? base + W + iw + 1 : mi;
        op[oh * OW + ow] = exact_back<T>(m);
        ip[oh * OW + ow] = mi;
      }
    }
  }
}

template <typename T>
void max_pool_impl(const T* x, T* out, int64_t* ind, const Pool2dGeometry& g) {
  using A = compute_t<T>;
  if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1 && 2 * g.OH <= g.H && 2 * g.OW <= g.W) {
    max_pool_2x2(x, out, ind, g);
    return;
  }
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t ih0 = oh * g.sh - g.ph;
      const int64_t ih1 = std::min(ih0 + (g.kh - 1) * g.dh + 1, H);
      while (ih0 < 0) ih0 += g.dh;
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t iw0 = ow * g.sw - g.pw;
        const int64_t iw1 = std::min(iw0 + (g.kw - 1) * g.dw + 1, W);
        while (iw0 < 0) iw0 += g.dw;
        int64_t mi = ih0 * W + iw0;
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t ih = ih0; ih < ih1; ih += g.dh) {
          for (int64_t iw = iw0; iw < iw1; iw += g.dw) {
            const A v = convert<A>(xp[ih * W + iw]);
            if (takes_max(v, m)) {
              m = v;
              mi = ih * W + iw;
            }
          }
        }
        const int64_t o = (p * OH + oh) * OW + ow;
        out[o] = exact_back<T>(m);
        ind[o] = mi;
      }
    }
  }
}

template <typename T>
void max_pool_backward_impl(T* gx, const T* go, const int64_t* ind, const Pool2dGeometry& g) {
  using A = compute_t<T>;
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  accumulate_planes(gx, g.planes, HW, [&](int64_t p, A* gp) {
    const T* gop = go + p * P;
    const int64_t* ip = ind + p * P;
    for (int64_t i = 0; i < P; ++i) {
      const int64_t k = ip[i];
      if (k >= 0 && k < HW) gp[k] += convert<A>(gop[i]);  // an all-padding window has no input to credit
    }
  });
}

// One avg-pool window: the clipped input range and the divisor, as PyTorch's cpu_avg_pool.
struct AvgWindow {
  int64_t ih0, ih1, iw0, iw1, divisor;
  bool empty() const { return ih0 >= ih1 || iw0 >= iw1; }
};
inline AvgWindow avg_window(const Pool2dGeometry& g, int64_t oh, int64_t ow, bool count_include_pad, std::optional<int64_t> divisor_override) {
  int64_t ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
  int64_t ih1 = std::min(ih0 + g.kh, g.H + g.ph), iw1 = std::min(iw0 + g.kw, g.W + g.pw);
  const int64_t pool_size = (ih1 - ih0) * (iw1 - iw0);
  ih0 = std::max<int64_t>(ih0, 0);
  iw0 = std::max<int64_t>(iw0, 0);
  ih1 = std::min(ih1, g.H);
  iw1 = std::min(iw1, g.W);
  int64_t divisor;
  if (divisor_override)
    divisor = *divisor_override;
  else if (count_include_pad)
    divisor = pool_size;
  else
    divisor = (ih1 - ih0) * (iw1 - iw0);
  return {ih0, ih1, iw0, iw1, divisor};
}

template <typename T>
void avg_pool_impl(const T* x, T* out, const Pool2dGeometry& g, bool cip, std::optional<int64_t> div) {
  using A = compute_t<T>;
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        const AvgWindow win = avg_window(g, oh, ow, cip, div);
        T& o = out[(p * OH + oh) * OW + ow];
        if (win.empty()) {
          o = T(0);
          continue;
        }
        A s = 0;
        for (int64_t ih = win.ih0; ih < win.ih1; ++ih)
          for (int64_t iw = win.iw0; iw < win.iw1; ++iw) s += convert<A>(xp[ih * W + iw]);
        o = convert<T>(s / static_cast<A>(win.divisor));
      }
    }
  }
}

template <typename T>
void avg_pool_backward_impl(T* gx, const T* go, const Pool2dGeometry& g, bool cip, std::optional<int64_t> div) {
  using A = compute_t<T>;
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  accumulate_planes(gx, g.planes, H * W, [&](int64_t p, A* gp) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        const AvgWindow win = avg_window(g, oh, ow, cip, div);
        if (win.empty()) continue;
        const A v = convert<A>(go[(p * OH + oh) * OW + ow]) / static_cast<A>(win.divisor);
        for (int64_t ih = win.ih0; ih < win.ih1; ++ih)
          for (int64_t iw = win.iw0; iw < win.iw1; ++iw) gp[ih * W + iw] += v;
      }
    }
  });
}

// PyTorch's adaptive window bounds: output a of b over an input of c is [start, end).
inline int64_t start_index(int64_t a, int64_t b, int64_t c) { return (a / b) * c + ((a % b) * c) / b; }
inline int64_t end_index(int64_t a, int64_t b, int64_t c) { return 1 + ((a + 1) * c - 1) / b; }

template <typename T>
void adaptive_avg_impl(const T* x, T* out, const Pool2dGeometry& g) {
  using A = compute_t<T>;
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t ih0 = start_index(oh, OH, H), ih1 = end_index(oh, OH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw0 = start_index(ow, OW, W), iw1 = end_index(ow, OW, W);
        A s = 0;
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) s += convert<A>(xp[ih * W + iw]);
        out[(p * OH + oh) * OW + ow] = convert<T>(s / static_cast<A>((ih1 - ih0) * (iw1 - iw0)));
      }
    }
  }
}

template <typename T>
void adaptive_avg_backward_impl(T* gx, const T* go, const Pool2dGeometry& g) {
  using A = compute_t<T>;
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
  accumulate_planes(gx, g.planes, H * W, [&](int64_t p, A* gp) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t ih0 = start_index(oh, OH, H), ih1 = end_index(oh, OH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw0 = start_index(ow, OW, W), iw1 = end_index(ow, OW, W);
        const A v = convert<A>(go[(p * OH + oh) * OW + ow]) / static_cast<A>((ih1 - ih0) * (iw1 - iw0));
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) gp[ih * W + iw] += v;
      }
    }
  });
}

template <typename T>
const T* in_ptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* out_ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g) {
  dispatch(input.dtype(), "max_pool2d", [&]<typename T>() { max_pool_impl<T>(in_ptr<T>(input), out_ptr<T>(out), out_ptr<int64_t>(indices), g); });
}

void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g) {
  dispatch(grad_output.dtype(), "max_pool2d backward",
           [&]<typename T>() { max_pool_backward_impl<T>(out_ptr<T>(grad_input), in_ptr<T>(grad_output), in_ptr<int64_t>(indices), g); });
}

void avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                       std::optional<int64_t> divisor_override) {
  dispatch(input.dtype(), "avg_pool2d",
           [&]<typename T>() { avg_pool_impl<T>(in_ptr<T>(input), out_ptr<T>(out), g, count_include_pad, divisor_override); });
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                std::optional<int64_t> divisor_override) {
  dispatch(grad_output.dtype(), "avg_pool2d backward",
           [&]<typename T>() { avg_pool_backward_impl<T>(out_ptr<T>(grad_input), in_ptr<T>(grad_output), g, count_include_pad, divisor_override); });
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g) {
  dispatch(input.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_avg_impl<T>(in_ptr<T>(input), out_ptr<T>(out), g); });
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g) {
  dispatch(grad_output.dtype(), "adaptive_avg_pool2d backward",
           [&]<typename T>() { adaptive_avg_backward_impl<T>(out_ptr<T>(grad_input), in_ptr<T>(grad_output), g); });
}

}  // namespace dp::backend::cpu
