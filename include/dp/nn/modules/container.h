#pragma once
// Sequential (children called in order) and ModuleList (an indexable list of children). Both keep
// their children in the module registry named "0", "1", ... (or given names), so state_dict keys
// equal PyTorch's ("0.weight", "layers.2.bias") and clones follow them with no extra code.
#include <concepts>
#include <memory>
#include <string>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

template <typename M>
concept TensorToTensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& t) {
  { m.forward(t) } -> std::convertible_to<Tensor>;
};

class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && (!std::is_same_v<std::decay_t<Ms>, SequentialImpl> && ...)) explicit SequentialImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <TensorToTensorModule M>
  void push_back(std::string name, std::shared_ptr<M> module) {
    DP_CHECK(module != nullptr, ValueError, "Sequential::push_back: null module");
    register_module(std::move(name), module);
    calls_.push_back(&call_forward<M>);
  }
  template <TensorToTensorModule M>
  void push_back(std::shared_ptr<M> module) {
    push_back(std::to_string(calls_.size()), std::move(module));
  }
  template <typename M>
  void push_back(const ModuleHolder<M>& holder) {
    push_back(holder.ptr());
  }
  template <typename M>
  void push_back(std::string name, const ModuleHolder<M>& holder) {
    push_back(std::move(name), holder.ptr());
  }

  // Replaces the child at `index` (same name) by `module`, which is called as its own type from
  // then on (replace_module() alone would leave the old type's call; convert_sync_batchnorm uses it).
  template <TensorToTensorModule M>
  void replace(size_t index, std::shared_ptr<M> module) {
    DP_CHECK(module != nullptr, ValueError, "Sequential::replace: null module");
    DP_CHECK(index < calls_.size(), IndexError, "Sequential::replace: index ", index, " out of range for a Sequential of ", calls_.size());
    replace_module(own_children()[index].key(), module);
    calls_[index] = &call_forward<M>;
  }

  // Runs the children in order.
  Tensor forward(const Tensor& input) const;
  // Runs children [begin, end) in order (checkpoint_sequential's segments).
  Tensor forward_range(const Tensor& input, size_t begin, size_t end) const;

  size_t size() const { return calls_.size(); }
  bool is_empty() const { return calls_.empty(); }
  ModulePtr operator[](size_t index) const;
  // The child at `index` as its own type (throws if it is not an M).
  template <typename M>
  std::shared_ptr<M> ptr(size_t index) const {
    auto p = std::dynamic_pointer_cast<M>((*this)[index]);
    DP_CHECK(p != nullptr, ValueError, "Sequential::ptr: element ", index, " is a ", (*this)[index]->name(), ", not the requested type");
    return p;
  }

 private:
  template <typename M>
  static Tensor call_forward(Module& m, const Tensor& x) {
    return call(static_cast<M&>(m), x);
  }  // children's hooks run
  using Call = Tensor (*)(Module&, const Tensor&);
  std::vector<Call> calls_;  // one per child, same order as the registry
};
using Sequential = ModuleHolder<SequentialImpl>;

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && (!std::is_same_v<std::decay_t<Ms>, ModuleListImpl> && ...)) explicit ModuleListImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  template <typename M>
  void push_back(std::shared_ptr<M> module) {
    DP_CHECK(module != nullptr, ValueError, "ModuleList::push_back: null module");
    register_module(std::to_string(own_children().size()), std::move(module));
  }
  template <typename M>
  void push_back(const ModuleHolder<M>& holder) {
    push_back(holder.ptr());
  }

  size_t size() const { return own_children().size(); }
  bool is_empty() const { return own_children().empty(); }
  ModulePtr operator[](size_t index) const;
  template <typename M>
  std::shared_ptr<M> ptr(size_t index) const {
    auto p = std::dynamic_pointer_cast<M>((*this)[index]);
    DP_CHECK(p != nullptr, ValueError, "ModuleList::ptr: element ", index, " is a ", (*this)[index]->name(), ", not the requested type");
    return p;
  }
  std::vector<ModulePtr> items() const;
};
using ModuleList = ModuleHolder<ModuleListImpl>;

}  // namespace dp::nn
