#pragma once
// dparallel's umbrella header, as <torch/torch.h>: every public layer of the library. A program
// includes this one header.
//
//   dp/core.h                      tensors, devices, ops, autograd, tensor checkpoints (safetensors)
//   dp/amp/*                       autocast and GradScaler (mixed precision)
//   dp/nn/nn.h                     modules, layers, losses, nn::functional, module checkpoints
//   dp/nn/utils/checkpoint.h       activation checkpointing (dp::utils::checkpoint)
//   dp/optim/optim.h               optimizers and learning-rate schedulers
//   dp/data/data.h                 datasets, samplers, DataLoader
//   dp/parallel/parallel.h         DataParallel and its primitives
//   dp/distributed/*               process groups, DistributedDataParallel, ZeRO, SyncBatchNorm,
//                                  collective checkpoints, what a launched worker needs
//   dp/models/gpt.h                ready-made networks (GPT)
//
// Not included: dp/autograd/gradcheck.h (include it where you check gradients) and dp/cuda/*, the
// CUDA runtime's own API (streams, events, graphs), which needs the CUDA library dparallel::cuda.
// Whether CUDA devices are there is core's question: dp::cuda::is_available(), dp::devices(...).
//
// Library code never includes this header (scripts/check_layers.py): it is for programs. Including
// everything costs compile time; a translation unit that needs only tensors may include dp/core.h.
#include "dp/amp/autocast.h"
#include "dp/optim/grad_scaler.h"
#include "dp/core.h"
#include "dp/data/data.h"
#include "dp/distributed/distributed.h"
#include "dp/distributed/launch.h"
#include "dp/distributed/sync_batch_norm.h"
#include "dp/distributed/timeline.h"
#include "dp/models/gpt.h"
#include "dp/nn/nn.h"
#include "dp/nn/utils/checkpoint.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
