#pragma once
// Transforms of dataset examples (libtorch's torch::data::transforms, torchvision's image
// transforms): Normalize, RandomCrop, RandomHorizontalFlip, Lambda and Compose. Apply them to a
// dataset with dp::data::map (dp/data/map_dataset.h); the DataLoader then batches the transformed
// examples:
//
//   namespace T = dp::data::transforms;
//   auto train = dp::data::map(dp::data::FashionMNIST(),
//                              T::Compose(T::RandomCrop(28, /*padding=*/2), T::RandomHorizontalFlip(),
//                                         T::Normalize(0.2860, 0.3530)));
//   dp::data::DataLoader loader(std::move(train), dp::data::DataLoaderOptions(64).shuffle(true));
//
// Images are tensors [..., C, H, W] (a sample [C, H, W], or [H, W] for the crop and the flip).
// Random transforms draw from the generator they are given, which MapDataset makes per sample
// (see map_dataset.h: reproducible under dp::manual_seed whatever the number of loader workers).
// Transforms are const and are called from several loader threads at once; they run on data, not
// on autograd graphs (nothing they build requires grad).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/core/generator.h"
#include "dp/data/example.h"

namespace dp::data::transforms {

// A transform of one example.
class Transform {
 public:
  virtual ~Transform() = default;
  // `gen` is the sample's generator: random transforms draw from it, the others ignore it.
  virtual Example apply(Example example, Generator& gen) const = 0;
  Example operator()(Example example, Generator& gen) const { return apply(std::move(example), gen); }
  // With a generator seeded from the CPU default generator (dp::manual_seed makes it reproducible).
  Example operator()(Example example) const;
};

// A transform of the example's data alone; the target passes through (libtorch's TensorTransform).
class TensorTransform : public Transform {
 public:
  virtual Tensor apply(const Tensor& data, Generator& gen) const = 0;
  Example apply(Example example, Generator& gen) const override {
    example.data = apply(example.data, gen);
    return example;
  }
  using Transform::operator();
  Tensor operator()(const Tensor& data, Generator& gen) const { return apply(data, gen); }
  Tensor operator()(const Tensor& data) const;
};

// (x - mean[c]) / std[c] for every channel c of an image [..., C, H, W] (torchvision's Normalize,
// libtorch's transforms::Normalize): mean and std hold C values, or one value for every channel.
// The values are converted to the image's dtype first, as torchvision does. A std of 0 and empty
// lists are ValueErrors; a non-floating image is a DTypeError; fewer than 3 dimensions or a
// channel count that matches neither C nor 1 is a ShapeError.
class Normalize : public TensorTransform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> stddev);
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}
  using TensorTransform::apply;
  Tensor apply(const Tensor& data, Generator& gen) const override;
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stddev() const { return stddev_; }

 private:
  std::vector<double> mean_, stddev_;
};

// A crop of size [h, w] at a random position (torchvision's RandomCrop with padding_mode
// "constant"): the image [..., H, W] is first padded by `padding` on all four sides with `fill`,
// then the crop's top row i and left column j are drawn as torchvision draws them,
// i = randint(0, H + 2 * padding - h + 1), then j = randint(0, W + 2 * padding - w + 1), from the
// sample's generator (no draw when the padded image has exactly the crop's size). So output pixel
// (y, x) is padded pixel (i + y, j + x). A crop larger than the padded image is a ValueError;
// sizes must be positive and padding non-negative (ValueError), the image at least 2-D (ShapeError).
class RandomCrop : public TensorTransform {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(std::array<int64_t, 2>{size, size}, padding) {}
  RandomCrop(std::array<int64_t, 2> size, int64_t padding = 0);
  // The value of the padding pixels (default 0).
  RandomCrop& fill(double value) {
    fill_ = value;
    return *this;
  }
  using TensorTransform::apply;
  Tensor apply(const Tensor& data, Generator& gen) const override;
  // The crop's top-left corner (i, j) in an image of `height` x `width` (padding included), drawn
  // from `gen` exactly as apply() draws it.
  std::pair<int64_t, int64_t> corner(int64_t height, int64_t width, Generator& gen) const;
  std::array<int64_t, 2> size() const { return size_; }
  int64_t padding() const { return padding_; }

 private:
  std::array<int64_t, 2> size_;
  int64_t padding_;
  double fill_ = 0.0;
};

// Mirrors the image [..., H, W] left to right with probability p (torchvision's
// RandomHorizontalFlip): one draw u = rand(1) from the sample's generator, flipped when u < p.
// p outside [0, 1] is a ValueError; the image must be at least 2-D (ShapeError).
class RandomHorizontalFlip : public TensorTransform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  using TensorTransform::apply;
  Tensor apply(const Tensor& data, Generator& gen) const override;
  double p() const { return p_; }

 private:
  double p_;
};

// A function of the data (libtorch's transforms::Lambda, torchvision's Lambda).
class Lambda : public TensorTransform {
 public:
  explicit Lambda(std::function<Tensor(const Tensor&)> fn);
  using TensorTransform::apply;
  Tensor apply(const Tensor& data, Generator&) const override { return fn_(data); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

// Applies its transforms in order, all drawing from the one sample generator (torchvision's
// Compose). Takes transforms by value or as std::shared_ptr; a null one is a ValueError.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms);
  template <typename... Ts>
  requires(sizeof...(Ts) > 0 && (!std::is_same_v<std::decay_t<Ts>, Compose> && ...)) explicit Compose(Ts&&... transforms)
      : Compose(std::vector<std::shared_ptr<const Transform>>{hold(std::forward<Ts>(transforms))...}) {}
  using Transform::operator();
  Example apply(Example example, Generator& gen) const override;
  size_t size() const { return transforms_.size(); }

 private:
  template <typename T>
  static std::shared_ptr<const Transform> hold(T&& t) {
    using D = std::decay_t<T>;
    if constexpr (std::is_convertible_v<D, std::shared_ptr<const Transform>>) {
      return std::shared_ptr<const Transform>(std::forward<T>(t));
    } else {
      static_assert(std::is_base_of_v<Transform, D>, "Compose: every argument must be a transform or a std::shared_ptr to one");
      return std::make_shared<const D>(std::forward<T>(t));
    }
  }
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

}  // namespace dp::data::transforms
