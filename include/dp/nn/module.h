#pragma once
// nn::Module: the base of every layer and every user model, as in libtorch.
//
//   struct Model : dp::nn::Module {
//     dp::nn::Linear fc{nullptr};
//     Model(int64_t in, int64_t out) { fc = register_module("fc", dp::nn::Linear(in, out)); }
//     dp::Tensor forward(const dp::Tensor& x) { return fc(x); }
//   };
//
// Parameters, buffers and children are registered by name in insertion order; names join with
// '.' ("fc.weight") in named_parameters() and state_dict(), exactly as PyTorch names them.
//
// Deep copy (clone(), and DataParallel's replicas) needs nothing from the derived class beyond
// being copy-constructible: the class's own copy constructor runs while a clone map is installed
// (dp/core/clone_map.h), so its Tensor and ModuleHolder members re-point to the copy's own
// parameters and children. The exact type is remembered when the module passes through a typed
// entry point: register_module<M>, ModuleHolder<M>, nn::clone<M>, DataParallel<M>. Members that
// are std::shared_ptr<Child> or raw pointers are not re-pointed: hold children as
// ModuleHolder<Child> (or reach them through the registry). A clone whose copy still holds the
// address of a module of the original (such a member, or a lambda capturing one) is refused with a
// ValueError naming both modules (the copy would run the original's child: under DataParallel, on
// the wrong device). Containers of such pointers (std::vector<std::shared_ptr<Child>>) live
// outside the object and are not detected: use ModuleList or std::vector<ModuleHolder<Child>>.
//
// Weight tying (PyTorch's `lm_head.weight = wte.weight`): the library's layers bind their public
// Tensor members to their registry slots (bind_tensor), so assigning the member re-registers it:
//
//   lm_head->weight = wte->weight;   // one tensor, registered as "wte.weight" and "lm_head.weight"
//
// parameters() then yields it once (under its first name in traversal order), state_dict() has
// both keys, clones and DataParallel replicas keep one shared tensor, and both uses accumulate into
// its one .grad. register_parameter(name, t) on an existing parameter name re-points the slot too.
#include <atomic>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>
#include "dp/core/clone_map.h"
#include "dp/core/ordered_dict.h"
#include "dp/core/tensor.h"
#include "dp/core/zeroed_allocator.h"
#include "dp/nn/hooks.h"

namespace dp::nn {

class Module;
template <typename Impl>
class ModuleHolder;
using ModulePtr = std::shared_ptr<Module>;
using TensorDict = OrderedDict<std::string, Tensor>;

// Makes the copy's tensor for each original parameter (is_parameter) or buffer during a clone.
using TensorCloneFn = std::function<Tensor(const Tensor& original, bool is_parameter)>;

// What load_state_dict(strict = false) could not match (strict mode throws instead).
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

namespace detail {
template <typename M>
std::shared_ptr<Module> copy_module(const Module& m);
template <typename T>
struct member_class {};
template <typename C>
struct member_class<Tensor C::*> {
  using type = C;
};
}  // namespace detail

class Module : public std::enable_shared_from_this<Module> {
 public:
  using Copier = std::shared_ptr<Module> (*)(const Module&);

  Module();
  // `name` overrides the printed type name (default: the class name without namespace or "Impl").
  explicit Module(std::string name);
  virtual ~Module() = default;
  // Outside a clone: a shallow copy (children and tensors shared). During clone(): children are
  // cloned and tensor members re-pointed (see the header comment).
  Module(const Module& other);
  Module& operator=(const Module&) = delete;

  // The printed type name: "Linear", "Sequential", "Model".
  const std::string& name() const;

  // ---- registration (names: non-empty, no '.', unique across parameters, buffers, children) ----
  // An undefined tensor registers an absent parameter (bias=False): kept in the slot, skipped by
  // parameters() and state_dict(). A parameter must be a leaf (no autograd history).
  // On a name that is already a parameter, the slot is re-pointed to `tensor` (Python's
  // register_parameter / attribute assignment; a member bound to the slot follows); a name that is
  // a buffer or a submodule is an error.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  // Non-persistent buffers are moved by to() and replicated, but not saved in state_dict(). On a
  // name that is already a buffer, the slot is re-pointed (and its persistence set) as above.
  Tensor register_buffer(std::string name, Tensor tensor, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from dp::nn::Module");
    if (module) module->template remember_type<M>();
    add_child(std::move(name), module);
    return module;
  }
  template <typename M>
  ModuleHolder<M> register_module(std::string name, ModuleHolder<M> holder) {
    register_module(std::move(name), holder.ptr());
    return holder;
  }
  // Replaces an existing child (same name), e.g. to swap a layer of a loaded model.
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    if (module) module->template remember_type<M>();
    set_child(name, module);
    return module;
  }

  // ---- queries (ordered as PyTorch orders them; parameters de-duplicated by tensor) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  TensorDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  std::vector<ModulePtr> children() const;
  OrderedDict<std::string, ModulePtr> named_children() const;
  // Pre-order, de-duplicated. include_self needs this module to be owned by a shared_ptr.
  std::vector<ModulePtr> modules(bool include_self = true) const;
  OrderedDict<std::string, ModulePtr> named_modules(const std::string& prefix = "", bool include_self = true) const;
  // This module's own slots (absent parameters included, as undefined tensors), bound members
  // re-read first (see bind_tensor).
  const TensorDict& own_parameters() const {
    sync_bound();
    return parameters_;
  }
  const TensorDict& own_buffers() const {
    sync_bound();
    return buffers_;
  }
  const OrderedDict<std::string, ModulePtr>& own_children() const { return children_; }
  bool is_persistent_buffer(const std::string& name) const;
  // The prefix under which the tensors of this module's child `key` are named, given this
  // module's own prefix ("fc" under "", "block.fc" under "block"; a transparent wrapper adds nothing).
  std::string child_tensor_prefix(const std::string& prefix, const std::string& key) const;

  // ---- mode, device, gradients ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Sets this module's flag only (train() recurses and may be overridden); replicas use it to
  // mirror each original module's mode.
  void set_training_flag(bool on) { training_ = on; }
  // Moves/converts every parameter and buffer in place (handles held elsewhere, e.g. by an
  // optimizer, see the change); gradients move too. Only floating tensors change dtype.
  virtual void to(Device device, bool non_blocking = false);
  virtual void to(DType dtype, bool non_blocking = false);
  virtual void to(Device device, DType dtype, bool non_blocking = false);
  // Clears (set_to_none) or zeroes every parameter's gradient. On a DataParallel replica it does
  // nothing but warn, as PyTorch does (see is_replica()).
  virtual void zero_grad(bool set_to_none = true);
  // Calls fn on every submodule, children first, then this module (PyTorch's order).
  void apply(const std::function<void(Module&)>& fn);

  // ---- state ----
  // Parameters then persistent buffers of each module, children after their parent, keys joined
  // with '.'; the tensors alias the module's (detached).
  TensorDict state_dict() const;
  // Copies values in (converting device and dtype). Shape mismatches always throw; missing and
  // unexpected keys throw when strict, else are returned. All problems are reported in one error.
  LoadResult load_state_dict(const TensorDict& state, bool strict = true);

  // ---- printing ----
  // The one-line description inside the parentheses ("in_features=5, out_features=2, bias=True").
  virtual std::string extra_repr() const { return ""; }
  // PyTorch's repr of the module tree.
  virtual void pretty_print(std::ostream& os) const;
  std::string to_string() const;

  // ---- copies ----
  // A deep copy: new parameters and buffers (values and gradients copied, to `device` if given),
  // children cloned, shared submodules and tied parameters stay shared within the copy.
  ModulePtr clone(std::optional<Device> device = std::nullopt) const;
  // The same with the copy's tensors made by `make_tensor` (DataParallel's replicas use this).
  ModulePtr clone_with(const TensorCloneFn& make_tensor) const;
  // Whether clone() knows how to copy this module and every descendant.
  bool is_clonable() const;

  // Records M as the exact type to copy this module as (ignored if M is not the dynamic type).
  template <typename M>
  void remember_type() {
    if (copier_ == nullptr && typeid(*this) == typeid(M)) copier_ = &detail::copy_module<M>;
  }
  Copier copier() const { return copier_; }

  // ---- hooks (PyTorch's module hooks; signatures, order and threads in dp/nn/hooks.h) ----
  // They run when the module is called (`fc(x)`, nn::call), not when forward() is called directly.
  // `name` (optional) appears in the error message when the hook throws.
  template <typename F>
  RemovableHandle register_forward_pre_hook(F&& hook, const std::string& name = "") {
    static_assert(std::is_invocable_v<F&, Module&, const TensorList&>,
                  "register_forward_pre_hook: the hook must be callable as hook(Module&, const dp::nn::TensorList& inputs)");
    return add_hook(detail::HookKind::ForwardPre, detail::adapt_unary_hook(std::forward<F>(hook)), name);
  }
  template <typename F>
  RemovableHandle register_forward_hook(F&& hook, const std::string& name = "") {
    if constexpr (std::is_invocable_v<F&, Module&, const TensorList&, const TensorList&>) {
      return add_hook(detail::HookKind::Forward, detail::adapt_binary_hook(std::forward<F>(hook)), name);
    } else {
      static_assert(std::is_invocable_v<F&, Module&, const TensorList&, const Tensor&>,
                    "register_forward_hook: the hook must be callable as hook(Module&, const dp::nn::TensorList& inputs, const "
                    "dp::nn::TensorList& outputs) or hook(Module&, const dp::nn::TensorList& inputs, const dp::Tensor& output)");
      return add_hook(detail::HookKind::Forward, detail::adapt_single_output_hook(std::forward<F>(hook)), name);
    }
  }
  template <typename F>
  RemovableHandle register_full_backward_hook(F&& hook, const std::string& name = "") {
    static_assert(std::is_invocable_v<F&, Module&, const TensorList&, const TensorList&>,
                  "register_full_backward_hook: the hook must be callable as hook(Module&, const dp::nn::TensorList& grad_input, "
                  "const dp::nn::TensorList& grad_output)");
    return add_hook(detail::HookKind::FullBackward, detail::adapt_binary_hook(std::forward<F>(hook)), name);
  }
  template <typename F>
  RemovableHandle register_full_backward_pre_hook(F&& hook, const std::string& name = "") {
    static_assert(std::is_invocable_v<F&, Module&, const TensorList&>,
                  "register_full_backward_pre_hook: the hook must be callable as hook(Module&, const dp::nn::TensorList& grad_output)");
    return add_hook(detail::HookKind::FullBackwardPre, detail::adapt_unary_hook(std::forward<F>(hook)), name);
  }
  // Whether any hook is registered (the call path's fast check).
  bool has_hooks() const { return !hooks_->empty(); }
  // The hooks registered now, per kind (what one call runs).
  detail::HookSnapshot hook_snapshot() const { return hooks_->snapshot(); }
  // Makes this module use `other`'s hooks (the same registry, not a copy): replicate() does it, so
  // hooks registered on the original, before or after the replicas were built, fire in every replica.
  void share_hooks_with(const Module& other) { hooks_ = other.hooks_; }

  // ---- replicas ----
  // Whether this module is one of the copies DataParallel runs on each device (replicate()). Its
  // parameters are not leaves: gradients go to the original module's, so zero_grad() on a replica
  // has no effect; it warns instead (PyTorch's "Calling .zero_grad() from a module created with
  // nn.DataParallel() has no effect."). A clone of a replica is not a replica.
  bool is_replica() const { return replica_warned_ != nullptr; }
  // Marks this module as a replica (replicate() does it). Every module of one replica set shares
  // `warned`, so the zero_grad() warning is emitted once per replica set, not once per call.
  void mark_replica(std::shared_ptr<std::atomic<bool>> warned) { replica_warned_ = std::move(warned); }

 protected:
  void set_child(const std::string& name, ModulePtr module);
  // Binds a public Tensor member (a pointer to member: &LinearImpl::weight) to the parameter or
  // buffer registered as `name`, which it must hold now:
  //
  //   weight = register_parameter("weight", empty({out, in}));
  //   bind_tensor<&LinearImpl::weight>("weight");
  //
  // From then on the registry follows the member: every query (parameters(), named_parameters(),
  // state_dict(), load_state_dict(), to(), clone(), DataParallel's replicas, DDP) first re-reads
  // the bound members, and a member assigned another tensor re-points its slot (`lm_head->weight =
  // wte->weight` ties the two; an undefined tensor makes the parameter absent, like PyTorch's
  // `bias = None`). The tensor is taken as it is (its requires_grad flag included); a parameter
  // must stay a leaf (a member assigned a tensor with autograd history makes the next query throw).
  // register_parameter()/register_buffer() on the name assign the member too. Copies (clone,
  // replicas) keep the binding. Cost per query: one uncontended lock and a pointer compare per
  // bound member, so modules may be queried from several threads at once.
  template <auto Member>
  void bind_tensor(const std::string& name) {
    using Class = typename detail::member_class<decltype(Member)>::type;
    static_assert(std::is_base_of_v<Module, Class>, "bind_tensor<&Class::member>: Class must derive from dp::nn::Module");
    add_binding(name, [](Module& m) -> Tensor& { return static_cast<Class&>(m).*Member; });
  }
  // A wrapper (DataParallel) whose children's tensors are named as if they were its own: its
  // state_dict() and named_parameters() equal the wrapped module's ("fc.weight", not
  // "module.fc.weight"), also when the wrapper is itself a child. Module paths (named_modules,
  // printing) keep the child's name. load_state_dict() accepts both spellings of a key.
  void set_transparent_names(bool on) { transparent_names_ = on; }

 private:
  using TensorAccess = Tensor& (*)(Module&);
  struct Binding {
    std::string name;
    bool is_parameter = true;
    size_t index = 0;  // the slot's position in parameters_ or buffers_
    TensorAccess member;
  };
  void add_binding(const std::string& name, TensorAccess member);
  // Re-points every bound slot whose member was assigned another tensor (see bind_tensor).
  void sync_bound() const;
  // Assigns `tensor` to the member bound to the parameter or buffer `name`, if any.
  void assign_bound(bool is_parameter, const std::string& name, const Tensor& tensor);
  void add_child(std::string name, ModulePtr module);
  RemovableHandle add_hook(detail::HookKind kind, detail::HookFn fn, const std::string& name);
  void check_new_name(const std::string& kind, const std::string& name) const;
  void collect_named_modules(const std::string& prefix, OrderedDict<std::string, ModulePtr>& out, std::vector<const Module*>& seen,
                             bool include_self) const;
  void collect_state(const std::string& prefix, TensorDict& out) const;
  template <typename Fn>
  void for_each_tensor(Fn&& fn);

  mutable std::string name_;
  bool training_ = true;
  bool transparent_names_ = false;
  TensorDict parameters_;
  TensorDict buffers_;
  std::vector<std::string> non_persistent_;
  OrderedDict<std::string, ModulePtr> children_;
  Copier copier_ = nullptr;
  std::vector<Binding> bindings_;                      // copied: a copy is the same class, its members at the same places
  mutable std::mutex bind_mutex_;                      // guards the slots of bindings_ while sync_bound() re-points them
  std::shared_ptr<std::atomic<bool>> replica_warned_;  // set on replicas only (not copied)
  // Never null. A plain copy shares it, a clone copies it, replicas share the original's.
  std::shared_ptr<detail::HookRegistry> hooks_ = std::make_shared<detail::HookRegistry>();
};

std::ostream& operator<<(std::ostream& os, const Module& m);

namespace detail {
// Called by copy_module for every module a clone copies: clone_with() then checks that no copy still
// holds the address of a module of the original tree (a child held by std::shared_ptr or raw
// pointer, which the clone map can't re-point). Outside a clone it does nothing.
void note_copy(const Module& original, const void* original_object, const void* copy_object, size_t size);

template <typename M>
std::shared_ptr<Module> copy_module(const Module& m) {
  if constexpr (std::is_copy_constructible_v<M> && !std::is_abstract_v<M>) {
    const M& original = static_cast<const M&>(m);
    std::shared_ptr<M> copy = std::allocate_shared<M>(dp::detail::ZeroedAllocator<M>(), original);  // see ZeroedAllocator
    note_copy(m, std::addressof(original), copy.get(), sizeof(M));
    return copy;
  } else {
    throw NotImplementedError("cannot copy module " + m.name() +
                              ": its class is not copy-constructible (clone and DataParallel copy modules with their copy constructor)");
  }
}
}  // namespace detail

// Typed deep copy: clone(model) returns a std::shared_ptr of the same type.
template <typename M>
std::shared_ptr<M> clone(const std::shared_ptr<M>& module, std::optional<Device> device = std::nullopt) {
  DP_CHECK(module != nullptr, ValueError, "nn::clone: null module");
  module->template remember_type<M>();
  return std::static_pointer_cast<M>(module->clone(device));
}

}  // namespace dp::nn

#include "dp/nn/module_call.h"
#include "dp/nn/module_holder.h"
