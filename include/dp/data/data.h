#pragma once
// Data loading (namespace dp::data): include this one header.
#include "dp/data/dataloader.h"
#include "dp/data/dataset.h"
#include "dp/data/distributed_sampler.h"
#include "dp/data/example.h"
#include "dp/data/fashion_mnist.h"
#include "dp/data/map_dataset.h"
#include "dp/data/random_dataset.h"
#include "dp/data/sampler.h"
#include "dp/data/tensor_dataset.h"
#include "dp/data/transforms.h"
