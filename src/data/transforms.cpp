// Image transforms: Normalize, RandomCrop, RandomHorizontalFlip, Lambda, Compose.
#include "dp/data/transforms.h"

#include "dp/autograd/grad_mode.h"
#include "dp/core/shape.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"

namespace dp::data::transforms {
namespace {

// A seed from the CPU default generator (for calls without a sample generator).
uint64_t draw_seed() {
  Generator& g = default_generator(Device::cpu());
  uint32_t w[4];
  philox4x32(g.seed(), g.reserve(1), w);
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

void check_image(const char* op, const Tensor& data, int64_t min_dim, const char* layout) {
  DP_CHECK(data.defined(), ValueError, op, ": the example's data is undefined");
  DP_CHECK(data.dim() >= min_dim, ShapeError, op, ": expected an image of shape ", layout, ", got a tensor of shape ", data.size_str());
}

}  // namespace

Example Transform::operator()(Example example) const {
  Generator gen(draw_seed());
  return apply(std::move(example), gen);
}

Tensor TensorTransform::operator()(const Tensor& data) const {
  Generator gen(draw_seed());
  return apply(data, gen);
}

// ---------------------------------------------------------------- Normalize

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev) : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  DP_CHECK(!mean_.empty() && !stddev_.empty(), ValueError, "Normalize: mean and std need at least one value each");
  for (size_t c = 0; c < stddev_.size(); ++c) DP_CHECK(stddev_[c] != 0.0, ValueError, "Normalize: std[", c, "] is 0, leading to division by zero");
}

Tensor Normalize::apply(const Tensor& data, Generator&) const {
  check_image("Normalize", data, 3, "[..., C, H, W]");
  DP_CHECK(data.is_floating_point(), DTypeError, "Normalize: expected a floating point image, got ", data.describe());
  const int64_t channels = data.size(-3);
  auto per_channel = [&](const std::vector<double>& v, const char* what) {
    const auto n = static_cast<int64_t>(v.size());
    DP_CHECK(n == channels || n == 1, ShapeError, "Normalize: ", what, " has ", n, " values but the image ", data.size_str(), " has ", channels,
             " channels (dimension -3); give one value per channel or a single value");
    // torchvision: torch.as_tensor(values, dtype=image dtype).view(-1, 1, 1).
    return tensor<double>(v, {n, 1, 1}, options_of(data));
  };
  Tensor mean = per_channel(mean_, "mean");
  Tensor stddev = per_channel(stddev_, "std");
  // A std that is 0 once in the image's dtype (a denormal in float16) divides by zero too.
  DP_CHECK(stddev.ne(0.0).to(kInt64).sum().item<int64_t>() == stddev.numel(), ValueError, "Normalize: std evaluated to zero after conversion to ",
           dtype_name(data.dtype()), ", leading to division by zero");
  NoGradGuard no_grad;
  return (data - mean) / stddev;
}

// ---------------------------------------------------------------- RandomCrop

RandomCrop::RandomCrop(std::array<int64_t, 2> size, int64_t padding) : size_(size), padding_(padding) {
  DP_CHECK(size_[0] > 0 && size_[1] > 0, ValueError, "RandomCrop: the crop size must be positive, got [", size_[0], ", ", size_[1], "]");
  DP_CHECK(padding_ >= 0, ValueError, "RandomCrop: padding must be non-negative, got ", padding_);
}

std::pair<int64_t, int64_t> RandomCrop::corner(int64_t height, int64_t width, Generator& gen) const {
  const int64_t th = size_[0], tw = size_[1];
  DP_CHECK(height >= th && width >= tw, ValueError, "RandomCrop: required crop size (", th, ", ", tw, ") is larger than the input image size (",
           height, ", ", width, ")", padding_ > 0 ? " after padding" : "");
  if (height == th && width == tw) return {0, 0};
  const int64_t i = randint(0, height - th + 1, {1}, kInt64, &gen).item<int64_t>();
  const int64_t j = randint(0, width - tw + 1, {1}, kInt64, &gen).item<int64_t>();
  return {i, j};
}

Tensor RandomCrop::apply(const Tensor& data, Generator& gen) const {
  check_image("RandomCrop", data, 2, "[..., H, W]");
  NoGradGuard no_grad;
  Tensor img = data;
  if (padding_ > 0) {
    Shape sizes = data.sizes();
    sizes[sizes.size() - 2] += 2 * padding_;
    sizes[sizes.size() - 1] += 2 * padding_;
    img = full(sizes, fill_, options_of(data));
    img.narrow(-2, padding_, data.size(-2)).narrow(-1, padding_, data.size(-1)).copy_(data);
  }
  auto [i, j] = corner(img.size(-2), img.size(-1), gen);
  return img.narrow(-2, i, size_[0]).narrow(-1, j, size_[1]).contiguous();
}

// ---------------------------------------------------------------- RandomHorizontalFlip

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  DP_CHECK(p_ >= 0.0 && p_ <= 1.0, ValueError, "RandomHorizontalFlip: p must lie in [0, 1], got ", p_);
}

Tensor RandomHorizontalFlip::apply(const Tensor& data, Generator& gen) const {
  check_image("RandomHorizontalFlip", data, 2, "[..., H, W]");
  if (!(rand({1}, {}, &gen).item<double>() < p_)) return data;
  NoGradGuard no_grad;
  const int64_t w = data.size(-1);
  return index_select(data, -1, arange(w - 1, -1, -1, TensorOptions(kInt64).device(data.device())));
}

// ---------------------------------------------------------------- Lambda, Compose

Lambda::Lambda(std::function<Tensor(const Tensor&)> fn) : fn_(std::move(fn)) {
  DP_CHECK(fn_ != nullptr, ValueError, "Lambda: the function is empty");
}

Compose::Compose(std::vector<std::shared_ptr<const Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t k = 0; k < transforms_.size(); ++k) DP_CHECK(transforms_[k] != nullptr, ValueError, "Compose: transform ", k, " is null");
}

Example Compose::apply(Example example, Generator& gen) const {
  for (const auto& t : transforms_) example = t->apply(std::move(example), gen);
  return example;
}

}  // namespace dp::data::transforms
