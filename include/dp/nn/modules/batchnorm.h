#pragma once
// BatchNorm1d and BatchNorm2d (torch.nn.BatchNorm1d / BatchNorm2d). nn::SyncBatchNorm
// (dp/distributed/sync_batch_norm.h) is the variant whose training statistics cover every rank of a
// process group and every DataParallel replica; convert_sync_batchnorm() swaps these for it.
#include <cstdint>
#include <optional>
#include <string>
#include "dp/nn/module.h"

namespace dp::nn {

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  BatchNormOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  // Weight of the newest batch in the running averages; nullopt: a cumulative moving average
  // (factor 1 / num_batches_tracked).
  BatchNormOptions& momentum(std::optional<double> m) {
    momentum_ = m;
    return *this;
  }
  // A learnable per-channel weight (ones) and bias (zeros).
  BatchNormOptions& affine(bool a) {
    affine_ = a;
    return *this;
  }
  // Running mean / variance buffers, used in eval(); without them eval() uses batch statistics.
  BatchNormOptions& track_running_stats(bool t) {
    track_running_stats_ = t;
    return *this;
  }
  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }

 private:
  int64_t num_features_;
  double eps_ = 1e-5;
  std::optional<double> momentum_ = 0.1;
  bool affine_ = true;
  bool track_running_stats_ = true;
};

// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm): parameters weight, bias and
// buffers running_mean, running_var, num_batches_tracked (int64 scalar), in that order. forward()
// updates the buffers in place (the same tensors, so handles to them see the change).
class BatchNormImplBase : public Module {
 public:
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input);
  // "16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True"
  std::string extra_repr() const override;

  BatchNormOptions options;
  Tensor weight;  // undefined without affine
  Tensor bias;
  Tensor running_mean;  // undefined without track_running_stats
  Tensor running_var;
  Tensor num_batches_tracked;

 protected:
  explicit BatchNormImplBase(const BatchNormOptions& options);
  // ValueError unless the input has the dimensionality this layer takes.
  virtual void check_input_dim(const Tensor& input) const = 0;
};

// Input [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm1dImpl(int64_t num_features) : BatchNorm1dImpl(BatchNormOptions(num_features)) {}
  explicit BatchNorm1dImpl(const BatchNormOptions& options) : BatchNormImplBase(options) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};
using BatchNorm1d = ModuleHolder<BatchNorm1dImpl>;

// Input [N, C, H, W].
class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(BatchNormOptions(num_features)) {}
  explicit BatchNorm2dImpl(const BatchNormOptions& options) : BatchNormImplBase(options) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};
using BatchNorm2d = ModuleHolder<BatchNorm2dImpl>;

}  // namespace dp::nn
