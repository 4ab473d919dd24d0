// The untyped parts of the recursive scatter and gather (scatter_gather.h).
#include "dp/parallel/scatter_gather.h"
#include "dp/parallel/comm.h"

namespace dp::parallel {

std::vector<int64_t> split_sizes(const SplitOptions& options, int64_t batch) {
  const int64_t n = static_cast<int64_t>(options.devices.size());
  DP_CHECK(n > 0, ValueError, "scatter: expected at least one device to scatter to");
  if (!options.chunk_sizes.empty()) {
    DP_CHECK(options.chunk_sizes.size() == options.devices.size(), ValueError,
             "scatter: expected devices and chunk_sizes to be of same length, but got len(devices) = ", n,
             " and len(chunk_sizes) = ", options.chunk_sizes.size());
    return options.chunk_sizes;
  }
  return options.policy == SplitPolicy::Balanced ? balanced_sizes(batch, n) : chunk_sizes(batch, n);
}

namespace detail {

std::vector<std::vector<Tensor>> split_all(const std::vector<Tensor>& tensors, const SplitOptions& options, size_t& replicas) {
  DP_CHECK(!options.devices.empty(), ValueError, "scatter: expected at least one device to scatter to");
  replicas = options.devices.size();  // no tensor at all: every device runs
  std::vector<std::vector<Tensor>> pieces;
  pieces.reserve(tensors.size());
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    DP_CHECK(t.dim() > 0, ShapeError, "scatter: argument of size ", t.size_str(),
             " is a 0-dim tensor, which can't be split over devices (chunk expects at least a 1-dimensional tensor); pass it inside a "
             "type DataParallel does not scatter, or give it a batch dimension");
    DP_CHECK(options.dim >= -t.dim() && options.dim < t.dim(), IndexError, "scatter: dim ", options.dim, " is out of range for an argument of size ",
             t.size_str());
    const int64_t d = options.dim < 0 ? options.dim + t.dim() : options.dim;
    std::vector<int64_t> sizes = split_sizes(options, t.size(d));
    // The device list shrinks to the chunks this tensor yields (torch.chunk may yield fewer).
    std::vector<Device> devices(options.devices.begin(), options.devices.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
    std::vector<Tensor> chunks = scatter(t, devices, sizes, d);
    if (!first) {
      first = &t;
      replicas = chunks.size();
    }
    DP_CHECK(chunks.size() == replicas, ShapeError, "scatter: arguments split into different numbers of chunks: one of size ", first->size_str(),
             " gives ", replicas, " and one of size ", t.size_str(), " gives ", chunks.size(), " over ", options.devices.size(),
             " devices along dim ", options.dim, " (every tensor argument is split along the same dim; give them the same batch size)");
    pieces.push_back(std::move(chunks));
  }
  return pieces;
}

namespace {

std::string arg_name(const SplitOptions& options, size_t arg) {
  if (arg < options.arg_names.size() && !options.arg_names[arg].empty()) return options.arg_names[arg];
  return "argument " + std::to_string(arg);
}

}  // namespace

std::vector<std::vector<Tensor>> plan_scatter(const std::vector<ArgTensor>& tensors, const std::vector<ArgSequence>& sequences,
                                              const SplitOptions& options, ScatterPlan& plan) {
  plan = ScatterPlan{};
  if (options.arg_dims.empty()) {  // one dim for every tensor (PyTorch's rule)
    std::vector<Tensor> all;
    all.reserve(tensors.size());
    for (const ArgTensor& t : tensors) all.push_back(t.tensor);
    std::vector<std::vector<Tensor>> pieces = split_all(all, options, plan.replicas);
    if (!all.empty()) {
      const Tensor& first = all[0];
      plan.split = true;
      plan.dim = options.dim < 0 ? options.dim + first.dim() : options.dim;
      plan.batch = first.size(plan.dim);
      for (const Tensor& piece : pieces[0]) plan.rows.push_back(piece.size(plan.dim));
    }
    return pieces;
  }
  DP_CHECK(!options.devices.empty(), ValueError, "scatter: expected at least one device to scatter to");
  // The batch: every split argument must hold the same number of rows along its own dim.
  std::string batch_from;
  auto agree = [&](int64_t rows, const std::string& what) {
    if (!plan.split) {
      plan.split = true;
      plan.batch = rows;
      batch_from = what;
      return;
    }
    DP_CHECK(rows == plan.batch, ShapeError, "DataParallel scatter: ", what, " has ", rows, " rows but ", batch_from, " has ", plan.batch,
             "; with per-argument dims every split argument must hold the same batch (give an argument that is not batched the dim "
             "std::nullopt)");
  };
  std::vector<int64_t> dims(tensors.size(), 0);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k].tensor;
    const std::optional<int64_t>& dim = options.arg_dims[tensors[k].arg];
    if (!dim) continue;
    const std::string name = arg_name(options, tensors[k].arg);
    DP_CHECK(t.dim() > 0, ShapeError, "DataParallel scatter: ", name,
             " holds a 0-dim tensor, which can't be split over devices; give it a batch "
             "dimension, or the dim std::nullopt to pass it whole to every replica");
    DP_CHECK(*dim >= -t.dim() && *dim < t.dim(), IndexError, "DataParallel scatter: dim ", *dim, " is out of range for a tensor of size ",
             t.size_str(), " in ", name, " (a ", t.dim(), "-dim tensor takes dims ", -t.dim(), " to ", t.dim() - 1, ")");
    dims[k] = *dim < 0 ? *dim + t.dim() : *dim;
    if (!plan.split) plan.dim = dims[k];
    agree(t.size(dims[k]), name + " (a tensor of size " + t.size_str() + ", along dim " + std::to_string(dims[k]) + ")");
  }
  for (const ArgSequence& seq : sequences)
    agree(static_cast<int64_t>(seq.length),
          arg_name(options, seq.arg) + " (a std::vector of " + std::to_string(seq.length) + " values, split with the batch: one per row)");
  if (!plan.split) {  // nothing is batched: every device runs on the whole values
    plan.replicas = options.devices.size();
  } else {
    plan.rows = split_sizes(options, plan.batch);
    int64_t total = 0;
    for (int64_t r : plan.rows) total += r;
    DP_CHECK(total == plan.batch, ValueError, "DataParallel scatter: chunk_sizes sum to ", total, " but the batch has ", plan.batch, " rows");
    plan.replicas = plan.rows.size();
  }
  const std::vector<Device> devices(options.devices.begin(), options.devices.begin() + static_cast<std::ptrdiff_t>(plan.replicas));
  std::vector<std::vector<Tensor>> pieces;
  pieces.reserve(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k].tensor;
    if (options.arg_dims[tensors[k].arg]) {
      pieces.push_back(scatter(t, devices, plan.rows, dims[k]));
    } else {
      std::vector<Tensor> whole;
      whole.reserve(devices.size());
      for (Device d : devices) whole.push_back(t.device() == d ? t : t.to(d));
      pieces.push_back(std::move(whole));
    }
  }
  return pieces;
}

std::vector<std::string> describe_slices(int64_t batch, const std::vector<int64_t>& rows, int64_t dim) {
  std::vector<std::string> out;
  out.reserve(rows.size());
  int64_t offset = 0;
  const std::string of = " of a batch of " + std::to_string(batch) + " split along dim " + std::to_string(dim);
  for (size_t j = 0; j < rows.size(); ++j) {
    std::string s = "replica " + std::to_string(j) + " of " + std::to_string(rows.size()) + " got ";
    if (rows[j] == 0)
      s += "no rows";
    else if (rows[j] == 1)
      s += "row " + std::to_string(offset);
    else
      s += "rows " + std::to_string(offset) + ".." + std::to_string(offset + rows[j] - 1);
    out.push_back(s + of);
    offset += rows[j];
  }
  return out;
}

Tensor TensorGatherer::gather(const std::vector<Tensor>& parts) {
  size_t defined = 0;
  for (const Tensor& t : parts) defined += t.defined() ? 1 : 0;
  if (defined == 0) return Tensor();
  if (defined != parts.size())
    fail("an undefined tensor in " + std::to_string(parts.size() - defined) + " of " + std::to_string(parts.size()) + " replicas' outputs");
  if (move_only) return parts[0].to(destination);
  check_shapes(parts);
  try {
    return parallel::gather(parts, destination, dim);
  } catch (const ShapeError& e) {
    throw ShapeError("DataParallel gather of " + path.str() + ": " + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError("DataParallel gather of " + path.str() + ": " + e.what());
  } catch (const IndexError& e) {
    throw IndexError("DataParallel gather of " + path.str() + ": " + e.what());
  }
}

void TensorGatherer::fail(const std::string& what) { throw ValueError("DataParallel gather of " + path.str() + ": " + what); }

void TensorGatherer::check_shapes(const std::vector<Tensor>& parts) const {
  bool scalars = true;
  for (const Tensor& t : parts) scalars = scalars && t.dim() == 0;
  if (scalars) return;  // gathered into a vector
  const Tensor& first = parts[0];
  const int64_t nd = first.dim();
  const std::string source = dim_source.empty() ? "dim " + std::to_string(dim) : dim_source;
  if (nd > 0 && (dim < -nd || dim >= nd))
    throw IndexError("DataParallel gather of " + path.str() + ": " + source + " is out of range for the replicas' outputs of size " +
                     first.size_str() + " (dims " + std::to_string(-nd) + " to " + std::to_string(nd - 1) + ")");
  const int64_t d = dim < 0 ? dim + nd : dim;
  bool same = true;
  for (const Tensor& t : parts) {
    if (t.dim() != nd) {
      same = false;
      continue;
    }
    for (int64_t i = 0; i < nd; ++i)
      if (i != d && t.size(i) != first.size(i)) same = false;
  }
  if (same) return;
  std::string shapes;
  for (size_t i = 0; i < parts.size(); ++i) shapes += (i ? ", " : "") + parts[i].size_str();
  throw ShapeError("DataParallel gather of " + path.str() + ": the replicas returned tensors of sizes " + shapes +
                   ", which differ in a dimension other than the gather dim (" + source +
                   "); they are concatenated along it, so every other dimension must agree. A module that pads sequences itself "
                   "makes this mistake when each replica pads to the longest sequence it saw (pad_packed_sequence does, PyTorch's "
                   "FAQ case): pad to the whole batch's length instead, pad_packed_sequence(packed, batch_first, padding_value, "
                   "total_length) with total_length = padded.size(1) for batch_first (padded.size(0) otherwise), taken from the padded "
                   "input before packing; scatter splits only the batch, so it is the same on every replica");
}

}  // namespace detail
}  // namespace dp::parallel
