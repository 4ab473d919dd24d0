#pragma once
// Loss modules (torch.nn.BCELoss, BCEWithLogitsLoss, MSELoss, L1Loss, NLLLoss, CrossEntropyLoss):
// thin wrappers over dp/ops/loss.h with libtorch's options,
//   dp::nn::CrossEntropyLoss loss(dp::nn::CrossEntropyLossOptions().weight(w).label_smoothing(0.1));
//   dp::Tensor l = loss(logits, target);
// As in PyTorch, `weight` (and `pos_weight`) are registered as buffers, so they follow to() and
// appear in state_dict() when given (an absent one is registered empty and skipped, like PyTorch's
// None buffer). forward() uses the buffers, not the options' copies. They print with no arguments:
// "CrossEntropyLoss()".
#include <cstdint>
#include "dp/nn/module.h"
#include "dp/ops/loss.h"

namespace dp::nn {

// ---- options ----

struct BCELossOptions {
  BCELossOptions() = default;
  BCELossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT: BCELoss(dp::Reduction::Sum)
  // A rescaling weight broadcast to the input's shape.
  BCELossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  BCELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  Reduction reduction() const { return reduction_; }

 private:
  Tensor weight_;
  Reduction reduction_ = Reduction::Mean;
};

struct BCEWithLogitsLossOptions {
  BCEWithLogitsLossOptions() = default;
  BCEWithLogitsLossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT
  BCEWithLogitsLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  BCEWithLogitsLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  // The weight of positive examples, broadcast to the input's shape (typically [C]).
  BCEWithLogitsLossOptions& pos_weight(Tensor w) {
    pos_weight_ = std::move(w);
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  Reduction reduction() const { return reduction_; }
  const Tensor& pos_weight() const { return pos_weight_; }

 private:
  Tensor weight_;
  Reduction reduction_ = Reduction::Mean;
  Tensor pos_weight_;
};

struct MSELossOptions {
  MSELossOptions() = default;
  MSELossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT: MSELoss(dp::Reduction::Sum)
  MSELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_ = Reduction::Mean;
};

struct L1LossOptions {
  L1LossOptions() = default;
  L1LossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT
  L1LossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_ = Reduction::Mean;
};

struct NLLLossOptions {
  NLLLossOptions() = default;
  NLLLossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT
  // One weight per class ([C]).
  NLLLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  NLLLossOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  NLLLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  int64_t ignore_index() const { return ignore_index_; }
  Reduction reduction() const { return reduction_; }

 private:
  Tensor weight_;
  int64_t ignore_index_ = -100;
  Reduction reduction_ = Reduction::Mean;
};

struct CrossEntropyLossOptions {
  CrossEntropyLossOptions() = default;
  CrossEntropyLossOptions(Reduction reduction) : reduction_(reduction) {}  // NOLINT
  // One weight per class ([C]).
  CrossEntropyLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  CrossEntropyLossOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  CrossEntropyLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  // In [0, 1].
  CrossEntropyLossOptions& label_smoothing(double ls) {
    label_smoothing_ = ls;
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  int64_t ignore_index() const { return ignore_index_; }
  Reduction reduction() const { return reduction_; }
  double label_smoothing() const { return label_smoothing_; }

 private:
  Tensor weight_;
  int64_t ignore_index_ = -100;
  Reduction reduction_ = Reduction::Mean;
  double label_smoothing_ = 0.0;
};

// ---- modules ----

// dp::binary_cross_entropy(input, target, weight, reduction).
class BCELossImpl : public Module {
 public:
  explicit BCELossImpl(BCELossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  BCELossOptions options;
  Tensor weight;  // buffer "weight" (undefined when not given)
};
using BCELoss = ModuleHolder<BCELossImpl>;

// dp::binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction).
class BCEWithLogitsLossImpl : public Module {
 public:
  explicit BCEWithLogitsLossImpl(BCEWithLogitsLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  BCEWithLogitsLossOptions options;
  Tensor weight;      // buffer "weight"
  Tensor pos_weight;  // buffer "pos_weight"
};
using BCEWithLogitsLoss = ModuleHolder<BCEWithLogitsLossImpl>;

// dp::mse_loss(input, target, reduction).
class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(MSELossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  MSELossOptions options;
};
using MSELoss = ModuleHolder<MSELossImpl>;

// dp::l1_loss(input, target, reduction).
class L1LossImpl : public Module {
 public:
  explicit L1LossImpl(L1LossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  L1LossOptions options;
};
using L1Loss = ModuleHolder<L1LossImpl>;

// dp::nll_loss(input, target, weight, ignore_index, reduction).
class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(NLLLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  NLLLossOptions options;
  Tensor weight;  // buffer "weight"
};
using NLLLoss = ModuleHolder<NLLLossImpl>;

// dp::cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing).
class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(CrossEntropyLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;

  CrossEntropyLossOptions options;
  Tensor weight;  // buffer "weight"
};
using CrossEntropyLoss = ModuleHolder<CrossEntropyLossImpl>;

}  // namespace dp::nn
