// Loads cuBLAS and cuBLASLt on first use (see cublas_api.h for why).
#include "backend/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "dp/core/errors.h"

namespace dp::backend::cuda {

namespace {

// The library's soname (libcublas.so.<major>), then the toolkit directory CMake linked cudart from
// (DP_CUDA_LIBRARY_DIR), so it is found without LD_LIBRARY_PATH wherever it was found at build time.
void* open_library(const std::string& stem, std::string& tried) {
  const std::string soname = stem + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string candidates[] = {soname,
#ifdef DP_CUDA_LIBRARY_DIR
                              std::string(DP_CUDA_LIBRARY_DIR) + "/" + soname
#endif
  };
  for (const std::string& path : candidates) {
    if (path.empty()) continue;
    if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* err = ::dlerror();
    tried += (tried.empty() ? "" : "; ") + (err ? std::string(err) : path);
  }
  return nullptr;
}

template <typename F>
void bind(void* lib, const char* name, F& slot, std::string& missing) {
  slot = reinterpret_cast<F>(::dlsym(lib, name));
  if (!slot) missing += (missing.empty() ? "" : ", ") + std::string(name);
}

struct Loaded {
  CublasApi api{};
  std::string error;  // empty: loaded
};

Loaded load() {
  Loaded r;
  std::string tried;
  void* blas = open_library("libcublas", tried);
  void* lt = blas ? open_library("libcublasLt", tried) : nullptr;
  if (!blas || !lt) {
    r.error = "cannot load cuBLAS/cuBLASLt, which CUDA matrix products need (" + tried + ")";
    return r;
  }
  std::string missing;
  CublasApi& a = r.api;
  bind(blas, "cublasCreate_v2", a.Create, missing);
  bind(blas, "cublasSetStream_v2", a.SetStream, missing);
  bind(blas, "cublasSetWorkspace_v2", a.SetWorkspace, missing);
  bind(blas, "cublasGemmEx", a.GemmEx, missing);
  bind(blas, "cublasGemmStridedBatchedEx", a.GemmStridedBatchedEx, missing);
  bind(blas, "cublasGetStatusName", a.GetStatusName, missing);
  bind(blas, "cublasGetStatusString", a.GetStatusString, missing);
  bind(lt, "cublasLtCreate", a.LtCreate, missing);
  bind(lt, "cublasLtMatmul", a.LtMatmul, missing);
  bind(lt, "cublasLtMatmulAlgoGetHeuristic", a.LtMatmulAlgoGetHeuristic, missing);
  bind(lt, "cublasLtMatmulDescCreate", a.LtMatmulDescCreate, missing);
  bind(lt, "cublasLtMatmulDescDestroy", a.LtMatmulDescDestroy, missing);
  bind(lt, "cublasLtMatmulDescSetAttribute", a.LtMatmulDescSetAttribute, missing);
  bind(lt, "cublasLtMatrixLayoutCreate", a.LtMatrixLayoutCreate, missing);
  bind(lt, "cublasLtMatrixLayoutDestroy", a.LtMatrixLayoutDestroy, missing);
  bind(lt, "cublasLtMatmulPreferenceCreate", a.LtMatmulPreferenceCreate, missing);
  bind(lt, "cublasLtMatmulPreferenceDestroy", a.LtMatmulPreferenceDestroy, missing);
  bind(lt, "cublasLtMatmulPreferenceSetAttribute", a.LtMatmulPreferenceSetAttribute, missing);
  if (!missing.empty()) r.error = "the loaded cuBLAS/cuBLASLt lack " + missing;
  return r;  // the libraries stay loaded for the life of the process
}

}  // namespace

const CublasApi& cublas_api() {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) throw DeviceError(loaded.error);
  return loaded.api;
}

}  // namespace dp::backend::cuda
