#pragma once
// Optimizers and learning-rate schedulers: include this one header.
#include "dp/optim/adam.h"
#include "dp/optim/grad_scaler.h"
#include "dp/optim/lr_scheduler.h"
#include "dp/optim/optimizer.h"
#include "dp/optim/serialize.h"
#include "dp/optim/sgd.h"
