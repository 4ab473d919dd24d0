#include "dp/nn/serialize.h"

namespace dp {

namespace nn {
TensorDict strip_module_prefix(const TensorDict& state) {
  static const std::string kPrefix = "module.";
  if (state.empty()) return state;
  for (const auto& item : state)
    if (item.key().rfind(kPrefix, 0) != 0) return state;
  TensorDict out;
  for (const auto& item : state) out.insert(item.key().substr(kPrefix.size()), item.value());
  return out;
}
}  // namespace nn

void save(const nn::Module& module, const std::string& path) {
  save(module.state_dict(), path, {{"format", "pt"}, {"dparallel_module", module.name()}});
}

nn::LoadResult load(nn::Module& module, const std::string& path, bool strict) {
  nn::TensorDict state = load(path);
  // Only strip when it makes the keys match: a model whose own keys start with "module." (a
  // wrapper's child named module) loads its checkpoint unchanged.
  nn::TensorDict own = module.state_dict();
  bool own_prefixed = !own.empty() && own.begin()->key().rfind("module.", 0) == 0;
  if (!own_prefixed) state = nn::strip_module_prefix(state);
  try {
    return module.load_state_dict(state, strict);
  } catch (const ValueError& e) {
    throw ValueError(std::string(e.what()) + "\n\t(checkpoint: " + path + ")");
  }
}

}  // namespace dp
