#pragma once
#include "dp/autograd/engine.h"
#include "dp/autograd/function.h"
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"
#include "dp/autograd/saved_variable.h"
