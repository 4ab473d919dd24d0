#pragma once
// Re-pointing of handles while a module tree is deep-copied (nn::Module::clone, replicate).
//
// A user's module is copied with its own copy constructor, so members that hold a registered
// parameter, buffer or child (a `Tensor weight;`, a `Linear fc;`) would still point at the
// original. While a CloneMap is installed on the current thread, copying a Tensor or a
// ModuleHolder whose target is in the map yields the mapped copy instead, so every member of the
// copy refers to the copy's own parameters and children, with no code in the user's class.
// Handles not in the map (caches, constants) stay shared, as Python's shallow __dict__ copy does.
#include <memory>
#include <unordered_map>

namespace dp {
struct TensorImpl;
namespace nn {
class Module;
}

namespace detail {

struct CloneMap {
  std::unordered_map<const TensorImpl*, std::shared_ptr<TensorImpl>> tensors;
  std::unordered_map<const nn::Module*, std::shared_ptr<nn::Module>> modules;
};

// The map of the copy under way on this thread (nullptr almost always: one load and a branch
// on every Tensor copy).
extern constinit thread_local CloneMap* tls_clone_map;

void remap_tensor(std::shared_ptr<TensorImpl>& impl);

// Installs `map` for this thread for the guard's lifetime (nullptr suspends remapping).
class CloneMapGuard {
 public:
  explicit CloneMapGuard(CloneMap* map) : prev_(tls_clone_map) { tls_clone_map = map; }
  ~CloneMapGuard() { tls_clone_map = prev_; }
  CloneMapGuard(const CloneMapGuard&) = delete;
  CloneMapGuard& operator=(const CloneMapGuard&) = delete;

 private:
  CloneMap* prev_;
};

}  // namespace detail
}  // namespace dp
