// Autocast's thread-local state, its guards, the cast cache and the casts the listed ops make.
// The rules follow PyTorch 1.13 (aten/src/ATen/autocast_mode.{h,cpp}, torch/amp/autocast_mode.py).
#include "dp/amp/autocast.h"

#include <unordered_map>
#include <utility>
#include "amp/autocast_ops.h"
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::autocast {
namespace {

thread_local ThreadState tls_state;
thread_local int tls_nesting = 0;

// Keyed by the source's TensorImpl; the entry holds the source too, so the key cannot be reused by
// another tensor while the entry lives (PyTorch keeps a weak reference for the same reason).
struct CacheEntry {
  Tensor source;
  Tensor cast;
};
thread_local std::unordered_map<const TensorImpl*, CacheEntry> tls_cache;

void check_dtype(DeviceType device, DType dtype) {
  if (device == DeviceType::CPU)
    DP_CHECK(dtype == kBFloat16, ValueError, "autocast: CPU autocast supports only bfloat16, got ", dtype_name(dtype));
  else
    DP_CHECK(dtype == kFloat16 || dtype == kBFloat16, ValueError, "autocast: CUDA autocast supports float16 and bfloat16, got ", dtype_name(dtype));
}

}  // namespace

bool is_enabled() { return tls_state.cuda_enabled; }
void set_enabled(bool enabled) { tls_state.cuda_enabled = enabled; }
bool is_cpu_enabled() { return tls_state.cpu_enabled; }
void set_cpu_enabled(bool enabled) { tls_state.cpu_enabled = enabled; }
bool is_enabled(DeviceType device) { return device == DeviceType::CPU ? tls_state.cpu_enabled : tls_state.cuda_enabled; }
void set_enabled(DeviceType device, bool enabled) { (device == DeviceType::CPU ? tls_state.cpu_enabled : tls_state.cuda_enabled) = enabled; }

DType get_autocast_gpu_dtype() { return tls_state.cuda_dtype; }
DType get_autocast_cpu_dtype() { return tls_state.cpu_dtype; }
void set_autocast_gpu_dtype(DType dtype) { set_autocast_dtype(DeviceType::CUDA, dtype); }
void set_autocast_cpu_dtype(DType dtype) { set_autocast_dtype(DeviceType::CPU, dtype); }
DType get_autocast_dtype(DeviceType device) { return device == DeviceType::CPU ? tls_state.cpu_dtype : tls_state.cuda_dtype; }
void set_autocast_dtype(DeviceType device, DType dtype) {
  check_dtype(device, dtype);
  (device == DeviceType::CPU ? tls_state.cpu_dtype : tls_state.cuda_dtype) = dtype;
}

bool is_autocast_cache_enabled() { return tls_state.cache_enabled; }
void set_autocast_cache_enabled(bool enabled) { tls_state.cache_enabled = enabled; }
void clear_cache() { tls_cache.clear(); }
size_t cache_size() { return tls_cache.size(); }
int increment_nesting() { return ++tls_nesting; }
int decrement_nesting() { return --tls_nesting; }

Guard::Guard(DeviceType device, std::optional<DType> dtype, bool enabled, std::optional<bool> cache_enabled)
    : device_(device), prev_enabled_(is_enabled(device)), prev_dtype_(get_autocast_dtype(device)), prev_cache_enabled_(tls_state.cache_enabled) {
  // Checked before anything changes, so a refused guard leaves the state as it was.
  const DType want = dtype.value_or(prev_dtype_);
  if (enabled) check_dtype(device, want);
  (device == DeviceType::CPU ? tls_state.cpu_dtype : tls_state.cuda_dtype) = want;
  set_enabled(device, enabled);
  if (cache_enabled) tls_state.cache_enabled = *cache_enabled;
  increment_nesting();
}

Guard::~Guard() {
  if (decrement_nesting() == 0) clear_cache();
  set_enabled(device_, prev_enabled_);
  (device_ == DeviceType::CPU ? tls_state.cpu_dtype : tls_state.cuda_dtype) = prev_dtype_;
  tls_state.cache_enabled = prev_cache_enabled_;
}

ThreadState ThreadState::current() { return tls_state; }

ThreadStateGuard::ThreadStateGuard(const ThreadState& state) : prev_(tls_state) {
  tls_state = state;
  increment_nesting();
}

ThreadStateGuard::~ThreadStateGuard() {
  if (decrement_nesting() == 0) clear_cache();
  tls_state = prev_;
}

namespace detail {
namespace {

// PyTorch's is_autocast_eligible: a floating tensor of the device type, float64 excepted.
bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type == device && is_floating_point(t.dtype()) && t.dtype() != kFloat64;
}

// PyTorch's cached_cast: the lower-precision copy of a float32 leaf that requires grad (a
// parameter) is made once per region; everything else is cast afresh.
Tensor cached_cast(DType to, const Tensor& t, DeviceType device) {
  if (!eligible(t, device) || t.dtype() == to) return t;
  // (PyTorch also requires !is_view(); a leaf that requires grad is never a view with history here.)
  const bool cacheable = to == get_autocast_dtype(device) && t.dtype() == kFloat32 && t.requires_grad() && t.is_leaf() && tls_state.cache_enabled;
  if (!cacheable) return t.to(to);
  auto it = tls_cache.find(t.unsafe_impl());
  if (it != tls_cache.end()) return it->second.cast;
  Tensor cast = t.to(to);
  tls_cache.emplace(t.unsafe_impl(), CacheEntry{t, cast});
  return cast;
}

// PyTorch's promote_type: starting from the lower-precision dtype, float32 wins over it; float64
// and ineligible tensors are ignored.
DType promote_type(const std::vector<const Tensor*>& args, DeviceType device) {
  DType out = get_autocast_dtype(device);
  for (const Tensor* t : args) {
    if (!eligible(*t, device)) continue;
    if (t->dtype() == kFloat32)
      out = kFloat32;
    else
      DP_CHECK(t->dtype() == out || out == kFloat32, DTypeError, "autocast: cannot promote ", dtype_name(t->dtype()), " with ", dtype_name(out),
               " (autocast dtype ", dtype_name(get_autocast_dtype(device)), ")");
  }
  return out;
}

}  // namespace

bool any_enabled() { return tls_state.cpu_enabled || tls_state.cuda_enabled; }

void Cast::apply(Op op, std::initializer_list<const Tensor*> args) { apply(op, std::vector<const Tensor*>(args)); }

void Cast::apply(Op op, const std::vector<Tensor>& args) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(args.size());
  for (const Tensor& t : args) ptrs.push_back(&t);
  apply(op, ptrs);
}

void Cast::apply(Op op, const std::vector<const Tensor*>& args) {
  // An argument on a device (not in host memory) makes it that device's call (PyTorch's dispatch
  // picks the CUDA autocast key then).
  bool any_defined = false;
  DeviceType device = DeviceType::CPU;
  for (const Tensor* t : args) {
    if (!t->defined()) continue;
    any_defined = true;
    if (!t->is_cpu()) device = t->device().type;
  }
  if (!any_defined) return;
  if (!is_enabled(device)) return;
  const Policy p = policy(op, device);
  if (p == Policy::None) return;
  DP_CHECK(p != Policy::Banned, DTypeError, op_name(op), ": unsafe to autocast on ", device == DeviceType::CPU ? "CPU" : "CUDA",
           ". Many models use a sigmoid layer right before the binary cross entropy layer; in this case, combine the two "
           "with binary_cross_entropy_with_logits (BCEWithLogitsLoss), which is safe to autocast. To keep "
           "binary_cross_entropy, switch autocast off around it and give it float32 tensors.");
  const DType to = p == Policy::LowerPrecision ? get_autocast_dtype(device) : p == Policy::Fp32 ? kFloat32 : promote_type(args, device);
  cast_.reserve(args.size());
  for (const Tensor* t : args) cast_.push_back(cached_cast(to, *t, device));
  op_ = op;
  to_ = to;
  device_ = device;
  applied_ = true;
  set_enabled(device, false);  // the op's second entry runs below autocast; ~Cast switches it back
}

std::string Cast::note() const {
  return ::dp::detail::str("under ", device_ == DeviceType::CPU ? "CPU" : "CUDA", " autocast, which cast ", op_name(op_), "'s floating arguments to ",
                           dtype_name(to_));
}

Cast::~Cast() {
  if (applied_) set_enabled(device_, true);
}

}  // namespace detail
}  // namespace dp::autocast
