#include "dp/nn/modules/module_dict.h"

namespace dp::nn {

ModuleDictImpl::ModuleDictImpl(const OrderedDict<std::string, ModulePtr>& modules) {
  for (const auto& item : modules) insert(item.key(), item.value());
}

void ModuleDictImpl::update(const std::vector<std::pair<std::string, ModulePtr>>& modules) {
  for (const auto& [key, m] : modules) insert(key, m);
}

ModulePtr ModuleDictImpl::operator[](const std::string& key) const {
  const ModulePtr* m = own_children().find(key);
  DP_CHECK(m != nullptr, IndexError, "ModuleDict: no module with key '", key, "'");
  return *m;
}

}  // namespace dp::nn
