// conv2d on CUDA through cuDNN (see conv.h).
#include "backend/cuda/conv.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>
#include "backend/tensor_nograd.h"
#include "backend/cuda/cudnn.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/reduce.h"
#include "dp/core/errors.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"

namespace dp::backend::cuda {

using backend::Conv2dGeometry;

int64_t conv_batch_chunk(const Conv2dGeometry& g) {
  constexpr int64_t kMax = INT_MAX;
  const int64_t per_image = std::max<int64_t>({g.C * g.H * g.W, g.OC * g.OH * g.OW, 1});
  const int64_t weight = g.OC * g.group_in() * g.KH * g.KW;
  if (per_image > kMax || weight > kMax) return 0;
  for (int64_t v : {g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups})
    if (v > kMax) return 0;
  return std::max<int64_t>(1, std::min<int64_t>(g.N, kMax / per_image));
}

std::string conv_description(const Conv2dGeometry& g, DType dtype, Device device) {
  return dp::detail::str("input [", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], weight [", g.OC, ", ", g.group_in(), ", ", g.KH, ", ", g.KW,
                         "], output [", g.N, ", ", g.OC, ", ", g.OH, ", ", g.OW, "], stride [", g.sh, ", ", g.sw, "], padding [", g.ph, ", ", g.pw,
                         "], dilation [", g.dh, ", ", g.dw, "], groups ", g.groups, ", ", dtype_name(dtype), ", ", device.str());
}

}  // namespace dp::backend::cuda

#if !DP_HAVE_CUDNN
namespace dp::backend::cuda {
namespace {
[[noreturn]] void no_cudnn(const char* op, const Tensor& t, const Conv2dGeometry& g) {
  throw NotImplementedError(dp::detail::str(op, ": convolution on ", t.device().str(),
                                            " needs cuDNN, and dparallel was built without it (DP_HAVE_CUDNN=0; CMake looks beside the CUDA "
                                            "toolkit, under $CUDNN_ROOT and in PyTorch's nvidia/cudnn wheel) (",
                                            conv_description(g, t.dtype(), t.device()), ")"));
}
}  // namespace

void conv2d_forward_kernel(const Tensor& out, const Tensor&, const Tensor&, const Tensor&, const Conv2dGeometry& g) { no_cudnn("conv2d", out, g); }
void conv2d_backward_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor& grad_output,
                            const Conv2dGeometry& g) {
  no_cudnn("conv2d backward", grad_output, g);
}
}  // namespace dp::backend::cuda

#else
namespace dp::backend::cuda {
namespace {

using cudnn::ConvDesc;
using cudnn::FilterDesc;
using cudnn::TensorDesc;

// ---- the algorithm cache ----

// Everything an algorithm choice depends on: the chunk's geometry, dtype, device, TF32 setting.
struct AlgoKey {
  int64_t v[17];
  bool operator==(const AlgoKey& o) const { return std::memcmp(v, o.v, sizeof v) == 0; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t x : k.v) {
      h ^= static_cast<uint64_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};
AlgoKey make_key(const Conv2dGeometry& g, int64_t n, DType dt, int device, bool tf32) {
  return {{n, g.C, g.H, g.W, g.OC, g.KH, g.KW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, static_cast<int64_t>(dt), device, tf32 ? 1 : 0}};
}

template <typename Algo>
struct Choice {
  Algo algo;
  cudnnMathType_t math;
};

template <typename Algo>
struct AlgoCache {
  std::mutex mutex;
  std::unordered_map<AlgoKey, Choice<Algo>, AlgoKeyHash> map;
};

// The descriptors of one cuDNN call over `n` images, and what it needs around them.
struct ConvCall {
  const Conv2dGeometry& g;
  int64_t n;
  DType dt;
  Device device;
  bool fp32;                // float32 data
  cudnnDataType_t cdt;      // the data's type
  cudnnDataType_t compute;  // the convolution's: float for the 16-bit types (PyTorch's choice), else the data's
  bool tf32;                // TF32 allowed for this call
  std::string context;      // for error messages
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  ConvCall(const Conv2dGeometry& geom, int64_t images, DType dtype, Device dev)
      : g(geom),
        n(images),
        dt(dtype),
        device(dev),
        fp32(dtype == kFloat32),
        cdt(data_type(dtype)),
        compute(dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
        tf32(fp32 && cudnn::allow_tf32()),
        context(conv_description(geom, dtype, dev)) {
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    x.set(cdt, i(n), i(g.C), i(g.H), i(g.W), context);
    y.set(cdt, i(n), i(g.OC), i(g.OH), i(g.OW), context);
    w.set(cdt, i(g.OC), i(g.group_in()), i(g.KH), i(g.KW), context);
    conv.set(i(g.ph), i(g.pw), i(g.sh), i(g.sw), i(g.dh), i(g.dw), i(g.groups), compute, requested_math(), context);
  }
  static bool half(DType dt) { return dt == kFloat16 || dt == kBFloat16; }
  static cudnnDataType_t data_type(DType dt) {
    switch (dt) {
      case kFloat16:
        return CUDNN_DATA_HALF;
      case kBFloat16:
        return CUDNN_DATA_BFLOAT16;
      case kFloat32:
        return CUDNN_DATA_FLOAT;
      default:
        return CUDNN_DATA_DOUBLE;
    }
  }
  // float32 without TF32: FMA only (CUDNN_DEFAULT_MATH would allow TF32 on Ampere and newer). The
  // 16-bit types ask for tensor cores, as PyTorch does (cuDNN's ranked list says what each
  // algorithm uses; any math type is acceptable for them).
  cudnnMathType_t requested_math() const { return fp32 && !tf32 ? CUDNN_FMA_MATH : half(dt) ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH; }
  bool acceptable(cudnnMathType_t m) const { return !(fp32 && !tf32 && (m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)); }
  cudnnMathType_t math_for(cudnnMathType_t m) const { return fp32 && !tf32 ? CUDNN_FMA_MATH : m; }
};

Tensor workspace(size_t bytes, Device device) { return bytes == 0 ? Tensor() : make_empty({static_cast<int64_t>(bytes)}, kUInt8, device); }

// The cached choice for `key`, or the first usable one of cuDNN's ranked list (get_perfs): status
// success, an acceptable math type, a workspace size cuDNN can report and the allocator can
// provide. Sets the call's math type and allocates the workspace (into ws / ws_bytes).
template <typename Algo, typename Perf, typename GetPerfs, typename WsSize>
Algo choose(AlgoCache<Algo>& cache, const AlgoKey& key, ConvCall& call, const char* what, GetPerfs get_perfs, WsSize ws_size, Tensor& ws,
            size_t& ws_bytes) {
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.map.find(key);
    if (it != cache.map.end()) {
      const Choice<Algo> c = it->second;
      call.conv.set_math(c.math, call.context);
      ws_bytes = 0;
      DP_CUDNN_CHECK(ws_size(c.algo, &ws_bytes), call.context);
      ws = workspace(ws_bytes, call.device);
      return c.algo;
    }
  }
  std::vector<Perf> perfs = get_perfs();
  for (const Perf& p : perfs) {
    if (p.status != CUDNN_STATUS_SUCCESS || !call.acceptable(p.mathType)) continue;
    const cudnnMathType_t math = call.math_for(p.mathType);
    call.conv.set_math(math, call.context);
    size_t bytes = 0;
    if (ws_size(p.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    try {
      ws = workspace(bytes, call.device);
    } catch (const OutOfMemory&) {
      continue;  // the next algorithm may need less
    }
    ws_bytes = bytes;
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.map.emplace(key, Choice<Algo>{p.algo, math});
    return p.algo;
  }
  throw DeviceError(dp::detail::str(what, ": cuDNN offers no usable algorithm (", perfs.size(), " considered) for ", call.context));
}

AlgoCache<cudnnConvolutionFwdAlgo_t>& fwd_cache() {
  static auto* c = new AlgoCache<cudnnConvolutionFwdAlgo_t>();
  return *c;
}
AlgoCache<cudnnConvolutionBwdDataAlgo_t>& bwd_data_cache() {
  static auto* c = new AlgoCache<cudnnConvolutionBwdDataAlgo_t>();
  return *c;
}
AlgoCache<cudnnConvolutionBwdFilterAlgo_t>& bwd_filter_cache() {
  static auto* c = new AlgoCache<cudnnConvolutionBwdFilterAlgo_t>();
  return *c;
}

template <typename Perf, typename F>
std::vector<Perf> ranked(F&& f) {
  constexpr int kMaxAlgos = 16;  // more than any of cuDNN's algorithm enums has
  std::vector<Perf> perfs(kMaxAlgos);
  int returned = 0;
  f(kMaxAlgos, &returned, perfs.data());
  perfs.resize(static_cast<size_t>(std::max(0, std::min(returned, kMaxAlgos))));
  return perfs;
}

// alpha / beta scalars: double for float64 data, float for every other type (float32, float16,
// bfloat16: cuDNN's rule). ptr(true) gives the float.
struct Scale {
  float f;
  double d;
  const void* ptr(bool fp32) const { return fp32 ? static_cast<const void*>(&f) : static_cast<const void*>(&d); }
};
bool float_scale(DType dt) { return dt != kFloat64; }
bool is_half(DType dt) { return dt == kFloat16 || dt == kBFloat16; }
constexpr Scale kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

char* at(const Tensor& t, int64_t elements) { return static_cast<char*>(t.data_ptr()) + elements * static_cast<int64_t>(t.element_size()); }

void check_dtype(const char* op, const Tensor& t) {
  DP_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64 || is_half(t.dtype()), DTypeError, op,
           ": expected float32, float64, float16 or bfloat16 on ", t.device().str(), ", got ", dtype_name(t.dtype()));
}

// Sizes cuDNN cannot take (see conv_batch_chunk).
int64_t chunk_or_throw(const char* op, const Conv2dGeometry& g, const Tensor& t) {
  const int64_t chunk = conv_batch_chunk(g);
  DP_CHECK(chunk > 0, NotImplementedError, op, ": an image or the weight has 2^31 elements or more, which cuDNN cannot index (",
           conv_description(g, t.dtype(), t.device()), ")");
  return chunk;
}

// No input values, no output channels or no images: nothing for cuDNN to do, and it would refuse.
bool degenerate(const Conv2dGeometry& g) { return g.N == 0 || g.C == 0 || g.H == 0 || g.W == 0 || g.OC == 0; }

// The bias gradient sum(grad_output over N, H, W), chunk by chunk (accumulating after the first).
// The 16-bit types use the CUDA sum (float accumulation, one rounding), as PyTorch does: cuDNN's
// legacy bias gradient does not take bfloat16.
void bias_grad(cudnnHandle_t h, const Tensor& gb, const Tensor& go, const Conv2dGeometry& g, int64_t chunk) {
  if (is_half(go.dtype())) {
    cuda::sum_kernel(gb, go, {true, false, true, true}, /*keepdim=*/false);
    return;
  }
  const bool fp32 = go.dtype() == kFloat32;
  const cudnnDataType_t cdt = fp32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  const std::string context = conv_description(g, go.dtype(), go.device());
  TensorDesc bdesc, ydesc;
  bdesc.set(cdt, 1, static_cast<int>(g.OC), 1, 1, context);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t n = std::min(chunk, g.N - n0);
    ydesc.set(cdt, static_cast<int>(n), static_cast<int>(g.OC), static_cast<int>(g.OH), static_cast<int>(g.OW), context);
    DP_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, kOne.ptr(fp32), ydesc.get(), at(go, n0 * g.OC * g.OH * g.OW), (n0 == 0 ? kZero : kOne).ptr(fp32),
                                                bdesc.get(), gb.data_ptr()),
                   context);
  }
}

}  // namespace

void conv2d_forward_kernel(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const char* op = "conv2d";
  check_dtype(op, input);
  if (out.numel() == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  if (degenerate(g)) {  // every output sees only zeros: out = bias (or 0)
    if (bias.defined())
      cuda::copy_on_device(out, backend::restride_nograd(bias, {g.OC, 1, 1}, {1, 0, 0}));
    else
      cuda::fill_kernel(out, Scalar(0.0));
    return;
  }
  const int64_t chunk = chunk_or_throw(op, g, input);
  cudnn::Handle handle(dev, current_stream(dev).handle());
  const bool fp32 = float_scale(input.dtype());
  const bool half_bias = bias.defined() && is_half(input.dtype());
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t n = std::min(chunk, g.N - n0);
    ConvCall call(g, n, input.dtype(), out.device());
    Tensor ws;
    size_t ws_bytes = 0;
    const auto algo = choose<cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t>(
        fwd_cache(), make_key(g, n, input.dtype(), dev, call.tf32), call, op,
        [&] {
          return ranked<cudnnConvolutionFwdAlgoPerf_t>([&](int req, int* ret, cudnnConvolutionFwdAlgoPerf_t* p) {
            DP_CUDNN_CHECK(
                cudnnGetConvolutionForwardAlgorithm_v7(handle.get(), call.x.get(), call.w.get(), call.conv.get(), call.y.get(), req, ret, p),
                call.context);
          });
        },
        [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(handle.get(), call.x.get(), call.w.get(), call.conv.get(), call.y.get(), a, bytes);
        },
        ws, ws_bytes);
    void* y = at(out, n0 * g.OC * g.OH * g.OW);
    DP_CUDNN_CHECK(
        cudnnConvolutionForward(handle.get(), kOne.ptr(fp32), call.x.get(), at(input, n0 * g.C * g.H * g.W), call.w.get(), weight.data_ptr(),
                                call.conv.get(), algo, ws.defined() ? ws.data_ptr() : nullptr, ws_bytes, kZero.ptr(fp32), call.y.get(), y),
        call.context);
    if (bias.defined() && !half_bias) {
      TensorDesc bdesc;
      bdesc.set(call.cdt, 1, static_cast<int>(g.OC), 1, 1, call.context);
      DP_CUDNN_CHECK(cudnnAddTensor(handle.get(), kOne.ptr(fp32), bdesc.get(), bias.data_ptr(), kOne.ptr(fp32), call.y.get(), y), call.context);
    }
  }
  // 16-bit types: the bias is added by the element-wise kernel (float math, one rounding), as
  // PyTorch adds it after cuDNN's convolution; cudnnAddTensor does not take bfloat16.
  if (half_bias) cuda::add_kernel(out, out, backend::restride_nograd(bias, {g.N, g.OC, g.OH, g.OW}, {0, 1, 0, 0}), Scalar(1.0));
}

void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input, const Tensor& weight,
                            const Tensor& grad_output, const Conv2dGeometry& g) {
  const char* op = "conv2d backward";
  check_dtype(op, grad_output);
  const int dev = grad_output.device().index;
  DeviceGuard guard(dev);
  if (degenerate(g)) {
    if (grad_input.defined()) cuda::fill_kernel(grad_input, Scalar(0.0));
    if (grad_weight.defined()) cuda::fill_kernel(grad_weight, Scalar(0.0));
    if (grad_bias.defined()) {
      if (g.N == 0 || g.OH * g.OW == 0) {
        cuda::fill_kernel(grad_bias, Scalar(0.0));
      } else if (g.OC > 0) {
        cudnn::Handle handle(dev, current_stream(dev).handle());
        bias_grad(handle.get(), grad_bias, grad_output, g, std::max<int64_t>(1, INT_MAX / std::max<int64_t>(1, g.OC * g.OH * g.OW)));
      }
    }
    return;
  }
  const int64_t chunk = chunk_or_throw(op, g, grad_output);
  cudnn::Handle handle(dev, current_stream(dev).handle());
  const bool fp32 = float_scale(grad_output.dtype());
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t n = std::min(chunk, g.N - n0);
    ConvCall call(g, n, grad_output.dtype(), grad_output.device());
    const void* dy = at(grad_output, n0 * g.OC * g.OH * g.OW);
    if (grad_input.defined()) {
      Tensor ws;
      size_t ws_bytes = 0;
      const auto algo = choose<cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdDataAlgoPerf_t>(
          bwd_data_cache(), make_key(g, n, grad_output.dtype(), dev, call.tf32), call, "conv2d backward (input)",
          [&] {
            return ranked<cudnnConvolutionBwdDataAlgoPerf_t>([&](int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* p) {
              DP_CUDNN_CHECK(
                  cudnnGetConvolutionBackwardDataAlgorithm_v7(handle.get(), call.w.get(), call.y.get(), call.conv.get(), call.x.get(), req, ret, p),
                  call.context);
            });
          },
          [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(handle.get(), call.w.get(), call.y.get(), call.conv.get(), call.x.get(), a, bytes);
          },
          ws, ws_bytes);
      DP_CUDNN_CHECK(cudnnConvolutionBackwardData(handle.get(), kOne.ptr(fp32), call.w.get(), weight.data_ptr(), call.y.get(), dy, call.conv.get(),
                                                  algo, ws.defined() ? ws.data_ptr() : nullptr, ws_bytes, kZero.ptr(fp32), call.x.get(),
                                                  at(grad_input, n0 * g.C * g.H * g.W)),
                     call.context);
    }
    if (grad_weight.defined()) {
      Tensor ws;
      size_t ws_bytes = 0;
      const auto algo = choose<cudnnConvolutionBwdFilterAlgo_t, cudnnConvolutionBwdFilterAlgoPerf_t>(
          bwd_filter_cache(), make_key(g, n, grad_output.dtype(), dev, call.tf32), call, "conv2d backward (weight)",
          [&] {
            return ranked<cudnnConvolutionBwdFilterAlgoPerf_t>([&](int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
              DP_CUDNN_CHECK(
                  cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle.get(), call.x.get(), call.y.get(), call.conv.get(), call.w.get(), req, ret, p),
                  call.context);
            });
          },
          [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle.get(), call.x.get(), call.y.get(), call.conv.get(), call.w.get(), a, bytes);
          },
          ws, ws_bytes);
      // Later chunks accumulate into the first one's result.
      DP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle.get(), kOne.ptr(fp32), call.x.get(), at(input, n0 * g.C * g.H * g.W), call.y.get(), dy,
                                                    call.conv.get(), algo, ws.defined() ? ws.data_ptr() : nullptr, ws_bytes,
                                                    (n0 == 0 ? kZero : kOne).ptr(fp32), call.w.get(), grad_weight.data_ptr()),
                     call.context);
    }
  }
  if (grad_bias.defined()) bias_grad(handle.get(), grad_bias, grad_output, g, chunk);
}

}  // namespace dp::backend::cuda
#endif
