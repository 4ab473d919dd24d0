#include "dp/optim/sgd.h"
#include "dp/autograd/grad_mode.h"
#include "dp/ops/factory.h"
#include "backend/optim_kernels.h"
#include "optim/update_batch.h"
#include "optim/update_target.h"

namespace dp::optim {

void SGDOptions::visit(OptionsVisitor& v) {
  v.field("lr", lr_.value, lr_.is_set);
  v.field("momentum", momentum_.value, momentum_.is_set);
  v.field("dampening", dampening_.value, dampening_.is_set);
  v.field("weight_decay", weight_decay_.value, weight_decay_.is_set);
  v.field("nesterov", nesterov_.value, nesterov_.is_set);
  v.field("maximize", maximize_.value, maximize_.is_set);
}

std::unique_ptr<OptimizerParamState> SGDParamState::clone() const {
  auto s = std::make_unique<SGDParamState>();
  if (momentum_buffer.defined()) s->momentum_buffer = momentum_buffer.clone();
  return s;
}

void SGDParamState::save(const std::string& prefix, OrderedDict<std::string, Tensor>& out) const {
  if (momentum_buffer.defined()) out.insert(prefix + "momentum_buffer", momentum_buffer);
}

SGD::SGD(std::vector<OptimizerParamGroup> param_groups, const SGDOptions& defaults) : Optimizer(std::make_unique<SGDOptions>(defaults)) {
  DP_CHECK(defaults.lr_is_set(), ValueError, "SGD: the defaults must give a learning rate (SGDOptions(lr))");
  init_groups(std::move(param_groups));
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void SGD::check_options(const OptimizerOptions& options) const {
  const auto& o = detail::options_as<SGDOptions>(options, name());
  DP_CHECK(o.lr() >= 0, ValueError, "SGD: invalid learning rate: ", o.lr());
  DP_CHECK(o.momentum() >= 0, ValueError, "SGD: invalid momentum value: ", o.momentum());
  DP_CHECK(o.weight_decay() >= 0, ValueError, "SGD: invalid weight_decay value: ", o.weight_decay());
  DP_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0), ValueError,
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum ", o.momentum(), ", dampening ", o.dampening(), ")");
}

Tensor SGD::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = detail::options_as<SGDOptions>(group.options(), name());
    backend::SgdScalars s;
    s.lr = o.lr();
    s.momentum = o.momentum();
    s.dampening = o.dampening();
    s.weight_decay = o.weight_decay();
    s.nesterov = o.nesterov();
    s.maximize = o.maximize();
    detail::UpdateBatch<backend::SgdTensor> batch;
    for (Tensor& p : group.params()) {
      Tensor g = detail::contiguous_grad(p);
      if (!g.defined()) continue;
      Tensor buf;
      bool initialized = false;
      if (s.momentum != 0) {
        auto& slot = state_[p.unsafe_impl()];
        if (!slot) slot = std::make_unique<SGDParamState>();
        auto& st = static_cast<SGDParamState&>(*slot);
        initialized = st.momentum_buffer.defined();
        // The first step writes the buffer (PyTorch's clone of d_p), so no zero fill.
        if (!initialized) st.momentum_buffer = empty(p.sizes(), TensorOptions(p.dtype()).device(p.device()));
        buf = st.momentum_buffer;
        detail::check_state_buffer(p, buf, "SGD", "momentum_buffer");
      }
      Tensor w = batch.target("SGD", p, g);
      batch.add(p, w, {w.data_ptr(), g.data_ptr(), buf.defined() ? buf.data_ptr() : nullptr, w.numel(), initialized});
    }
    // One update call per (device, dtype) of the group: on CUDA a few multi-tensor launches on the
    // device's current stream.
    batch.finish([&](Device device, DType dtype, const std::vector<backend::SgdTensor>& list) {
      backend::sgd_update_kernel(device.type, dtype, device.index, list, s);
    });
  }
  return loss;
}

std::unique_ptr<OptimizerParamState> SGD::load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const {
  auto st = std::make_unique<SGDParamState>();
  for (const auto& [field, t] : saved) {
    const std::string key = dp::detail::str("state.", index, ".", field);
    DP_CHECK(field == "momentum_buffer", ValueError, "SGD.load_state_dict: unexpected key '", key, "' (SGD keeps only momentum_buffer)");
    st->momentum_buffer = adopt_buffer(param, t, key);
  }
  return st;
}

}  // namespace dp::optim
