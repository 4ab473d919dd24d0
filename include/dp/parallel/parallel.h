#pragma once
// Data parallelism: DataParallel and the primitives it is made of.
#include "dp/parallel/balance.h"
#include "dp/parallel/comm.h"
#include "dp/parallel/data_parallel.h"
#include "dp/parallel/parallel_apply.h"
#include "dp/parallel/parallel_loss.h"
#include "dp/parallel/replicate.h"
#include "dp/parallel/scatter_gather.h"
