#pragma once
// Saving and loading an optimizer's state (Optimizer::state_dict: per-parameter buffers, step
// counts, each group's hyper-parameters) as a safetensors checkpoint (dp/core/serialize.h):
//
//   dp::save(model, "model.safetensors");        // dp/nn/serialize.h
//   dp::save(optimizer, "optim.safetensors");    // this header
//   ...
//   dp::load(model, "model.safetensors");
//   dp::load(optimizer, "optim.safetensors");    // training continues exactly where it stopped
//
// The tensors are torch.optim's state layout ("state.0.exp_avg", "state.0.step", ...); the groups
// (hyper-parameters and parameter indices) and the optimizer's name are JSON/strings in the file's
// metadata ("param_groups", "optimizer"). Writes are atomic, as every dp::save: a failed or
// interrupted save leaves the previous file in place. Loading checks the file first (IOError /
// ValueError naming the file when it is missing, truncated or corrupt) and then the state against
// the optimizer (ValueError naming the path and the problem: another optimizer's state, group or
// parameter counts, shapes); on any error the optimizer is left unchanged.
//
// A learning-rate scheduler's state (LRScheduler::state_dict, dp/optim/lr_scheduler.h) can travel
// in the same file, as JSON in the metadata entry "lr_scheduler":
//
//   dp::save(optimizer, scheduler, "optim.safetensors");
//   dp::load(optimizer, scheduler, "optim.safetensors");  // both resume; the lrs continue as if
//                                                        // training had never stopped
//
// Loading both checks the scheduler's state (ValueError naming the path: a file without one,
// another scheduler's, a bad field) and the optimizer's before changing either. dp::load(optimizer,
// path) reads such a file too (it ignores the scheduler's entry).
#include <concepts>
#include <memory>
#include <string>
#include "dp/optim/lr_scheduler.h"
#include "dp/optim/optimizer.h"

namespace dp {

void save(const optim::Optimizer& optimizer, const std::string& path);
void load(optim::Optimizer& optimizer, const std::string& path);
void save(const optim::Optimizer& optimizer, const optim::LRScheduler& scheduler, const std::string& path);
void load(optim::Optimizer& optimizer, optim::LRScheduler& scheduler, const std::string& path);

// Through a shared_ptr too: dp::save(std::make_shared<SGD>(...), path), dp::load(optimizer, path).
// (dp/nn/serialize.h's shared_ptr overloads take modules only, so these never compete with them.)
template <typename O>
requires std::derived_from<O, optim::Optimizer>
void save(const std::shared_ptr<O>& optimizer, const std::string& path) {
  DP_CHECK(optimizer != nullptr, ValueError, "save: null optimizer");
  save(static_cast<const optim::Optimizer&>(*optimizer), path);
}
template <typename O>
requires std::derived_from<O, optim::Optimizer>
void load(const std::shared_ptr<O>& optimizer, const std::string& path) {
  DP_CHECK(optimizer != nullptr, ValueError, "load: null optimizer");
  load(static_cast<optim::Optimizer&>(*optimizer), path);
}

}  // namespace dp
