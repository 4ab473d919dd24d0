#pragma once
// cuBLAS and cuBLASLt, loaded on first use (dlopen) instead of linked. Loading libcublasLt costs
// about 0.15 s and 210 MB of resident memory at process start (its static initialisers run
// whether or not a GPU is ever used), which every program linking dparallel paid before: every
// CPU-only training run and every one of the ~1700 test processes. Now only a process that
// multiplies matrices on a GPU loads them.
//
// cublas_api() returns the function table, loading both libraries the first time (thread-safe). If a
// library or a symbol cannot be found it throws DeviceError naming it and where it looked, and
// every later call throws the same.
#include <cublasLt.h>
#include <cublas_v2.h>

namespace dp::backend::cuda {

struct CublasApi {
  decltype(&::cublasCreate_v2) Create;
  decltype(&::cublasSetStream_v2) SetStream;
  decltype(&::cublasSetWorkspace_v2) SetWorkspace;
  // The C entry points (cublas_api.h also declares C++ overloads taking cudaDataType compute types).
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType, int,
                           const void*, cudaDataType, int, const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType,
                                         int, long long, const void*, cudaDataType, int, long long, const void*, void*, cudaDataType, int, long long,
                                         int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusName) GetStatusName;
  decltype(&::cublasGetStatusString) GetStatusString;
  decltype(&::cublasLtCreate) LtCreate;
  decltype(&::cublasLtMatmul) LtMatmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) LtMatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) LtMatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) LtMatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) LtMatmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) LtMatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) LtMatrixLayoutDestroy;
  decltype(&::cublasLtMatmulPreferenceCreate) LtMatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) LtMatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) LtMatmulPreferenceSetAttribute;
};

const CublasApi& cublas_api();

}  // namespace dp::backend::cuda
