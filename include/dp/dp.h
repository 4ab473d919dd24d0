#pragma once
// Everything of dparallel's core: include this one header.
#include "dp/autograd/autograd.h"
#include "dp/core/device_registry.h"
#include "dp/core/generator.h"
#include "dp/core/tensor.h"
#include "dp/core/threads.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
