#pragma once
// replicate(): copies of a module on several devices whose parameters are differentiable copies of
// the original's (PyTorch's torch.nn.parallel.replicate):
//
//   auto replicas = dp::parallel::replicate(model, {"cpu:0", "cpu:1"});   // std::vector<std::shared_ptr<Model>>
//
// Replica j is a deep copy of the module tree (the user's own classes included, see nn::Module)
// on devices[j]. Its parameters are non-leaf tensors: backward through any replica sums the
// gradients of every replica into the original parameters' .grad (parameters nobody used get
// zeros), and double backward works. The original must have its parameters and buffers on
// devices[0].
//  - Replica 0 (on devices[0]) shares parameter storage with the original, and its buffers *are*
//    the original's, so in-place buffer updates there (BatchNorm running statistics) persist.
//  - On the other devices, buffers are fresh copies (their updates are lost, as in PyTorch), and
//    parameters are copies too, except between CPU devices: those share host memory, so the
//    replicas' parameters are relabelled views of the original's storage (no copy; they share its
//    version counter, so autograd still catches an in-place update before backward).
//  - A buffer that requires grad is replicated like a parameter, on every device (replica 0
//    included): its copies are differentiable, and backward sums their gradients into the
//    original buffer's .grad (PyTorch broadcasts such buffers with autograd too).
//  - With detach = true, or with grad mode off, replicas carry no autograd history.
// Unlike PyTorch's replicas, these expose their parameters (replica->parameters() is not empty).
// Every module of a replica is marked (nn::Module::is_replica()): zero_grad() on it warns, once per
// replica set, and does nothing, as in PyTorch.
//
// DataParallel keeps its replicas between steps (ReplicaSet below) and only refreshes them.
#include <atomic>
#include <memory>
#include <type_traits>
#include <vector>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/module.h"

namespace dp::parallel {

namespace detail {

// Replicas of one module, kept between calls. prepare() builds them the first time, and again only
// if the module's structure changed (modules, parameters or buffers registered, replaced or
// removed, or a buffer starting or stopping to require grad); otherwise it refreshes them for this
// step: parameters (and buffers that require grad) re-linked if the original's storage moved, other
// devices' buffers copied, training flags mirrored, and (with history) one new gradient node whose
// backward sums every replica's gradients into the originals.
// Not thread-safe: one forward at a time per ReplicaSet.
class ReplicaSet {
 public:
  explicit ReplicaSet(nn::ModulePtr original);
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;
  ~ReplicaSet();

  // Replicas on devices[0..n). `detach`: no autograd history (also implied by grad mode off).
  // `check_structure` = false skips the structure walk when check_location() just did it.
  std::vector<nn::ModulePtr> prepare(const std::vector<Device>& devices, bool detach, bool check_structure = true);
  // Throws DeviceError unless every parameter and buffer of the original is on `device`, with
  // PyTorch's message ("module must have its parameters and buffers on device cpu:0 (device_ids[0])
  // but found one of them on device: cpu") and the tensor's name. Refreshes the structure snapshot.
  void check_location(Device device, const char* what = "device_ids[0]");
  // Drops every replica (the next prepare() rebuilds them).
  void reset();
  const nn::ModulePtr& original() const { return original_; }
  // How many times replicas were (re)built: a test hook for "kept between steps".
  int builds() const { return builds_; }

 private:
  struct Replica;
  bool snapshot_changed();
  void take_snapshot();
  void build(size_t j, Device device);
  void refresh(size_t j);
  void link_history(size_t count, bool detach);

  nn::ModulePtr original_;
  // Snapshot of the original: modules in pre-order, its distinct parameters and buffers, and a
  // fingerprint of every slot (module, tensor and child identities) to detect structure changes.
  std::vector<nn::Module*> modules_;
  std::vector<Tensor> params_;
  std::vector<Tensor> buffers_;
  std::vector<bool> buffer_grad_;  // aligned with buffers_: requires grad (replicated like a parameter)
  std::vector<const void*> fingerprint_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  int builds_ = 0;
  // Shared by every replica module ever built here: zero_grad() on a replica warns once per set.
  std::shared_ptr<std::atomic<bool>> zero_grad_warned_ = std::make_shared<std::atomic<bool>>(false);
};

// Compile-time check that a module of type M can be replicated: each replica is a deep copy made
// with M's own copy constructor (nn::Module's clone). Used as static_assert(replicable<M>()) by
// replicate<M>, nn::DataParallel<M> and data_parallel(), so a module that can't be copied fails to
// compile, saying what to add, instead of failing at the first forward. (Children are checked at
// run time: their types are only known once registered.)
template <typename M>
constexpr bool replicable() {
  static_assert(std::is_base_of_v<nn::Module, M>, "DataParallel / replicate: the module type must derive from dp::nn::Module");
  static_assert(!std::is_abstract_v<M>,
                "DataParallel / replicate: the module type is abstract, so it can't be copied onto each device; wrap the concrete class");
  static_assert(std::is_abstract_v<M> || std::is_copy_constructible_v<M>,
                "DataParallel / replicate: the module type is not copy-constructible, but each replica is a copy made with its copy "
                "constructor. Add a copy constructor: hold non-copyable members (std::unique_ptr, std::mutex, std::atomic, std::thread) "
                "through std::shared_ptr (but a submodule through dp::nn::ModuleHolder<Child>, which a copy re-points to its own "
                "child), or write M(const M& other) yourself instead of deleting it");
  return true;
}

}  // namespace detail

std::vector<nn::ModulePtr> replicate_module(const nn::ModulePtr& module, const std::vector<Device>& devices, bool detach = false);

template <typename M>
std::vector<std::shared_ptr<M>> replicate(const std::shared_ptr<M>& module, const std::vector<Device>& devices, bool detach = false) {
  static_assert(detail::replicable<M>());
  DP_CHECK(module != nullptr, ValueError, "replicate: null module");
  module->template remember_type<M>();
  std::vector<std::shared_ptr<M>> out;
  for (nn::ModulePtr& r : replicate_module(module, devices, detach)) out.push_back(std::static_pointer_cast<M>(std::move(r)));
  return out;
}
template <typename M>
std::vector<std::shared_ptr<M>> replicate(const nn::ModuleHolder<M>& module, const std::vector<Device>& devices, bool detach = false) {
  return replicate(module.ptr(), devices, detach);
}

}  // namespace dp::parallel
