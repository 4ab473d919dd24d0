// Module registration, queries, mode/device changes and state dicts.
#include "dp/nn/module.h"

#include <algorithm>
#include <cxxabi.h>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include "dp/autograd/grad_mode.h"
#include "dp/core/warning.h"
#include "dp/ops/elementwise.h"

namespace dp::nn {
namespace {

// "dp::nn::LinearImpl" -> "Linear", "(anonymous namespace)::Net" -> "Net".
std::string type_name_of(const Module& m) {
  const char* mangled = typeid(m).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string full = (status == 0 && demangled) ? demangled.get() : mangled;
  // Cut the namespace of the outermost name (not inside template arguments).
  size_t depth = 0, cut = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    char c = full[i];
    if (c == '<' || c == '(')
      ++depth;
    else if ((c == '>' || c == ')') && depth > 0)
      --depth;
    else if (depth == 0 && c == ':' && i + 1 < full.size() && full[i + 1] == ':')
      cut = i + 2;
  }
  std::string name = full.substr(cut);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }

}  // namespace

Module::Module() = default;
Module::Module(std::string name) : name_(std::move(name)) {}

Module::Module(const Module& other)
    : std::enable_shared_from_this<Module>(),
      name_(other.name_),
      training_(other.training_),
      transparent_names_(other.transparent_names_),
      parameters_(other.own_parameters()),  // Tensor copies re-point during a clone
      buffers_(other.own_buffers()),
      non_persistent_(other.non_persistent_),
      copier_(other.copier_),
      bindings_(other.bindings_),
      hooks_(other.hooks_) {
  dp::detail::CloneMap* map = dp::detail::tls_clone_map;
  if (map == nullptr) {
    children_ = other.children_;  // a shallow copy shares children and hooks (Python's copy.copy)
    return;
  }
  hooks_ = other.hooks_->copy();  // a clone has its own hooks, the same callables (copy.deepcopy)
  for (const auto& item : other.children_) {
    const ModulePtr& child = item.value();
    if (!child) {
      children_.insert(item.key(), nullptr);
      continue;
    }
    auto found = map->modules.find(child.get());
    if (found != map->modules.end()) {  // shared submodule: one copy, shared again
      children_.insert(item.key(), found->second);
      continue;
    }
    DP_CHECK(child->copier_ != nullptr, NotImplementedError, "cannot copy module '", item.key(), "' of type ", child->name(), " (child of ", name(),
             "): it was never seen with its own type; register it as std::shared_ptr<", child->name(), "> or ModuleHolder<", child->name(),
             ">, not through a base-class pointer");
    ModulePtr copy = child->copier_(*child);
    map->modules.emplace(child.get(), copy);
    children_.insert(item.key(), std::move(copy));
  }
}

const std::string& Module::name() const {
  if (name_.empty()) name_ = type_name_of(*this);
  return name_;
}

void Module::check_new_name(const std::string& kind, const std::string& name) const {
  DP_CHECK(!name.empty(), ValueError, kind, " name can't be empty (in ", this->name(), ")");
  DP_CHECK(name.find('.') == std::string::npos, ValueError, kind, " name can't contain \".\": '", name, "' (in ", this->name(), ")");
  DP_CHECK(!parameters_.contains(name) && !buffers_.contains(name) && !children_.contains(name), ValueError, kind, " '", name,
           "' already registered in ", this->name(), " (parameter, buffer and submodule names share one namespace)");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  const bool existing = parameters_.contains(name);
  if (!existing) check_new_name("parameter", name);
  if (tensor.defined()) {
    DP_CHECK(tensor.is_leaf(), ValueError, "register_parameter('", name, "') in ", this->name(),
             ": the tensor has autograd history (not a leaf); register tensor.detach()");
    tensor.requires_grad_(requires_grad);
  }
  if (!existing) {
    parameters_.insert(name, tensor);
    return tensor;
  }
  // Python's register_parameter on an existing parameter: the slot now holds `tensor` (and so
  // does a member bound to it, or the next query would put the member's tensor back).
  std::lock_guard<std::mutex> lock(bind_mutex_);
  parameters_[name] = tensor;
  assign_bound(true, name, tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor, bool persistent) {
  auto np = std::find(non_persistent_.begin(), non_persistent_.end(), name);
  if (buffers_.contains(name)) {  // re-point, as PyTorch's register_buffer on an existing buffer
    std::lock_guard<std::mutex> lock(bind_mutex_);
    buffers_[name] = tensor;
    assign_bound(false, name, tensor);
    if (persistent && np != non_persistent_.end()) non_persistent_.erase(np);
    if (!persistent && np == non_persistent_.end()) non_persistent_.push_back(name);
    return tensor;
  }
  check_new_name("buffer", name);
  buffers_.insert(name, tensor);
  if (!persistent) non_persistent_.push_back(name);
  return tensor;
}

// ---------------------------------------------------------------- members bound to slots

void Module::add_binding(const std::string& name, TensorAccess member) {
  const bool is_parameter = parameters_.contains(name);
  DP_CHECK(is_parameter || buffers_.contains(name), ValueError, "bind_tensor('", name, "') in ", this->name(),
           ": no parameter or buffer of that name is registered; register it first");
  const TensorDict& dict = is_parameter ? parameters_ : buffers_;
  size_t index = 0;
  while (dict[index].key() != name) ++index;
  DP_CHECK(member(*this).is_same(dict[index].value()), ValueError, "bind_tensor('", name, "') in ", this->name(),
           ": the member does not hold the registered tensor; assign it first (member = register_parameter(\"", name, "\", ...))");
  std::lock_guard<std::mutex> lock(bind_mutex_);
  for (const Binding& b : bindings_)
    DP_CHECK(b.name != name, ValueError, "bind_tensor('", name, "') in ", this->name(), ": the slot is already bound to a member");
  bindings_.push_back({name, is_parameter, index, member});
}

void Module::assign_bound(bool is_parameter, const std::string& name, const Tensor& tensor) {
  for (const Binding& b : bindings_)
    if (b.is_parameter == is_parameter && b.name == name) b.member(*this) = tensor;
}

void Module::sync_bound() const {
  if (bindings_.empty()) return;
  // A Module sliced out of a layer (Module m(*linear)) keeps the bindings but not the members.
  if (typeid(*this) == typeid(Module)) return;
  auto& self = const_cast<Module&>(*this);
  std::lock_guard<std::mutex> lock(bind_mutex_);
  for (const Binding& b : bindings_) {
    const Tensor& member = b.member(self);
    Tensor& slot = (b.is_parameter ? self.parameters_ : self.buffers_)[b.index].value();
    if (member.unsafe_impl() == slot.unsafe_impl()) continue;
    DP_CHECK(!b.is_parameter || !member.defined() || member.is_leaf(), ValueError, name(), ": parameter '", b.name,
             "' was assigned a tensor with autograd history (not a leaf), which can't be a parameter; assign tensor.detach() (or a "
             "parameter of another module, to tie them)");
    slot = member;
  }
}

void Module::add_child(std::string name, ModulePtr module) {
  check_new_name("submodule", name);
  DP_CHECK(module.get() != this, ValueError, "register_module('", name, "'): a module can't be its own child");
  children_.insert(name, std::move(module));
}

void Module::set_child(const std::string& name, ModulePtr module) {
  ModulePtr* slot = children_.find(name);
  DP_CHECK(slot != nullptr, IndexError, "replace_module: ", this->name(), " has no submodule '", name, "'");
  *slot = std::move(module);
}

bool Module::is_persistent_buffer(const std::string& name) const {
  return std::find(non_persistent_.begin(), non_persistent_.end(), name) == non_persistent_.end();
}

// ---------------------------------------------------------------- queries

void Module::collect_named_modules(const std::string& prefix, OrderedDict<std::string, ModulePtr>& out, std::vector<const Module*>& seen,
                                   bool include_self) const {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  if (include_self) {
    auto self = std::const_pointer_cast<Module>(weak_from_this().lock());
    DP_CHECK(self != nullptr, ValueError, "modules()/named_modules() with include_self: ", name(),
             " is not owned by a std::shared_ptr (create it with std::make_shared or a ModuleHolder)");
    out.insert(prefix, self);
  }
  for (const auto& c : children_) {
    if (!c.value()) continue;
    c.value()->collect_named_modules(join(prefix, c.key()), out, seen, true);
  }
}

OrderedDict<std::string, ModulePtr> Module::named_modules(const std::string& prefix, bool include_self) const {
  OrderedDict<std::string, ModulePtr> out;
  std::vector<const Module*> seen;
  if (include_self) {
    collect_named_modules(prefix, out, seen, true);
  } else {
    seen.push_back(this);
    for (const auto& c : children_)
      if (c.value()) c.value()->collect_named_modules(join(prefix, c.key()), out, seen, true);
  }
  return out;
}

std::vector<ModulePtr> Module::modules(bool include_self) const { return named_modules("", include_self).values(); }

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (const auto& c : children_)
    if (c.value() && std::find(out.begin(), out.end(), c.value()) == out.end()) out.push_back(c.value());
  return out;
}

OrderedDict<std::string, ModulePtr> Module::named_children() const {
  OrderedDict<std::string, ModulePtr> out;
  std::vector<const Module*> seen;
  for (const auto& c : children_) {
    if (!c.value() || std::find(seen.begin(), seen.end(), c.value().get()) != seen.end()) continue;
    seen.push_back(c.value().get());
    out.insert(c.key(), c.value());
  }
  return out;
}

std::string Module::child_tensor_prefix(const std::string& prefix, const std::string& key) const {
  return transparent_names_ ? prefix : join(prefix, key);
}

namespace {
// Walks this module (and, if recurse, its descendants in pre-order, each module once) and
// collects the defined tensors of one kind, de-duplicated by tensor identity. Names skip the child
// names of transparent wrappers (child_tensor_prefix).
template <typename Select>
TensorDict collect_named(const Module& root, bool recurse, Select select) {
  TensorDict out;
  std::unordered_set<const TensorImpl*> seen;
  std::unordered_set<const Module*> visited;
  std::vector<std::pair<std::string, const Module*>> stack{{"", &root}};
  while (!stack.empty()) {
    auto [prefix, m] = std::move(stack.back());
    stack.pop_back();
    if (!visited.insert(m).second) continue;
    for (const auto& item : select(*m)) {
      const Tensor& t = item.value();
      if (!t.defined() || !seen.insert(t.unsafe_impl()).second) continue;
      out.insert(join(prefix, item.key()), t);
    }
    if (!recurse) break;
    const auto& kids = m->own_children();
    for (size_t i = kids.size(); i-- > 0;) {  // reversed onto the stack: visited in order
      const auto& c = kids[i];
      if (c.value()) stack.emplace_back(m->child_tensor_prefix(prefix, c.key()), c.value().get());
    }
  }
  return out;
}
}  // namespace

TensorDict Module::named_parameters(bool recurse) const {
  return collect_named(*this, recurse, [](const Module& m) -> const TensorDict& { return m.own_parameters(); });
}
TensorDict Module::named_buffers(bool recurse) const {
  return collect_named(*this, recurse, [](const Module& m) -> const TensorDict& { return m.own_buffers(); });
}
std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

// ---------------------------------------------------------------- mode, device, gradients

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_)
    if (c.value()) c.value()->train(on);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& c : children_)
    if (c.value()) c.value()->apply(fn);
  fn(*this);
}

template <typename Fn>
void Module::for_each_tensor(Fn&& fn) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<Module*> stack{this};
  std::unordered_set<const Module*> visited;
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    if (!visited.insert(m).second) continue;
    m->sync_bound();
    for (auto& p : m->parameters_)
      if (p.value().defined() && seen.insert(p.value().unsafe_impl()).second) fn(p.value());
    for (auto& b : m->buffers_)
      if (b.value().defined() && seen.insert(b.value().unsafe_impl()).second) fn(b.value());
    for (auto& c : m->children_)
      if (c.value()) stack.push_back(c.value().get());
  }
}

namespace {
void move_tensor(Tensor& t, std::optional<Device> device, std::optional<DType> dtype, bool non_blocking) {
  Device dev = device.value_or(t.device());
  DType dt = (dtype && t.is_floating_point()) ? *dtype : t.dtype();
  if (dev == t.device() && dt == t.dtype()) return;
  NoGradGuard no_grad;
  Tensor grad = t.grad();
  if (grad.defined()) t.set_grad(Tensor());
  t.set_data(t.detach().to(dev, dt, non_blocking));
  if (grad.defined()) t.set_grad(grad.to(dev, dt, non_blocking));
}
}  // namespace

void Module::to(Device device, bool non_blocking) {
  for_each_tensor([&](Tensor& t) { move_tensor(t, device, std::nullopt, non_blocking); });
}
void Module::to(DType dtype, bool non_blocking) {
  DP_CHECK(is_floating_point(dtype), DTypeError, "Module::to only accepts floating point dtypes, got ", dtype_name(dtype));
  for_each_tensor([&](Tensor& t) { move_tensor(t, std::nullopt, dtype, non_blocking); });
}
void Module::to(Device device, DType dtype, bool non_blocking) {
  DP_CHECK(is_floating_point(dtype), DTypeError, "Module::to only accepts floating point dtypes, got ", dtype_name(dtype));
  for_each_tensor([&](Tensor& t) { move_tensor(t, device, dtype, non_blocking); });
}

void Module::zero_grad(bool set_to_none) {
  if (replica_warned_) {
    // PyTorch's message (Module.zero_grad on a module with _is_replica), once per replica set.
    if (!replica_warned_->exchange(true))
      warn(
          "Calling .zero_grad() from a module created with nn.DataParallel() has no effect. The parameters are copied (in a "
          "differentiable manner) from the original module. This means they are not leaf nodes in autograd and so don't "
          "accumulate gradients. If you need gradients in your forward method, consider using autograd.grad instead.");
    return;
  }
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      g.zero_();
    }
  }
}

// ---------------------------------------------------------------- state dicts

void Module::collect_state(const std::string& prefix, TensorDict& out) const {
  sync_bound();
  for (const auto& p : parameters_)
    if (p.value().defined()) out.insert_or_assign(join(prefix, p.key()), p.value().detach());
  for (const auto& b : buffers_)
    if (b.value().defined() && is_persistent_buffer(b.key())) out.insert_or_assign(join(prefix, b.key()), b.value().detach());
  for (const auto& c : children_)
    if (c.value()) c.value()->collect_state(child_tensor_prefix(prefix, c.key()), out);
}

TensorDict Module::state_dict() const {
  TensorDict out;
  collect_state("", out);
  return out;
}

namespace {
std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
  return s;
}
}  // namespace

LoadResult Module::load_state_dict(const TensorDict& state, bool strict) {
  // Targets: live handles (not the detached copies of state_dict()) so values land in place.
  // Keys as state_dict() names them; `spelled` maps PyTorch's spelling of a key that passes through
  // a transparent wrapper ("block2.module.0.weight") to ours ("block2.0.weight").
  TensorDict targets;
  std::unordered_map<std::string, std::string> spelled;
  std::function<void(const std::string&, const std::string&, Module&)> walk = [&](const std::string& prefix, const std::string& full, Module& m) {
    auto add = [&](const std::string& key, const Tensor& t) {
      targets.insert_or_assign(join(prefix, key), t);
      if (full != prefix) spelled.emplace(join(full, key), join(prefix, key));
    };
    m.sync_bound();
    for (auto& p : m.parameters_)
      if (p.value().defined()) add(p.key(), p.value());
    for (auto& b : m.buffers_)
      if (b.value().defined() && m.is_persistent_buffer(b.key())) add(b.key(), b.value());
    for (auto& c : m.children_)
      if (c.value()) walk(m.child_tensor_prefix(prefix, c.key()), join(full, c.key()), *c.value());
  };
  walk("", "", *this);
  // The checkpoint's entries under our spelling of their keys.
  TensorDict renamed;
  const TensorDict* source = &state;
  if (!spelled.empty()) {
    for (const auto& s : state) {
      auto it = spelled.find(s.key());
      renamed.insert_or_assign(it == spelled.end() ? s.key() : it->second, s.value());
    }
    source = &renamed;
  }
  const TensorDict& state_in = *source;

  LoadResult result;
  std::vector<std::string> mismatches;
  for (const auto& t : targets) {
    const Tensor* src = state_in.find(t.key());
    if (src == nullptr) {
      result.missing_keys.push_back(t.key());
    } else if (!src->defined() || src->sizes() != t.value().sizes()) {
      mismatches.push_back("size mismatch for " + t.key() + ": copying a param with shape " +
                           (src->defined() ? src->size_str() : std::string("(undefined)")) + " from checkpoint, the shape in current model is " +
                           t.value().size_str() + ".");
    }
  }
  for (const auto& s : state_in)
    if (!targets.contains(s.key())) result.unexpected_keys.push_back(s.key());
  // Tied tensors (one tensor under several keys): PyTorch copies every key in turn, so the key
  // copied last silently wins. Here the checkpoint's values for them must agree.
  std::unordered_map<const TensorImpl*, std::string> first_key;
  for (const auto& t : targets) {
    auto [it, inserted] = first_key.emplace(t.value().unsafe_impl(), t.key());
    if (inserted) continue;
    const Tensor* a = state_in.find(it->second);
    const Tensor* b = state_in.find(t.key());
    const Shape& shape = t.value().sizes();
    if (a == nullptr || b == nullptr || !a->defined() || !b->defined() || a->sizes() != shape || b->sizes() != shape || a->is_same(*b)) continue;
    NoGradGuard no_grad;
    const bool same = (a->dtype() == b->dtype() && a->device() == b->device()) ? equal(*a, *b) : equal(a->to(b->device(), b->dtype()), *b);
    if (!same)
      mismatches.push_back("tied parameters " + it->second + " and " + t.key() +
                           " are one tensor in the current model, but the checkpoint holds different values for them (PyTorch would "
                           "silently keep the one loaded last, " +
                           t.key() + "); make the two entries equal, or untie the model before loading.");
  }

  bool fail = !mismatches.empty() || (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty()));
  if (fail) {
    std::ostringstream msg;
    msg << "Error(s) in loading state_dict for " << name() << ":";
    if (strict && !result.unexpected_keys.empty()) msg << "\n\tUnexpected key(s) in state_dict: " << quoted_list(result.unexpected_keys) << ".";
    if (strict && !result.missing_keys.empty()) msg << "\n\tMissing key(s) in state_dict: " << quoted_list(result.missing_keys) << ".";
    for (const auto& m : mismatches) msg << "\n\t" << m;
    throw ValueError(msg.str());
  }
  NoGradGuard no_grad;
  for (auto& t : targets) {
    const Tensor* src = state_in.find(t.key());
    if (src != nullptr && !src->is_same(t.value())) t.value().copy_(*src);
  }
  return result;
}

// ---------------------------------------------------------------- printing

namespace {
// PyTorch's _addindent: indent every line but the first.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out.append(static_cast<size_t>(spaces), ' ');
  }
  return out;
}
}  // namespace

void Module::pretty_print(std::ostream& os) const {
  std::vector<std::string> extra_lines;
  std::string extra = extra_repr();
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) extra_lines.push_back(line);
  }
  std::vector<std::string> child_lines;
  for (const auto& c : children_) {
    std::string s = c.value() ? c.value()->to_string() : std::string("None");
    child_lines.push_back("(" + c.key() + "): " + add_indent(s, 2));
  }
  os << name() << "(";
  if (extra_lines.size() == 1 && child_lines.empty()) {
    os << extra_lines[0];
  } else if (!extra_lines.empty() || !child_lines.empty()) {
    for (const auto& l : extra_lines) os << "\n  " << l;
    for (const auto& l : child_lines) os << "\n  " << l;
    os << "\n";
  }
  os << ")";
}

std::string Module::to_string() const {
  std::ostringstream os;
  pretty_print(os);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.pretty_print(os);
  return os;
}

}  // namespace dp::nn
