#pragma once
// Multi-process data parallelism (namespace dp::distributed): include this one header.
#include "dp/distributed/checkpoint.h"
#include "dp/distributed/comm_hooks.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/init.h"
#include "dp/distributed/join.h"
#include "dp/distributed/process_group.h"
#include "dp/distributed/reducer.h"
#include "dp/distributed/store.h"
#include "dp/distributed/work.h"
#include "dp/distributed/zero_redundancy_optimizer.h"
