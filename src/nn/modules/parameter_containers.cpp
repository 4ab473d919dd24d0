#include "dp/nn/modules/parameter_containers.h"

namespace dp::nn {
namespace {

// PyTorch's description of one element: "Parameter containing: [<type> of size 2x3]", with
// " (GPU k)" for a tensor on a device (not in host memory). ParameterList spells the type as the
// dtype ("torch.float32"), ParameterDict as torch.typename ("torch.FloatTensor",
// "torch.cuda.FloatTensor": the device type's name after "torch.").
std::string describe_parameter(const Tensor& p, bool legacy_type) {
  std::string size;
  for (size_t i = 0; i < p.sizes().size(); ++i) {
    if (i > 0) size += 'x';
    size += std::to_string(p.sizes()[i]);
  }
  std::string type;
  if (legacy_type) {
    type = legacy_type_name(p.dtype());
    if (!p.is_cpu()) {  // the device type's name after "torch.": "cuda" of "cuda:0"
      const std::string dev = p.device().str();
      type.insert(type.find('.') + 1, dev.substr(0, dev.find(':')) + ".");
    }
  } else {
    type = std::string("torch.") + dtype_name(p.dtype());
  }
  std::string device = !p.is_cpu() ? " (GPU " + std::to_string(p.device().index < 0 ? 0 : p.device().index) + ")" : "";
  return "Parameter containing: [" + type + " of size " + size + device + "]";
}

std::string describe_all(const TensorDict& params, bool legacy_type) {
  std::string out;
  for (const auto& item : params) {
    if (!out.empty()) out += "\n";
    out += "  (" + item.key() + "): " + describe_parameter(item.value(), legacy_type);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- ParameterList

Tensor ParameterListImpl::append(Tensor param, bool requires_grad) {
  DP_CHECK(param.defined(), ValueError, "ParameterList::append: the tensor is undefined (element ", size(), ")");
  return register_parameter(std::to_string(size()), std::move(param), requires_grad);
}

void ParameterListImpl::extend(const std::vector<Tensor>& params, bool requires_grad) {
  for (const Tensor& p : params) append(p, requires_grad);
}

Tensor ParameterListImpl::operator[](int64_t index) const {
  const auto n = static_cast<int64_t>(size());
  DP_CHECK(index >= -n && index < n, IndexError, "ParameterList: index ", index, " is out of range (size ", n, ")");
  return own_parameters()[static_cast<size_t>(index < 0 ? index + n : index)].value();
}

std::string ParameterListImpl::extra_repr() const { return describe_all(own_parameters(), /*legacy_type=*/false); }

// ---------------------------------------------------------------- ParameterDict

ParameterDictImpl::ParameterDictImpl(const OrderedDict<std::string, Tensor>& params) {
  for (const auto& item : params) insert(item.key(), item.value());
}

Tensor ParameterDictImpl::insert(const std::string& key, Tensor param, bool requires_grad) {
  DP_CHECK(param.defined(), ValueError, "ParameterDict::insert: the tensor for key '", key, "' is undefined");
  DP_CHECK(!contains(key), ValueError, "ParameterDict::insert: key '", key,
           "' is already present (a parameter is never replaced; copy new values in with copy_() or load_state_dict())");
  return register_parameter(key, std::move(param), requires_grad);
}

void ParameterDictImpl::update(const std::vector<std::pair<std::string, Tensor>>& params, bool requires_grad) {
  for (const auto& [key, p] : params) insert(key, p, requires_grad);
}

Tensor ParameterDictImpl::operator[](const std::string& key) const {
  const Tensor* p = own_parameters().find(key);
  DP_CHECK(p != nullptr, IndexError, "ParameterDict: no parameter with key '", key, "'");
  return *p;
}

std::string ParameterDictImpl::extra_repr() const { return describe_all(own_parameters(), /*legacy_type=*/true); }

}  // namespace dp::nn
