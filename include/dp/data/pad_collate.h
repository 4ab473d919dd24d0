#pragma once
// PadCollate: a DataLoader collate function for variable-length sequences.
//
//   DataLoader loader(dataset, DataLoaderOptions(32).collate_fn(PadCollate().padding_value(0)));
//   for (Batch& b : loader) {
//     // b.data [B, L_max, *] padded with 0, b.target padded with -100 (cross_entropy's
//     // ignore_index), b.lengths int64 [B] on the CPU: each sample's length before padding.
//   }
#include <vector>
#include "dp/data/example.h"

namespace dp::data {

// Pads every example's `data` ([L_i, *], one trailing shape, dtype and device) to the longest with
// nn::utils::rnn::pad_sequence, giving [B, L_max, *] (batch_first, the default: a DataLoader batch
// leads with B) or [L_max, B, *], and records the lengths L_i in `lengths` (int64 CPU [B]).
// Targets, when the examples have them (all or none), are padded the same way with
// target_padding_value if they are sequences ([T_i, ...], their own lengths, not recorded), and
// stacked into [B] if they are 0-dimensional (one label per sequence).
//
// Errors (the DataLoader puts the batch number in front): ValueError for an empty list or a target
// present on some examples only; ShapeError for 0-dimensional data, trailing shapes that differ or
// a mix of 0-d and sequence targets; DTypeError / DeviceError for examples that disagree; a padding
// value the dtype cannot hold (-100 in uint8) is a ValueError. Each names the example.
// Stateless and const: safe to call from several DataLoader workers at once.
class PadCollate {
 public:
  PadCollate() = default;

  // What `data` is padded with (converted to its dtype; default 0).
  PadCollate& padding_value(double v) {
    padding_value_ = v;
    return *this;
  }
  // What sequence targets are padded with (default -100, the ignore_index of cross_entropy and
  // nll_loss, so the padded positions add nothing to the loss).
  PadCollate& target_padding_value(double v) {
    target_padding_value_ = v;
    return *this;
  }
  // [B, L_max, *] (true, the default) or [L_max, B, *] (false, pad_sequence's default layout).
  PadCollate& batch_first(bool v) {
    batch_first_ = v;
    return *this;
  }

  double padding_value() const { return padding_value_; }
  double target_padding_value() const { return target_padding_value_; }
  bool batch_first() const { return batch_first_; }

  Batch operator()(const std::vector<Example>& examples) const;

 private:
  double padding_value_ = 0.0;
  double target_padding_value_ = -100.0;
  bool batch_first_ = true;
};

}  // namespace dp::data
