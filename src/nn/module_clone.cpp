// Deep copies of module trees: new tensors first, then the classes' own copy constructors run with
// a clone map installed so every member re-points to the copy (see dp/core/clone_map.h).
#include <unordered_set>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/module.h"

namespace dp::nn {

bool Module::is_clonable() const {
  if (copier_ == nullptr) return false;
  for (const auto& c : children_)
    if (c.value() && !c.value()->is_clonable()) return false;
  return true;
}

ModulePtr Module::clone_with(const TensorCloneFn& make_tensor) const {
  DP_CHECK(copier_ != nullptr, NotImplementedError, "cannot copy module ", name(), ": its exact type is unknown; create it through std::make_shared<",
           name(), "> and pass it as std::shared_ptr<", name(), "> (nn::clone, DataParallel) or hold it in a ModuleHolder");
  dp::detail::CloneMap map;
  {
    // Phase 1, no remapping: the copy's tensors, one per distinct original (tied weights stay tied).
    dp::detail::CloneMapGuard off(nullptr);
    std::vector<const Module*> stack{this};
    std::unordered_set<const Module*> visited;
    while (!stack.empty()) {
      const Module* m = stack.back();
      stack.pop_back();
      if (!visited.insert(m).second) continue;
      m->sync_bound();
      auto add = [&](const TensorDict& dict, bool is_param) {
        for (const auto& item : dict) {
          const Tensor& t = item.value();
          if (!t.defined() || map.tensors.count(t.unsafe_impl())) continue;
          Tensor copy = make_tensor(t, is_param);
          DP_CHECK(copy.defined(), ValueError, "clone: the tensor factory returned an undefined tensor for '", item.key(), "'");
          map.tensors.emplace(t.unsafe_impl(), copy.impl_ptr());
        }
      };
      add(m->parameters_, true);
      add(m->buffers_, false);
      for (const auto& c : m->children_)
        if (c.value()) stack.push_back(c.value().get());
    }
  }
  // Phase 2: copy-construct the tree with the map installed.
  dp::detail::CloneMapGuard on(&map);
  ModulePtr copy = copier_(*this);
  return copy;
}

ModulePtr Module::clone(std::optional<Device> device) const {
  return clone_with([device](const Tensor& t, bool is_param) {
    NoGradGuard no_grad;
    Tensor c = t.detach().to(device.value_or(t.device()), t.dtype(), false, /*copy=*/true);
    if (is_param) c.requires_grad_(t.requires_grad());
    Tensor g = t.grad();
    if (g.defined()) c.set_grad(g.detach().to(c.device(), g.dtype(), false, true));
    return c;
  });
}

}  // namespace dp::nn
