// Default collation (stack) and Dataset::get_batch's fallback.
#include "dp/data/dataset.h"

#include "dp/ops/shape.h"

namespace dp::data {

namespace {

// Samples that differ only in their length (dim 0) are sequences: say how to batch them.
const char* pad_hint(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim() || a.dim() == 0) return "";
  for (int64_t d = 1; d < a.dim(); ++d)
    if (a.sizes()[d] != b.sizes()[d]) return "";
  return " (samples of different lengths cannot be stacked: pad them with a collate function, "
         "DataLoaderOptions().collate_fn(dp::data::PadCollate()), which also records their lengths)";
}

}  // namespace

Example collate(const std::vector<Example>& examples) {
  DP_CHECK(!examples.empty(), ValueError, "collate: cannot make a batch of 0 examples");
  const Example& first = examples.front();
  DP_CHECK(first.data.defined(), ValueError, "collate: example 0 has undefined data");
  const bool has_target = first.target.defined();
  std::vector<Tensor> data, target;
  data.reserve(examples.size());
  if (has_target) target.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    DP_CHECK(e.data.defined(), ValueError, "collate: example ", i, " has undefined data");
    // Checked here rather than left to stack() so the message says which example disagrees.
    DP_CHECK(e.data.sizes() == first.data.sizes(), ShapeError, "collate: example ", i, " has data of shape ", e.data.size_str(),
             " but example 0 has ", first.data.size_str(), pad_hint(e.data, first.data));
    DP_CHECK(e.data.dtype() == first.data.dtype(), DTypeError, "collate: example ", i, " has data of dtype ", dtype_name(e.data.dtype()),
             " but example 0 has ", dtype_name(first.data.dtype()));
    DP_CHECK(e.target.defined() == has_target, ValueError, "collate: example ", i, (has_target ? " has no" : " has a"), " target but example 0 ",
             (has_target ? "has one" : "has none"));
    data.push_back(e.data);
    if (has_target) {
      DP_CHECK(e.target.sizes() == first.target.sizes(), ShapeError, "collate: example ", i, " has a target of shape ", e.target.size_str(),
               " but example 0 has ", first.target.size_str(), pad_hint(e.target, first.target));
      DP_CHECK(e.target.dtype() == first.target.dtype(), DTypeError, "collate: example ", i, " has a target of dtype ", dtype_name(e.target.dtype()),
               " but example 0 has ", dtype_name(first.target.dtype()));
      target.push_back(e.target);
    }
  }
  Example out;
  out.data = stack(data, 0);
  if (has_target) out.target = stack(target, 0);
  return out;
}

Example Dataset::get_batch(const std::vector<int64_t>& indices) {
  const size_t n = size();
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) {
    DP_CHECK(i >= 0 && static_cast<size_t>(i) < n, IndexError, "Dataset::get_batch: index ", i, " is out of range for a dataset of size ", n);
    examples.push_back(get(static_cast<size_t>(i)));
  }
  return collate(examples);
}

}  // namespace dp::data
