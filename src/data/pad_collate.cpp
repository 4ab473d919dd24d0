// PadCollate: pad_sequence over the examples' data (and sequence targets), lengths recorded.
#include "dp/data/pad_collate.h"

#include <string>
#include "dp/nn/utils/rnn.h"
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"

namespace dp::data {

namespace {

// pad_sequence's error ("sequence i" is example i), of its own type, said to come from PadCollate.
template <typename F>
Tensor padded(const char* what, F&& f) {
  const std::string prefix = std::string("PadCollate: ") + what + ": ";
  try {
    return f();
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(prefix + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  }
}

}  // namespace

Batch PadCollate::operator()(const std::vector<Example>& examples) const {
  DP_CHECK(!examples.empty(), ValueError, "PadCollate: cannot make a batch of 0 examples");
  const bool has_target = examples.front().target.defined();
  std::vector<Tensor> data, target;
  data.reserve(examples.size());
  if (has_target) target.reserve(examples.size());
  Tensor lengths = empty({static_cast<int64_t>(examples.size())}, kInt64);
  int64_t* len = lengths.data_ptr<int64_t>();
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    DP_CHECK(e.data.defined(), ValueError, "PadCollate: example ", i, " has undefined data");
    DP_CHECK(e.data.dim() >= 1, ShapeError, "PadCollate: example ", i,
             " has 0-dimensional data; a sequence has shape [L, *] with its length in dimension 0");
    DP_CHECK(e.target.defined() == has_target, ValueError, "PadCollate: example ", i, (has_target ? " has no" : " has a"), " target but example 0 ",
             (has_target ? "has one" : "has none"));
    len[i] = e.data.size(0);
    data.push_back(e.data);
    if (has_target) target.push_back(e.target);
  }
  Batch out;
  out.data = padded("data", [&] { return nn::utils::rnn::pad_sequence(data, batch_first_, padding_value_); });
  out.lengths = std::move(lengths);
  if (has_target) {
    if (target.front().dim() == 0) {  // one label per sequence
      for (size_t i = 0; i < target.size(); ++i) {
        DP_CHECK(target[i].dim() == 0, ShapeError, "PadCollate: example ", i, " has a target of shape ", target[i].size_str(),
                 " but example 0 has a 0-dimensional one (targets are all labels or all sequences)");
        DP_CHECK(target[i].dtype() == target.front().dtype(), DTypeError, "PadCollate: example ", i, " has a target of dtype ",
                 dtype_name(target[i].dtype()), " but example 0 has ", dtype_name(target.front().dtype()));
      }
      out.target = stack(target, 0);
    } else {
      out.target = padded("target", [&] { return nn::utils::rnn::pad_sequence(target, batch_first_, target_padding_value_); });
    }
  }
  return out;
}

}  // namespace dp::data
