#include "parallel/placement.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/pooled.h"

namespace dp::parallel::detail {

Tensor alias_on(const Tensor& t, Device device) {
  DP_CHECK(host_memory(t.device()) && host_memory(device), DeviceError, "alias_on: ", t.device().str(), " and ", device.str(),
           " do not share memory");
  const TensorImpl& impl = *t.unsafe_impl();
  auto storage = ::dp::detail::make_pooled<StorageImpl>(impl.storage, device);
  return Tensor(::dp::detail::make_pooled<TensorImpl>(std::move(storage), impl.sizes, impl.strides, impl.offset, impl.dtype));
}

Tensor place_on(const Tensor& t, Device device) {
  if (t.device() == device) return t.detach();
  if (host_memory(t.device()) && host_memory(device)) return alias_on(t, device);
  NoGradGuard no_grad;
  return t.to(device);
}

}  // namespace dp::parallel::detail
