#pragma once
// The CPU backend's 2-D pooling (pool_kernels.cpp): the implementations of
// backend/pool_kernels.h (contracts, Pool2dGeometry) on host memory; the ops call
// backend::max_pool2d_kernel etc., which pick the backend.
#include <cstdint>
#include <optional>
#include "backend/pool_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cpu {

MaxPool2dKernel max_pool2d_kernel;
MaxPool2dBackwardKernel max_pool2d_backward_kernel;
AvgPool2dKernel avg_pool2d_kernel;
AvgPool2dBackwardKernel avg_pool2d_backward_kernel;
AdaptiveAvgPool2dKernel adaptive_avg_pool2d_kernel;
AdaptiveAvgPool2dKernel adaptive_avg_pool2d_backward_kernel;

}  // namespace dp::backend::cpu
