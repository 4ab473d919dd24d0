#pragma once
// dparallel's core: tensors, devices, the ops, autograd and tensor checkpoints, what a program
// that only computes with tensors needs. Every layer (nn, optim, data, parallel, distributed, ...):
// the umbrella header dp/dp.h, which includes this one.
#include "dp/autograd/autograd.h"
#include "dp/config.h"  // DP_HAVE_CUDA: whether the library was built with the CUDA backend
#include "dp/core/backends.h"
#include "dp/core/device_registry.h"
#include "dp/core/generator.h"
#include "dp/core/ordered_dict.h"
#include "dp/core/serialize.h"
#include "dp/core/tensor.h"
#include "dp/core/threads.h"
#include "dp/ops/attention.h"
#include "dp/ops/conv.h"
#include "dp/ops/dropout.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/loss.h"
#include "dp/ops/normalization.h"
#include "dp/ops/pooling.h"
#include "dp/ops/reduction.h"
#include "dp/ops/rnn.h"
#include "dp/ops/sequence.h"
#include "dp/ops/shape.h"
