#pragma once
// Tensor factories and random numbers.
#include <cstdint>
#include <vector>
#include "dp/core/generator.h"
#include "dp/core/tensor.h"

namespace dp {

// What a factory makes: dtype, device, requires_grad (libtorch's TensorOptions, builder style).
struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}         // NOLINT: zeros({2}, kInt64) as in libtorch
  TensorOptions(Device d) : device_(d) {}       // NOLINT
  TensorOptions(const char* d) : device_(d) {}  // NOLINT
  TensorOptions dtype(DType d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
};
// Options of an existing tensor (dtype and device).
TensorOptions options_of(const Tensor& t);

Tensor empty(IntArrayRef sizes, TensorOptions opts = {});
Tensor zeros(IntArrayRef sizes, TensorOptions opts = {});
Tensor ones(IntArrayRef sizes, TensorOptions opts = {});
Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
Tensor scalar_tensor(const Scalar& value, TensorOptions opts = {});
// arange(end) / arange(start, end, step): int64 for integral arguments unless opts says otherwise.
Tensor arange(const Scalar& end, std::optional<TensorOptions> opts = std::nullopt);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, std::optional<TensorOptions> opts = std::nullopt);
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});

// From host data (copied). The element type gives the dtype unless opts sets another.
template <typename T>
Tensor tensor(const std::vector<T>& data, IntArrayRef sizes, std::optional<TensorOptions> opts = std::nullopt);
template <typename T>
Tensor tensor(const std::vector<T>& data, std::optional<TensorOptions> opts = std::nullopt) {
  return tensor<T>(data, {static_cast<int64_t>(data.size())}, opts);
}
Tensor tensor(std::initializer_list<double> data, TensorOptions opts = {});
// Copies raw host memory of the given dtype into a new tensor.
Tensor from_blob_copy(const void* data, IntArrayRef sizes, DType dtype, Device device = Device::cpu());

// Random tensors; gen = nullptr uses the device's default generator (seeded by manual_seed).
Tensor rand(IntArrayRef sizes, TensorOptions opts = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(IntArrayRef sizes, TensorOptions opts = {}, Generator* gen = nullptr);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts = kInt64, Generator* gen = nullptr);
Tensor randperm(int64_t n, TensorOptions opts = kInt64, Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& bernoulli_(Tensor& t, double p, Generator* gen = nullptr);

}  // namespace dp
