// cuBLAS / cuBLASLt calls for the CUDA matrix products (see blas.h), under the TF32 switch of
// dp/cuda/matmul.h (src/cuda/matmul.cpp).
//
// Handles: a cuBLAS handle is bound to the device current when it is created and must not be used
// by two threads at once, so each thread has its own per device, taken from a process-wide pool
// and returned to it when the thread exits (handles are never destroyed: a thread may exit after
// the CUDA runtime is gone). One cuBLASLt handle per device is shared (it is thread-safe).
// Every call sets the handle's stream to the current stream and gives it a workspace allocated
// from the caching allocator on that stream: cublasSetStream resets the workspace to cuBLAS's
// internal pool, which is not stream-ordered, so the workspace is set after it, every time.
#include "backend/cuda/blas.h"
#include "backend/cuda/cublas_api.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "dp/core/errors.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm_plan.h"

namespace dp::backend::cuda {

namespace {

using detail::ColumnMajorGemm;
using detail::ComputeKind;
using detail::GemmPlan;

[[noreturn]] void throw_cublas(cublasStatus_t status, const char* call, const std::string& what) {
  std::string msg = dp::detail::str("cuBLAS error: ", call, " failed with ", cublas_api().GetStatusName(status), " (",
                                    cublas_api().GetStatusString(status), ") in ", what);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(msg);
  throw DeviceError(msg);
}

// `what` is a callable that describes the product; it only runs when the call failed.
#define DP_CUBLAS_CHECK(call, what)                                                                                                             \
  do {                                                                                                                                          \
    const cublasStatus_t dp_cublas_status_ = (call);                                                                                            \
    if (__builtin_expect(dp_cublas_status_ != CUBLAS_STATUS_SUCCESS, 0)) ::dp::backend::cuda::throw_cublas(dp_cublas_status_, #call, (what)()); \
  } while (0)

// ---- handles ----

class HandlePool {
 public:
  cublasHandle_t acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (device < static_cast<int>(free_.size()) && !free_[device].empty()) {
        cublasHandle_t h = free_[device].back();
        free_[device].pop_back();
        return h;
      }
    }
    DeviceGuard guard(device);  // the handle belongs to the device current at creation
    cublasHandle_t h = nullptr;
    DP_CUBLAS_CHECK(cublas_api().Create(&h), [device] { return dp::detail::str("creating a cuBLAS handle on cuda:", device); });
    return h;
  }
  void release(int device, cublasHandle_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(free_.size()) <= device) free_.resize(device + 1);
    free_[device].push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<cublasHandle_t>> free_;
};

HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool;  // never destroyed: threads return handles during exit
  return *pool;
}

struct ThreadHandles {
  std::vector<cublasHandle_t> per_device;
  ~ThreadHandles() {
    for (size_t d = 0; d < per_device.size(); ++d)
      if (per_device[d]) handle_pool().release(static_cast<int>(d), per_device[d]);
  }
};

cublasHandle_t cublas_handle(int device) {
  thread_local ThreadHandles handles;
  if (static_cast<int>(handles.per_device.size()) <= device) handles.per_device.resize(device + 1, nullptr);
  cublasHandle_t& h = handles.per_device[device];
  if (!h) h = handle_pool().acquire(device);
  return h;
}

cublasLtHandle_t lt_handle(int device) {
  // Never destroyed, as the pool above: a thread may still multiply while the process exits.
  static std::mutex* mu = new std::mutex;
  static std::vector<cublasLtHandle_t>* handles = new std::vector<cublasLtHandle_t>;
  std::lock_guard<std::mutex> lock(*mu);
  if (static_cast<int>(handles->size()) <= device) handles->resize(device + 1, nullptr);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h) {
    DeviceGuard guard(device);
    DP_CUBLAS_CHECK(cublas_api().LtCreate(&h), [device] { return dp::detail::str("creating a cuBLASLt handle on cuda:", device); });
  }
  return h;
}

int64_t workspace_size(int device) {
  static const std::vector<int64_t>* sizes = [] {  // never destroyed, as the handles
    auto* s = new std::vector<int64_t>(static_cast<size_t>(::dp::cuda::detail::logical_device_count()), detail::workspace_bytes(8));
    for (size_t d = 0; d < s->size(); ++d) {
      int major = 8;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, physical_device(static_cast<int>(d))) == cudaSuccess)
        (*s)[d] = detail::workspace_bytes(major);
      else
        (void)cudaGetLastError();
    }
    return s;
  }();
  return (*sizes)[static_cast<size_t>(device)];
}

Tensor workspace(int device, int64_t bytes) { return make_empty({bytes}, kUInt8, Device::cuda(device)); }

// Everything one product's calls share. Construct after a DeviceGuard for `device`.
struct Context {
  int device;
  cudaStream_t stream;
  cublasHandle_t handle = nullptr;
  Tensor ws;  // the cuBLAS workspace, alive until the calls are queued (stream-ordered reuse after)

  explicit Context(int dev) : device(dev), stream(current_stream(dev).handle()) {}

  // The cuBLAS handle set up for this stream (first use only).
  template <typename What>
  cublasHandle_t cublas(const What& what) {
    if (handle) return handle;
    handle = cublas_handle(device);
    DP_CUBLAS_CHECK(cublas_api().SetStream(handle, stream), what);
    const int64_t bytes = workspace_size(device);
    ws = workspace(device, bytes);
    DP_CUBLAS_CHECK(cublas_api().SetWorkspace(handle, ws.data_ptr(), static_cast<size_t>(bytes)), what);
    return handle;
  }
};

// ---- types ----

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case kFloat32:
      return CUDA_R_32F;
    case kFloat64:
      return CUDA_R_64F;
    case kFloat16:
      return CUDA_R_16F;
    case kBFloat16:
      return CUDA_R_16BF;
    default:
      break;
  }
  throw DTypeError(dp::detail::str("cuBLAS: no data type for ", dtype_name(dt)));
}

cublasComputeType_t compute_type(ComputeKind k) {
  switch (k) {
    case ComputeKind::F32FastTF32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case ComputeKind::F64:
      return CUBLAS_COMPUTE_64F;
    case ComputeKind::F32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

// alpha and beta in the compute type's scale type (double for fp64, float otherwise).
struct Scale {
  double d;
  float f;
  explicit Scale(double v) : d(v), f(static_cast<float>(v)) {}
  const void* get(ComputeKind k) const { return k == ComputeKind::F64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f); }
};

ComputeKind checked_compute_kind(const char* op, DType dt, const Device& device, bool tf32_ok) {
  const auto k = detail::compute_kind(dt, tf32_ok && allow_tf32());
  DP_CHECK(k.has_value(), DTypeError, op, ": not implemented for ", dtype_name(dt), " tensors on ", device.str(),
           " (cuBLAS has no integer GEMM; CUDA matrix products take float16, bfloat16, float32, float64)");
  return *k;
}

const char* cptr(const void* p, int64_t elements, size_t es) { return static_cast<const char*>(p) + elements * static_cast<int64_t>(es); }

// One plain (count 1) or strided-batched cuBLAS call for the row-major product
// C = alpha * op(A) @ op(B) + beta * C, `count` times with the given element strides.
template <typename What>
void gemm_call(Context& ctx, DType dt, ComputeKind ck, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
               int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, double beta, void* c, int64_t ldc, int64_t stride_c, int64_t count,
               const What& what) {
  const ColumnMajorGemm g = detail::column_major(ta, tb, m, n, k, lda, ldb, ldc);
  DP_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.ld_first <= INT_MAX && g.ld_second <= INT_MAX && g.ldc <= INT_MAX,
           NotImplementedError, what(), ": a matrix size or leading dimension is beyond cuBLAS's 32-bit sizes");
  cublasHandle_t h = ctx.cublas(what);
  const cudaDataType_t t = data_type(dt);
  const cublasComputeType_t ct = compute_type(ck);
  const Scale sa(alpha), sb(beta);
  const cublasOperation_t op_first = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const size_t es = element_size(dt);
  if (count == 1) {
    DP_CUBLAS_CHECK(cublas_api().GemmEx(h, op_first, op_second, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), sa.get(ck), b, t,
                                        static_cast<int>(g.ld_first), a, t, static_cast<int>(g.ld_second), sb.get(ck), c, t, static_cast<int>(g.ldc),
                                        ct, CUBLAS_GEMM_DEFAULT),
                    what);
    return;
  }
  // cuBLAS's batch count is an int: a larger batch goes in pieces.
  for (int64_t done = 0; done < count;) {
    const int64_t piece = std::min<int64_t>(count - done, INT_MAX);
    DP_CUBLAS_CHECK(
        cublas_api().GemmStridedBatchedEx(h, op_first, op_second, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), sa.get(ck),
                                          cptr(b, done * stride_b, es), t, static_cast<int>(g.ld_first), stride_b, cptr(a, done * stride_a, es), t,
                                          static_cast<int>(g.ld_second), stride_a, sb.get(ck), const_cast<char*>(cptr(c, done * stride_c, es)), t,
                                          static_cast<int>(g.ldc), stride_c, static_cast<int>(piece), ct, CUBLAS_GEMM_DEFAULT),
        what);
    done += piece;
  }
}

GemmPlan plan_for(const Tensor& C, const Tensor& A, const Tensor& B) {
  return detail::plan_gemm(A.sizes(), A.strides(), B.sizes(), B.strides(), C.sizes());
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = make_empty(t.sizes(), t.dtype(), t.device());
  copy_on_device(c, t);
  return c;
}

// The plan for C = A @ B, copying A or B to contiguous tensors first where the plan needs it.
GemmPlan prepare(const Tensor& C, Tensor& A, Tensor& B) {
  GemmPlan p = plan_for(C, A, B);
  if (!p.copy_a && !p.copy_b) return p;
  if (p.copy_a) A = contiguous_copy(A);
  if (p.copy_b) B = contiguous_copy(B);
  return plan_for(C, A, B);
}

// Runs the plan's calls: C = alpha * A @ B + beta * C.
template <typename What>
void run_plan(Context& ctx, const GemmPlan& p, const Tensor& C, const Tensor& A, const Tensor& B, double alpha, double beta, ComputeKind ck,
              const What& what) {
  const size_t es = C.element_size();
  for (int64_t i = 0, calls = p.calls(); i < calls; ++i) {
    int64_t oa = 0, ob = 0, oc = 0;
    p.offsets(i, oa, ob, oc);
    gemm_call(ctx, C.dtype(), ck, p.a.trans, p.b.trans, p.m, p.n, p.k, alpha, cptr(A.data_ptr(), oa, es), p.a.ld, p.stride_a,
              cptr(B.data_ptr(), ob, es), p.b.ld, p.stride_b, beta, const_cast<char*>(cptr(C.data_ptr(), oc, es)), p.ldc, p.stride_c, p.count, what);
  }
}

// ---- cuBLASLt with the bias epilogue ----

// Destroy: the CublasApi member that destroys a T.
template <typename T, auto Destroy>
struct LtPtr {
  T p = nullptr;
  LtPtr() = default;
  LtPtr(const LtPtr&) = delete;
  LtPtr& operator=(const LtPtr&) = delete;
  ~LtPtr() {
    if (p) (void)(cublas_api().*Destroy)(p);
  }
};
using MatmulDesc = LtPtr<cublasLtMatmulDesc_t, &CublasApi::LtMatmulDescDestroy>;
using Layout = LtPtr<cublasLtMatrixLayout_t, &CublasApi::LtMatrixLayoutDestroy>;
using Preference = LtPtr<cublasLtMatmulPreference_t, &CublasApi::LtMatmulPreferenceDestroy>;

// The largest power of two up to 16 that divides the address (cuBLASLt picks kernels by it).
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 16 && v % (2 * a) == 0) a *= 2;
  return a;
}

// C = A @ B + bias row, one cuBLASLt call. False (nothing queued) when cuBLASLt offers no
// algorithm for these layouts and alignments.
template <typename What>
bool lt_matmul_bias(Context& ctx, const GemmPlan& p, const Tensor& C, const Tensor& A, const Tensor& B, const Tensor& bias, ComputeKind ck,
                    const What& what) {
  const ColumnMajorGemm g = detail::column_major(p.a.trans, p.b.trans, p.m, p.n, p.k, p.a.ld, p.b.ld, p.ldc);
  const cudaDataType_t t = data_type(C.dtype());
  const cublasLtHandle_t lt = lt_handle(ctx.device);
  MatmulDesc desc;
  DP_CUBLAS_CHECK(cublas_api().LtMatmulDescCreate(&desc.p, compute_type(ck), CUDA_R_32F), what);
  const cublasOperation_t op_first = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const void* bias_ptr = bias.data_ptr();
  DP_CUBLAS_CHECK(cublas_api().LtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)), what);
  // Column-major: the first operand (B's memory) is [g.m, g.k] after its op, the second (A's) [g.k, g.n],
  // D = C [g.m, g.n]; the bias runs along D's rows (C's columns), which is what the epilogue adds.
  Layout la, lb, lc;
  const uint64_t um = static_cast<uint64_t>(g.m), un = static_cast<uint64_t>(g.n), uk = static_cast<uint64_t>(g.k);
  DP_CUBLAS_CHECK(cublas_api().LtMatrixLayoutCreate(&la.p, t, g.trans_first ? uk : um, g.trans_first ? um : uk, g.ld_first), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatrixLayoutCreate(&lb.p, t, g.trans_second ? un : uk, g.trans_second ? uk : un, g.ld_second), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatrixLayoutCreate(&lc.p, t, um, un, g.ldc), what);
  Preference pref;
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceCreate(&pref.p), what);
  const uint64_t max_ws = static_cast<uint64_t>(workspace_size(ctx.device));
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)), what);
  const uint32_t align_first = alignment_of(B.data_ptr()), align_second = alignment_of(A.data_ptr()), align_c = alignment_of(C.data_ptr());
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first, sizeof(uint32_t)),
                  what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second, sizeof(uint32_t)),
                  what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(uint32_t)), what);
  DP_CUBLAS_CHECK(cublas_api().LtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(uint32_t)), what);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublas_api().LtMatmulAlgoGetHeuristic(lt, desc.p, la.p, lb.p, lc.p, lc.p, pref.p, 1, &result, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;  // the fallback computes it
  Tensor ws = result.workspaceSize > 0 ? workspace(ctx.device, static_cast<int64_t>(result.workspaceSize)) : Tensor();
  const float one = 1.0f, zero = 0.0f;  // the scale type is fp32 for every dtype taken here
  DP_CUBLAS_CHECK(cublas_api().LtMatmul(lt, desc.p, &one, B.data_ptr(), la.p, A.data_ptr(), lb.p, &zero, C.data_ptr(), lc.p, C.data_ptr(), lc.p,
                                        &result.algo, ws.defined() ? ws.data_ptr() : nullptr, result.workspaceSize, ctx.stream),
                  what);
  return true;
}

// "mm: [4, 8] @ [8, 16] -> [4, 16], float32 on cuda:0" for error messages.
std::string describe_product(const char* op, const Tensor& C, const Tensor& A, const Tensor& B) {
  return dp::detail::str(op, ": ", A.size_str(), " @ ", B.size_str(), " -> ", C.size_str(), ", ", dtype_name(C.dtype()), " on ", C.device().str());
}

// beta * C for an empty sum (k == 0).
void scale_output(const Tensor& C, double beta) {
  if (beta == 0.0)
    fill_kernel(C, 0);
  else if (beta != 1.0)
    mul_scalar_kernel(C, C, Scalar(beta));
}

}  // namespace

void matmul_into(const Tensor& C, const Tensor& A_in, const Tensor& B_in, double alpha, double beta, const char* op, bool tf32_ok) {
  const ComputeKind ck = checked_compute_kind(op, C.dtype(), C.device(), tf32_ok);
  if (C.numel() == 0) return;
  const int dev = C.device().index;
  DeviceGuard guard(dev);
  if (A_in.size(-1) == 0) return scale_output(C, beta);
  Tensor A = A_in, B = B_in;
  const GemmPlan p = prepare(C, A, B);
  Context ctx(dev);
  run_plan(ctx, p, C, A, B, alpha, beta, ck, [&] { return describe_product(op, C, A_in, B_in); });
}

void matmul_bias_kernel(const Tensor& C, const Tensor& A_in, const Tensor& B_in, const Tensor& bias, const char* op) {
  const ComputeKind ck = checked_compute_kind(op, C.dtype(), C.device(), true);
  if (C.numel() == 0) return;
  const int dev = C.device().index;
  DeviceGuard guard(dev);
  if (A_in.size(-1) == 0) return copy_on_device(C, bias);  // an empty product: the bias alone
  Tensor A = A_in, B = B_in;
  const GemmPlan p = prepare(C, A, B);
  Context ctx(dev);
  auto what = [&] { return describe_product(op, C, A_in, B_in) + dp::detail::str(" + bias ", bias.size_str()); };
  if (detail::lt_bias_eligible(C.dtype(), p, bias.sizes(), bias.strides(), 1.0, 1.0) && lt_matmul_bias(ctx, p, C, A, B, bias, ck, what)) return;
  copy_on_device(C, bias);  // bias rows first; the GEMM accumulates onto them (beta = 1)
  run_plan(ctx, p, C, A, B, 1.0, 1.0, ck, what);
}

void gemm(int device, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const char* op, bool tf32_ok) {
  const ComputeKind ck = checked_compute_kind(op, dtype, Device::cuda(device), tf32_ok);
  if (m == 0 || n == 0) return;
  DeviceGuard guard(device);
  Context ctx(device);
  if (k == 0) {
    DP_CHECK(beta == 0.0 || beta == 1.0, NotImplementedError, op, ": an empty CUDA GEMM (k = 0) with beta ", beta, " (only 0 or 1)");
    if (beta == 0.0) {
      const size_t es = element_size(dtype);
      DP_CUDA_CHECK(cudaMemset2DAsync(c, static_cast<size_t>(ldc) * es, 0, static_cast<size_t>(n) * es, static_cast<size_t>(m), ctx.stream));
    }
    return;
  }
  gemm_call(ctx, dtype, ck, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1, [&] {
    return dp::detail::str(op, ": GEMM [", m, ", ", k, "] @ [", k, ", ", n, "]", trans_a ? " (A transposed)" : "", trans_b ? " (B transposed)" : "",
                           ", ", dtype_name(dtype), " on cuda:", device);
  });
}

}  // namespace dp::backend::cuda
