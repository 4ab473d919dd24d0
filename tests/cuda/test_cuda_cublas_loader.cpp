// cuBLAS/cuBLASLt are loaded on first use (src/backend/cuda/cublas_api.h), not linked. Loading needs no GPU,
// so this runs on any machine with the CUDA backend built.
#include <gtest/gtest.h>

#if DP_HAVE_CUDA
#include <dlfcn.h>

#include "backend/cuda/cublas_api.h"

namespace {

bool library_loaded(const char* soname) {
  void* h = ::dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (h) ::dlclose(h);  // drops only the reference RTLD_NOLOAD took
  return h != nullptr;
}

TEST(CublasLoader, NotLoadedAtStartLoadedOnFirstUseWithEveryEntryPoint) {
  const std::string blas = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  const std::string lt = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  // Nothing in this program has multiplied matrices on a GPU: the libraries are not mapped.
  EXPECT_FALSE(library_loaded(blas.c_str()));
  EXPECT_FALSE(library_loaded(lt.c_str()));
  const dp::backend::cuda::CublasApi& api = dp::backend::cuda::cublas_api();
  EXPECT_TRUE(library_loaded(blas.c_str()));
  EXPECT_TRUE(library_loaded(lt.c_str()));
  const void* entries[] = {reinterpret_cast<const void*>(api.Create),
                           reinterpret_cast<const void*>(api.SetStream),
                           reinterpret_cast<const void*>(api.SetWorkspace),
                           reinterpret_cast<const void*>(api.GemmEx),
                           reinterpret_cast<const void*>(api.GemmStridedBatchedEx),
                           reinterpret_cast<const void*>(api.GetStatusName),
                           reinterpret_cast<const void*>(api.GetStatusString),
                           reinterpret_cast<const void*>(api.LtCreate),
                           reinterpret_cast<const void*>(api.LtMatmul),
                           reinterpret_cast<const void*>(api.LtMatmulAlgoGetHeuristic),
                           reinterpret_cast<const void*>(api.LtMatmulDescCreate),
                           reinterpret_cast<const void*>(api.LtMatmulDescDestroy),
                           reinterpret_cast<const void*>(api.LtMatmulDescSetAttribute),
                           reinterpret_cast<const void*>(api.LtMatrixLayoutCreate),
                           reinterpret_cast<const void*>(api.LtMatrixLayoutDestroy),
                           reinterpret_cast<const void*>(api.LtMatmulPreferenceCreate),
                           reinterpret_cast<const void*>(api.LtMatmulPreferenceDestroy),
                           reinterpret_cast<const void*>(api.LtMatmulPreferenceSetAttribute)};
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; ++i) EXPECT_NE(entries[i], nullptr) << "entry " << i;
  // A call that needs no GPU: the status strings.
  EXPECT_STREQ(api.GetStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_EQ(&dp::backend::cuda::cublas_api(), &api);  // loaded once
}

}  // namespace
#else
TEST(CublasLoader, NotLoadedAtStartLoadedOnFirstUseWithEveryEntryPoint) { GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"; }
#endif
