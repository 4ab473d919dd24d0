#pragma once
// The element-wise kernels (kernels::add_kernel, ..., UnaryOp, CmpOp, ActGrad) are entries of the
// kernel interface backend/elementwise_kernels.h, which picks each call's backend from the output's
// device type; this header keeps the path the ops and the shared templates include.
#include "backend/elementwise_kernels.h"
