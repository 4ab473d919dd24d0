#pragma once
// ModuleDict (torch.nn.ModuleDict, libtorch's torch::nn::ModuleDict): children addressed by key,
// in insertion order.
//
//   struct Model : dp::nn::Module {
//     dp::nn::ModuleDict heads{nullptr};
//     Model() {
//       heads = register_module("heads", dp::nn::ModuleDict());
//       heads->insert("cls", dp::nn::Linear(8, 4));
//       heads->insert("box", dp::nn::Linear(8, 2));
//     }
//     dp::Tensor forward(const dp::Tensor& x) { return heads->at<dp::nn::LinearImpl>("cls")->forward(x); }
//   };
//
// The children are registered under their keys, so parameters are named "heads.cls.weight" as in
// PyTorch, and clone(), to(), state dicts and DataParallel's replicas follow them. Lookups read the
// registry, so inside a replica they return the replica's children. ModuleDict has no forward().
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() = default;
  // Inserted in the order given. The modules' exact types are known when they were made by a
  // ModuleHolder (nn::Linear(...)) or passed through one; copies (clone, DataParallel) need it.
  explicit ModuleDictImpl(const std::vector<std::pair<std::string, ModulePtr>>& modules) { update(modules); }
  explicit ModuleDictImpl(const OrderedDict<std::string, ModulePtr>& modules);

  // Registers `module` under `key` (key rules as register_module: not empty, no '.'); a key
  // already present has its module replaced in place (libtorch's insert, PyTorch's d[key] = m).
  // A null module is a ValueError.
  template <typename M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> module) {
    DP_CHECK(module != nullptr, ValueError, "ModuleDict::insert: the module for key '", key, "' is null");
    if (contains(key)) return replace_module(key, std::move(module));
    return register_module(key, std::move(module));
  }
  template <typename M>
  ModuleHolder<M> insert(const std::string& key, const ModuleHolder<M>& holder) {
    insert(key, holder.ptr());
    return holder;
  }
  void update(const std::vector<std::pair<std::string, ModulePtr>>& modules);

  bool contains(const std::string& key) const { return own_children().contains(key); }
  // The child under `key`; IndexError naming the key if absent.
  ModulePtr operator[](const std::string& key) const;
  // The child as its own type; ValueError if it is not an M.
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const {
    ModulePtr m = (*this)[key];
    auto p = std::dynamic_pointer_cast<M>(m);
    DP_CHECK(p != nullptr, ValueError, "ModuleDict::at: the module under key '", key, "' is a ", m->name(), ", not the requested type");
    return p;
  }
  size_t size() const { return own_children().size(); }
  bool is_empty() const { return own_children().empty(); }
  std::vector<std::string> keys() const { return own_children().keys(); }
  std::vector<ModulePtr> values() const { return own_children().values(); }
  const OrderedDict<std::string, ModulePtr>& items() const { return own_children(); }
  auto begin() const { return own_children().begin(); }
  auto end() const { return own_children().end(); }
};
using ModuleDict = ModuleHolder<ModuleDictImpl>;

}  // namespace dp::nn
