#pragma once
// dp::nn: modules, layers, losses and initialisation. Include this one header.
#include "dp/nn/init.h"
#include "dp/nn/module.h"
#include "dp/nn/modules/activation.h"
#include "dp/nn/modules/container.h"
#include "dp/nn/modules/embedding.h"
#include "dp/nn/modules/linear.h"
