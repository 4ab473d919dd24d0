// Buckets of tensors for coalesced transfers (coalesce.h).
#include "parallel/coalesce.h"
#include <map>
#include "dp/autograd/grad_mode.h"
#include "dp/ops/factory.h"

namespace dp::parallel::detail {
namespace {

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

}  // namespace

std::vector<Bucket> plan_buckets(const std::vector<TensorSpec>& specs, const std::vector<size_t>& which, size_t buffer_size) {
  std::vector<Bucket> done;
  std::map<DType, Bucket> open;
  for (size_t i : which) {
    const TensorSpec& spec = specs.at(i);
    const int64_t n = numel_of(spec.sizes);
    if (n == 0) continue;
    const size_t item_bytes = static_cast<size_t>(n) * element_size(spec.dtype);
    Bucket& b = open[spec.dtype];
    b.dtype = spec.dtype;
    const size_t bytes = static_cast<size_t>(b.numel) * element_size(spec.dtype);
    if (!b.items.empty() && bytes + item_bytes > buffer_size) {
      done.push_back(std::move(b));
      b = Bucket{};
      b.dtype = spec.dtype;
    }
    b.items.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += n;
  }
  for (auto& [dtype, b] : open)
    if (!b.items.empty()) done.push_back(std::move(b));
  return done;
}

Tensor pack(const Bucket& bucket, const std::vector<Tensor>& tensors, Device device) {
  NoGradGuard no_grad;
  bool all_defined = true;
  for (size_t i : bucket.items) all_defined = all_defined && tensors.at(i).defined();
  const TensorOptions options = TensorOptions().dtype(bucket.dtype).device(device);
  Tensor flat = all_defined ? empty({bucket.numel}, options) : zeros({bucket.numel}, options);
  for (size_t k = 0; k < bucket.items.size(); ++k) {
    const Tensor& t = tensors[bucket.items[k]];
    if (!t.defined()) continue;
    flat.narrow(0, bucket.offsets[k], t.numel()).view(t.sizes()).copy_(t);
  }
  return flat;
}

std::vector<Tensor> unpack(const Bucket& bucket, const Tensor& flat, const std::vector<TensorSpec>& specs) {
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  out.reserve(bucket.items.size());
  for (size_t k = 0; k < bucket.items.size(); ++k) {
    const Shape& sizes = specs.at(bucket.items[k]).sizes;
    out.push_back(flat.narrow(0, bucket.offsets[k], numel_of(sizes)).view(sizes));
  }
  return out;
}

void copy_coalesced(const std::vector<Tensor>& originals, const std::vector<Tensor>& copies, Device device, size_t buffer_size) {
  DP_CHECK(originals.size() == copies.size(), ValueError, "copy_coalesced: ", originals.size(), " originals but ", copies.size(), " copies");
  NoGradGuard no_grad;
  std::vector<TensorSpec> specs;
  std::vector<size_t> all;
  for (size_t k = 0; k < originals.size(); ++k) {
    DP_CHECK(originals[k].sizes() == copies[k].sizes() && originals[k].dtype() == copies[k].dtype(), ShapeError, "copy_coalesced: tensor ", k, " is ",
             originals[k].size_str(), " ", dtype_name(originals[k].dtype()), " but its copy is ", copies[k].size_str(), " ",
             dtype_name(copies[k].dtype()));
    specs.push_back({originals[k].sizes(), originals[k].dtype()});
    all.push_back(k);
  }
  for (const Bucket& b : plan_buckets(specs, all, buffer_size)) {
    Tensor flat = pack(b, originals, originals[b.items[0]].device());
    if (flat.device() != device) flat = flat.to(device);
    std::vector<Tensor> views = unpack(b, flat, specs);
    for (size_t k = 0; k < b.items.size(); ++k) copies[b.items[k]].detach().copy_(views[k]);
  }
}

}  // namespace dp::parallel::detail
