// Parameter groups, their checks, zero_grad and the helpers the concrete optimizers share.
#include "dp/optim/optimizer.h"
#include <unordered_set>
#include "backend/optim_kernels.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_registry.h"
#include "dp/ops/factory.h"
#include "optim/options_json.h"
#include "optim/update_target.h"

namespace dp::optim {
namespace {
std::string describe_param(const Tensor& p) { return dp::detail::str(p.size_str(), " ", dtype_name(p.dtype()), " on ", p.device().str()); }

// The fused updates run on the device types whose backend has them (backend/optim_kernels.h: the
// CPU's always, CUDA's in a build with that backend), on devices that exist.
void check_param_device(const Tensor& p, const char* optimizer, size_t i, size_t gi) {
  if (p.is_cpu()) return;
  if (!backend::sgd_update_kernel.has(p.device().type) || !backend::adam_update_kernel.has(p.device().type))
    throw DeviceError(dp::detail::str(optimizer, ": parameter ", i, " of param group ", gi, " is ", describe_param(p), ": ",
                                      backend::no_kernel_message("the fused optimizer updates", p.device().type)));
  try {
    check_device(p.device());
  } catch (const DeviceError& e) {
    throw DeviceError(dp::detail::str(optimizer, ": parameter ", i, " of param group ", gi, " is ", describe_param(p), ": ", e.what()));
  }
}
}  // namespace

// ---------------------------------------------------------------- OptimizerParamGroup

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
    : params_(std::move(params)), options_(std::move(options)) {}

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& o) : params_(o.params_), options_(o.options_ ? o.options_->clone() : nullptr) {}

OptimizerParamGroup& OptimizerParamGroup::operator=(const OptimizerParamGroup& o) {
  if (this != &o) {
    params_ = o.params_;
    options_ = o.options_ ? o.options_->clone() : nullptr;
  }
  return *this;
}

OptimizerOptions& OptimizerParamGroup::options() {
  DP_CHECK(options_ != nullptr, ValueError,
           "OptimizerParamGroup: this group has no options (an optimizer gives it its defaults when the group is added)");
  return *options_;
}

const OptimizerOptions& OptimizerParamGroup::options() const {
  DP_CHECK(options_ != nullptr, ValueError,
           "OptimizerParamGroup: this group has no options (an optimizer gives it its defaults when the group is added)");
  return *options_;
}

// ---------------------------------------------------------------- Optimizer

Optimizer::Optimizer(std::unique_ptr<OptimizerOptions> defaults) : defaults_(std::move(defaults)) {}

void Optimizer::init_groups(std::vector<OptimizerParamGroup> groups) {
  check_options(*defaults_);
  size_t total = 0;
  for (const auto& g : groups) total += g.params().size();
  DP_CHECK(total > 0, ValueError, name(), ": optimizer got an empty parameter list");
  for (const auto& g : groups) add_param_group(g);
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  const size_t gi = param_groups_.size();
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : param_groups_)
    for (const Tensor& p : g.params()) seen.insert(p.unsafe_impl());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    DP_CHECK(p.defined(), ValueError, name(), ": parameter ", i, " of param group ", gi, " is an undefined tensor");
    DP_CHECK(p.is_leaf(), ValueError, name(), ": can't optimize a non-leaf Tensor (parameter ", i, " of param group ", gi, ", ", describe_param(p),
             "); optimize the leaf it was computed from, or detach() it");
    DP_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64 || p.dtype() == kFloat16 || p.dtype() == kBFloat16, DTypeError, name(), ": parameter ", i,
             " of param group ", gi, " is ", describe_param(p), "; the fused updates support float32, float64, float16 and bfloat16 parameters");
    check_param_device(p, name(), i, gi);
    DP_CHECK(seen.insert(p.unsafe_impl()).second, ValueError, name(), ": parameter ", i, " of param group ", gi, " (", describe_param(p),
             ") appears more than once (some parameters appear in more than one parameter group, or twice in one)");
  }
  std::unique_ptr<OptimizerOptions> options = group.has_options() ? group.options().clone() : defaults_->clone();
  if (group.has_options()) detail::inherit_unset(*options, *defaults_, name());
  check_options(*options);
  param_groups_.emplace_back(group.params(), std::move(options));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : param_groups_)
    for (Tensor& p : g.params()) {
      if (set_to_none) {
        // Dropping is what set_grad(undefined) does; no need to read .grad first. A tensor that
        // never took part in autograd has nothing to drop.
        if (p.defined() && p.unsafe_impl()->autograd) p.set_grad(Tensor());
        continue;
      }
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      {
        NoGradGuard no_grad;
        grad.zero_();
      }
    }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  out.reserve(size());
  for (const auto& g : param_groups_) out.insert(out.end(), g.params().begin(), g.params().end());
  return out;
}

size_t Optimizer::size() const {
  size_t n = 0;
  for (const auto& g : param_groups_) n += g.params().size();
  return n;
}

double Optimizer::get_lr(size_t group) const {
  DP_CHECK(group < param_groups_.size(), IndexError, name(), ": param group ", group, " out of range (", param_groups_.size(), " groups)");
  return param_groups_[group].options().get_lr();
}

void Optimizer::set_lr(size_t group, double lr) {
  DP_CHECK(group < param_groups_.size(), IndexError, name(), ": param group ", group, " out of range (", param_groups_.size(), " groups)");
  param_groups_[group].options().set_lr(lr);
}

Tensor Optimizer::run_closure(const LossClosure& closure) {
  if (!closure) return Tensor();
  AutoGradMode on(true);
  return closure();
}

Tensor detail::contiguous_grad(const Tensor& param) {
  Tensor g = param.grad();
  if (!g.defined()) return g;
  return g.is_contiguous() ? g : g.contiguous();
}

Tensor detail::adopt_buffer(const Tensor& param, const Tensor& saved, const std::string& key) {
  DP_CHECK(saved.defined(), ValueError, "load_state_dict: ", key, " is an undefined tensor");
  DP_CHECK(saved.sizes() == param.sizes(), ShapeError, "load_state_dict: ", key, " has shape ", saved.size_str(), " but its parameter has shape ",
           param.size_str());
  DP_CHECK(saved.is_floating_point(), DTypeError, "load_state_dict: ", key, " has dtype ", dtype_name(saved.dtype()), "; expected a floating tensor");
  NoGradGuard no_grad;
  Tensor out = empty(param.sizes(), TensorOptions(param.dtype()).device(param.device()));
  out.copy_(saved);
  return out;
}

int64_t detail::adopt_step(const Tensor& saved, const std::string& key) {
  DP_CHECK(saved.defined() && saved.numel() == 1, ShapeError, "load_state_dict: ", key, " must hold one number, got shape ",
           saved.defined() ? saved.size_str() : std::string("(undefined)"));
  const double v = saved.to_vector<double>()[0];
  DP_CHECK(v >= 0 && v == static_cast<double>(static_cast<int64_t>(v)), ValueError, "load_state_dict: ", key, " must be a whole number >= 0, got ",
           v);
  return static_cast<int64_t>(v);
}

Tensor Optimizer::contiguous_grad(const Tensor& param) { return detail::contiguous_grad(param); }
Tensor Optimizer::adopt_buffer(const Tensor& param, const Tensor& saved, const std::string& key) { return detail::adopt_buffer(param, saved, key); }
int64_t Optimizer::adopt_step(const Tensor& saved, const std::string& key) { return detail::adopt_step(saved, key); }

}  // namespace dp::optim

namespace dp::optim::detail {

void check_state_buffer(const Tensor& param, const Tensor& buffer, const char* optimizer, const char* name) {
  DP_CHECK(buffer.defined() && buffer.sizes() == param.sizes() && buffer.dtype() == param.dtype() && buffer.device() == param.device() &&
               buffer.is_contiguous(),
           ValueError, optimizer, ": state '", name, "' of a parameter ", describe_param(param), " is ",
           buffer.defined() ? describe_param(buffer) : std::string("undefined"),
           (buffer.defined() && !buffer.is_contiguous()) ? " (not contiguous)" : "",
           "; it must be a contiguous tensor of the parameter's shape, dtype and device");
}

}  // namespace dp::optim::detail
