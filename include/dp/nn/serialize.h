#pragma once
// Saving and loading a module's state_dict as a safetensors checkpoint (dp/core/serialize.h):
//
//   dp::save(model, "model.safetensors");     // atomic: the previous file survives a failed save
//   dp::load(model, "model.safetensors");     // strict: missing/unexpected keys, shapes named
//
// The keys are the module's state_dict keys ("fc.weight"), so PyTorch's
// model.load_state_dict(safetensors.torch.load_file(path)) reads our file and we read its files.
// A checkpoint whose keys all start with "module." (saved from a DataParallel-wrapped PyTorch
// model) loads into the bare module: the prefix is stripped when the bare keys then match.
#include <concepts>
#include <memory>
#include <string>
#include "dp/core/serialize.h"
#include "dp/nn/module.h"

namespace dp {

void save(const nn::Module& module, const std::string& path);
nn::LoadResult load(nn::Module& module, const std::string& path, bool strict = true);

// The shared_ptr overloads take modules only, so dp/optim/serialize.h's optimizer overloads never
// compete with them (dp::load(std::shared_ptr<Adam>, path) is not ambiguous).
template <typename M>
requires std::derived_from<M, nn::Module>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  DP_CHECK(module != nullptr, ValueError, "save: null module");
  save(static_cast<const nn::Module&>(*module), path);
}
template <typename M>
void save(const nn::ModuleHolder<M>& module, const std::string& path) {
  save(module.ptr(), path);
}
template <typename M>
requires std::derived_from<M, nn::Module> nn::LoadResult load(const std::shared_ptr<M>& module, const std::string& path, bool strict = true) {
  DP_CHECK(module != nullptr, ValueError, "load: null module");
  return load(static_cast<nn::Module&>(*module), path, strict);
}
template <typename M>
nn::LoadResult load(const nn::ModuleHolder<M>& module, const std::string& path, bool strict = true) {
  return load(module.ptr(), path, strict);
}

namespace nn {
// Drops a leading "module." from every key when all keys have it (DataParallel checkpoints).
TensorDict strip_module_prefix(const TensorDict& state);
}  // namespace nn

}  // namespace dp
