// Deep copies of module trees: new tensors first, then the classes' own copy constructors run with
// a clone map installed so every member re-points to the copy (see dp/core/clone_map.h).
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/module.h"

namespace dp::nn {
namespace {

// One module copied by a clone: its original and the two objects' bytes (copy_module's sizeof(M)).
struct CopyRecord {
  const Module* original;
  const unsigned char* original_object;
  const unsigned char* copy_object;
  size_t size;
};
thread_local std::vector<CopyRecord>* tls_copies = nullptr;

// "'block.0' (a Block)", or "the module itself (a Model)" for the root.
std::string describe(const Module& root, const Module* target) {
  std::vector<std::pair<std::string, const Module*>> stack{{"", &root}};
  std::unordered_set<const Module*> seen;
  while (!stack.empty()) {
    auto [path, m] = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    if (m == target) return (path.empty() ? std::string("the module itself") : "'" + path + "'") + " (a " + m->name() + ")";
    const auto& kids = m->own_children();
    for (size_t i = kids.size(); i-- > 0;)
      if (kids[i].value()) stack.emplace_back(path.empty() ? kids[i].key() : path + "." + kids[i].key(), kids[i].value().get());
  }
  return "a " + target->name();
}

// Each module of root's tree with its ancestors (root's own: none).
std::unordered_map<const Module*, std::unordered_set<const Module*>> ancestors_in(const Module& root) {
  std::unordered_map<const Module*, std::unordered_set<const Module*>> up{{&root, {}}};
  std::vector<const Module*> stack{&root};
  while (!stack.empty()) {
    const Module* x = stack.back();
    stack.pop_back();
    for (const auto& kid : x->own_children()) {
      const Module* k = kid.value().get();
      if (k == nullptr || up.count(k)) continue;
      std::unordered_set<const Module*> a = up[x];
      a.insert(x);
      up.emplace(k, std::move(a));
      stack.push_back(k);
    }
  }
  return up;
}

// A member that the copy constructor copied unchanged (the same bits in the original and the
// copy) and that is the address of a module of the original tree: a std::shared_ptr<Child>, a raw
// pointer, a lambda capture. ModuleHolder and Tensor members were re-pointed, so they differ.
void check_no_original_addresses(const Module& root, const dp::detail::CloneMap& map, const std::vector<CopyRecord>& copies) {
  std::unordered_map<uintptr_t, const Module*> originals;
  auto add = [&](const Module* m) {
    originals.emplace(reinterpret_cast<uintptr_t>(m), m);
    originals.emplace(reinterpret_cast<uintptr_t>(dynamic_cast<const void*>(m)), m);  // a pointer to the most-derived class
  };
  add(&root);
  for (const auto& item : map.modules) add(item.first);
  const auto up = ancestors_in(root);
  for (const CopyRecord& r : copies) {
    // Not the record's ancestors. The scan also reads padding, which a defaulted copy copies too:
    // a bool before seven padding bytes left from the stack of the original's construction has
    // been seen to spell the address of the module being cloned, the child's ancestor
    // (MultiheadAttentionOptions' batch_first_ inside a Transformer layer). A member pointing up
    // the tree is rare; one pointing to itself, a descendant or a sibling is what this catches.
    const auto found = up.find(r.original);
    const std::unordered_set<const Module*> no_ancestors;
    const std::unordered_set<const Module*>& ancestors = found == up.end() ? no_ancestors : found->second;
    // Not the Module base either: its members are dp's own, which its copy constructor copies as
    // it should, and its std::string keeps unused bytes after a short name (the small-string
    // buffer) that hold whatever the memory held before: with four replicas made in a row, the same
    // leftover address of a submodule has been seen in the original's and the copy's.
    const size_t base_begin = static_cast<size_t>(reinterpret_cast<const unsigned char*>(r.original) - r.original_object);
    const size_t base_end = base_begin + sizeof(Module);
    for (size_t off = 0; off + sizeof(uintptr_t) <= r.size; off += alignof(uintptr_t)) {
      if (off + sizeof(uintptr_t) > base_begin && off < base_end) continue;
      uintptr_t in_copy = 0, in_original = 0;
      std::memcpy(&in_copy, r.copy_object + off, sizeof in_copy);
      if (in_copy == 0) continue;
      std::memcpy(&in_original, r.original_object + off, sizeof in_original);
      if (in_copy != in_original) continue;
      auto it = originals.find(in_copy);
      if (it == originals.end() || ancestors.contains(it->second)) continue;
      const std::string child = it->second->name();
      throw ValueError(::dp::detail::str(
          "cannot copy ", root.name(), " (clone, or a DataParallel replica): the copy of ", describe(root, r.original),
          " still holds, at byte offset ", off, " of the object, the address of the original's submodule ", describe(root, it->second),
          ". A member that is a std::shared_ptr<", child,
          ">, a raw pointer or a lambda capture is copied as it is, so the copy would run "
          "the original's submodule (under DataParallel: with its parameters on device_ids[0], from every replica's device). Hold it as "
          "dp::nn::ModuleHolder<",
          child, "> (`dp::nn::ModuleHolder<", child,
          "> block{nullptr};` assigned from register_module), which a copy re-points to its own "
          "submodule, or reach it through the registry (named_children())"));
    }
  }
}

class CopyRecorder {
 public:
  CopyRecorder() : prev_(tls_copies) { tls_copies = &records; }
  ~CopyRecorder() { tls_copies = prev_; }
  CopyRecorder(const CopyRecorder&) = delete;
  CopyRecorder& operator=(const CopyRecorder&) = delete;
  std::vector<CopyRecord> records;

 private:
  std::vector<CopyRecord>* prev_;
};

}  // namespace

namespace detail {
void note_copy(const Module& original, const void* original_object, const void* copy_object, size_t size) {
  if (tls_copies == nullptr || dp::detail::tls_clone_map == nullptr) return;
  tls_copies->push_back({&original, static_cast<const unsigned char*>(original_object), static_cast<const unsigned char*>(copy_object), size});
}
}  // namespace detail

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
  CopyRecorder recorder;
  ModulePtr copy;
  {
    dp::detail::CloneMapGuard on(&map);
    copy = copier_(*this);
  }
  // Phase 3: no copy may still point at a module of the original.
  check_no_original_addresses(*this, map, recorder.records);
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
