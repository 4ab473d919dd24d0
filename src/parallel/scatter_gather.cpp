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

}  // namespace detail
}  // namespace dp::parallel
