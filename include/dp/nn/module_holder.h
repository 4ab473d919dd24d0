#pragma once
// ModuleHolder<Impl>: libtorch's shared handle to a module (`dp::nn::Linear` is
// ModuleHolder<LinearImpl>). Copying shares the module; calling it calls forward(). During a
// module clone, a copied holder re-points to the clone of its module (dp/core/clone_map.h), which
// is what makes a user model's `Linear fc;` member follow its copy.
#include <cstddef>
#include <memory>
#include <ostream>
#include <type_traits>
#include <utility>
#include "dp/core/clone_map.h"
#include "dp/core/errors.h"
#include "dp/core/zeroed_allocator.h"
#include "dp/nn/module_call.h"

namespace dp::nn {

template <typename Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;

  // An empty holder, to be assigned later (`Linear fc{nullptr};`).
  ModuleHolder(std::nullptr_t) {}  // NOLINT
  // Default-constructs the module when it can be (`ReLU relu;`).
  ModuleHolder() requires std::is_default_constructible_v<Impl> : impl_(std::allocate_shared<Impl>(dp::detail::ZeroedAllocator<Impl>())) {
    impl_->template remember_type<Impl>();
  }
  // Constructs the module from the arguments (`Linear(5, 2)`).
  template <typename Head, typename... Tail>
  requires(!std::is_same_v<std::decay_t<Head>, ModuleHolder> && !std::is_same_v<std::decay_t<Head>, std::nullptr_t> &&
           !std::is_same_v<std::decay_t<Head>, std::shared_ptr<Impl>> &&
           std::is_constructible_v<Impl, Head, Tail...>) explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::allocate_shared<Impl>(dp::detail::ZeroedAllocator<Impl>(), std::forward<Head>(head), std::forward<Tail>(tail)...)) {
    impl_->template remember_type<Impl>();
  }
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {  // NOLINT
    if (impl_) impl_->template remember_type<Impl>();
  }
  ModuleHolder(const ModuleHolder& o) : impl_(o.impl_) {
    if (dp::detail::tls_clone_map != nullptr && impl_) [[unlikely]] {
      auto it = dp::detail::tls_clone_map->modules.find(impl_.get());
      if (it != dp::detail::tls_clone_map->modules.end()) impl_ = std::static_pointer_cast<Impl>(it->second);
    }
  }
  ModuleHolder(ModuleHolder&&) noexcept = default;
  ModuleHolder& operator=(const ModuleHolder&) = default;
  ModuleHolder& operator=(ModuleHolder&&) noexcept = default;

  Impl* operator->() const { return &checked(); }
  Impl& operator*() const { return checked(); }
  Impl* get() const { return impl_.get(); }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  operator std::shared_ptr<Impl>() const { return impl_; }  // NOLINT
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  // module(args...): forward with the module's hooks (PyTorch's Module.__call__).
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    return call(checked(), std::forward<Args>(args)...);
  }

 private:
  Impl& checked() const {
    DP_CHECK(impl_ != nullptr, ValueError, "accessing an empty module holder (constructed with nullptr and never assigned)");
    return *impl_;
  }
  std::shared_ptr<Impl> impl_;
};

template <typename Impl>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<Impl>& h) {
  if (h.is_empty()) return os << "None";
  h->pretty_print(os);
  return os;
}

}  // namespace dp::nn
