#pragma once
// ParameterList and ParameterDict (torch.nn.ParameterList / ParameterDict, libtorch's
// torch::nn::ParameterList / ParameterDict): modules that only hold parameters.
//
//   struct Model : dp::nn::Module {
//     dp::nn::ParameterList scales;
//     dp::nn::ParameterDict gates;
//     Model() {
//       scales = register_module("scales", dp::nn::ParameterList(dp::ones({3}), dp::zeros({3})));
//       gates = register_module("gates", dp::nn::ParameterDict());
//       gates->insert("input", dp::ones({3}));
//     }
//     dp::Tensor forward(const dp::Tensor& x) { return x * scales[0] + gates["input"]; }
//   };
//
// The parameters live in the module's own registry under "0", "1", ... (ParameterList) or their
// keys (ParameterDict), so named_parameters() and state_dict() call them "scales.0" and
// "gates.input", as PyTorch does, and to(), clone(), load_state_dict() and DataParallel's
// replicas follow them with no extra code. Lookups read the registry, so inside a replica they
// return the replica's parameters (with autograd history leading back to the originals).
//
// A tensor becomes a parameter as in register_parameter(): it must be a leaf (pass t.detach() for
// a computed tensor) and gets requires_grad = true unless asked otherwise (PyTorch wraps a plain
// tensor in a Parameter, which requires grad). Neither container has a forward().
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

class ParameterListImpl : public Module {
 public:
  ParameterListImpl() = default;
  explicit ParameterListImpl(const std::vector<Tensor>& params) { extend(params); }
  template <typename... Ts>
  requires(sizeof...(Ts) > 0 && (std::is_convertible_v<Ts, Tensor> && ...)) explicit ParameterListImpl(Ts&&... params) {
    (append(Tensor(std::forward<Ts>(params))), ...);
  }

  // Registers `param` as parameter str(size()) and returns it. Undefined tensors are a ValueError.
  Tensor append(Tensor param, bool requires_grad = true);
  void extend(const std::vector<Tensor>& params, bool requires_grad = true);

  size_t size() const { return own_parameters().size(); }
  bool is_empty() const { return own_parameters().empty(); }
  // Element `index`; negative counts from the end (Python's list indexing). IndexError if out of range.
  Tensor operator[](int64_t index) const;
  Tensor at(int64_t index) const { return (*this)[index]; }
  // The parameters in order.
  std::vector<Tensor> items() const { return own_parameters().values(); }
  auto begin() const { return own_parameters().begin(); }
  auto end() const { return own_parameters().end(); }

  // PyTorch's lines: "  (0): Parameter containing: [torch.float32 of size 2x3]".
  std::string extra_repr() const override;
};
using ParameterList = ModuleHolder<ParameterListImpl>;

class ParameterDictImpl : public Module {
 public:
  ParameterDictImpl() = default;
  // Inserted in the order given.
  explicit ParameterDictImpl(const std::vector<std::pair<std::string, Tensor>>& params) { update(params); }
  explicit ParameterDictImpl(const OrderedDict<std::string, Tensor>& params);

  // Registers `param` under `key` and returns it. The key follows parameter-name rules (not
  // empty, no '.'); a key already present is a ValueError, as in libtorch (a parameter's slot is
  // never re-pointed; change its values with copy_() or load_state_dict()).
  Tensor insert(const std::string& key, Tensor param, bool requires_grad = true);
  void update(const std::vector<std::pair<std::string, Tensor>>& params, bool requires_grad = true);

  bool contains(const std::string& key) const { return own_parameters().contains(key); }
  // The parameter under `key`; IndexError naming the key if absent.
  Tensor operator[](const std::string& key) const;
  Tensor get(const std::string& key) const { return (*this)[key]; }
  size_t size() const { return own_parameters().size(); }
  bool is_empty() const { return own_parameters().empty(); }
  std::vector<std::string> keys() const { return own_parameters().keys(); }
  std::vector<Tensor> values() const { return own_parameters().values(); }
  const TensorDict& items() const { return own_parameters(); }
  auto begin() const { return own_parameters().begin(); }
  auto end() const { return own_parameters().end(); }

  // PyTorch's lines: "  (key): Parameter containing: [torch.FloatTensor of size 2x3]".
  std::string extra_repr() const override;
};
using ParameterDict = ModuleHolder<ParameterDictImpl>;

}  // namespace dp::nn
