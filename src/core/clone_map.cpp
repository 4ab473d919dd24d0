#include "dp/core/clone_map.h"
#include "dp/core/tensor_impl.h"

namespace dp::detail {

constinit thread_local CloneMap* tls_clone_map = nullptr;

void remap_tensor(std::shared_ptr<TensorImpl>& impl) {
  if (!impl) return;
  auto it = tls_clone_map->tensors.find(impl.get());
  if (it != tls_clone_map->tensors.end()) impl = it->second;
}

}  // namespace dp::detail
