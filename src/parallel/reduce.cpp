// reduce_add_coalesced: sums one list of tensors per device into fresh tensors on a destination,
// in one pass over all of them, split across the devices' workers when there is enough work; each
// range is the backend's k-way sum (backend/comm_kernels.h's sum_into).
#include "parallel/reduce.h"
#include <algorithm>
#include "backend/comm_kernels.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_registry.h"
#include "dp/ops/factory.h"
#include "dp/parallel/comm.h"
#include "dp/parallel/detail/run.h"
#include "parallel/comm_device.h"

namespace dp::parallel {
namespace detail {
namespace {

// Below this many elements a reduction stays in the calling thread: waking workers costs more.
constexpr int64_t kMinElementsPerPart = int64_t{1} << 16;

// One output tensor and the inputs that add into it (contiguous, host memory).
struct Job {
  Tensor out;
  std::vector<Tensor> ins;
  int64_t start = 0;  // offset of this tensor in the virtual concatenation of all outputs
};

void run_range(const std::vector<Job>& jobs, int64_t begin, int64_t end) {
  // First job that overlaps [begin, end): jobs are sorted by start.
  auto it = std::upper_bound(jobs.begin(), jobs.end(), begin, [](int64_t v, const Job& j) { return v < j.start; });
  size_t first = static_cast<size_t>(std::max<std::ptrdiff_t>(0, (it - jobs.begin()) - 1));
  for (size_t q = first; q < jobs.size(); ++q) {
    const Job& job = jobs[q];
    const int64_t lo = std::max(begin, job.start) - job.start;
    const int64_t hi = std::min(end, job.start + job.out.numel()) - job.start;
    if (job.start >= end) break;
    if (lo >= hi) continue;
    // The backend's k-way sum on this range (the CPU's: host memory, in the calling thread).
    const int64_t es = static_cast<int64_t>(element_size(job.out.dtype()));
    std::vector<const void*> ins;
    ins.reserve(job.ins.size());
    for (const Tensor& t : job.ins) ins.push_back(static_cast<const char*>(t.data_ptr()) + lo * es);
    backend::sum_into_kernel(job.out.device().type, static_cast<char*>(job.out.data_ptr()) + lo * es, ins, hi - lo, job.out.dtype(), Stream());
  }
}

}  // namespace

std::vector<Tensor> reduce_sum(const std::vector<std::vector<Tensor>>& inputs, const std::vector<TensorSpec>& specs, Device destination,
                               size_t buffer_size) {
  NoGradGuard no_grad;
  bool off_host = !destination.is_cpu();
  for (const auto& per_device : inputs)
    for (const Tensor& t : per_device) off_host = off_host || (t.defined() && !t.is_cpu());
  if (off_host) return device_reduce_sum(inputs, specs, destination, buffer_size);
  const size_t count = specs.size();
  std::vector<Job> jobs(count);
  std::vector<Tensor> results(count);
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const TensorSpec& spec = specs[i];
    std::vector<Tensor> ins;
    for (const auto& per_device : inputs) {
      const Tensor& t = per_device[i];
      if (!t.defined()) continue;
      ins.push_back(t.is_contiguous() ? t : t.contiguous());
    }
    if (ins.empty()) {  // nothing reached this tensor on any device: its sum is zero
      results[i] = zeros(spec.sizes, TensorOptions().dtype(spec.dtype).device(destination));
      continue;
    }
    if (ins.size() == 1 && ins[0].device() == destination) {  // a single contribution: it is the sum
      results[i] = ins[0];
      continue;
    }
    results[i] = empty(spec.sizes, TensorOptions().dtype(spec.dtype).device(destination));
    jobs[i].out = results[i];
    jobs[i].ins = std::move(ins);
  }
  // Jobs in concatenation order (skipping those already done).
  std::vector<Job> work;
  for (Job& j : jobs) {
    if (!j.out.defined() || j.out.numel() == 0) continue;
    j.start = total;
    total += j.out.numel();
    work.push_back(std::move(j));
  }
  if (total == 0) return results;

  // The workers of the devices involved share the pass, each taking a contiguous range.
  std::vector<Worker*> helpers;
  for (const auto& per_device : inputs)
    for (const Tensor& t : per_device)
      if (t.defined()) {
        Worker* w = worker_for(t.device());
        if (w && std::find(helpers.begin(), helpers.end(), w) == helpers.end()) helpers.push_back(w);
        break;
      }
  const int64_t parts = std::clamp<int64_t>(total / kMinElementsPerPart, 1, std::max<size_t>(1, helpers.size()));
  if (parts == 1) {
    run_range(work, 0, total);
    return results;
  }
  // Part 0 in the calling thread (it is usually one of the workers), the others on the other workers.
  Worker* self = Worker::current();
  std::vector<Worker*> targets{nullptr};
  for (Worker* w : helpers)
    if (w != self && static_cast<int64_t>(targets.size()) < parts) targets.push_back(w);
  const int64_t n = static_cast<int64_t>(targets.size());
  auto errors = run_on_workers(targets, [&](size_t p) {
    const int64_t begin = total * static_cast<int64_t>(p) / n;
    const int64_t end = total * static_cast<int64_t>(p + 1) / n;
    run_range(work, begin, end);
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace detail

std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs, Device destination, size_t buffer_size) {
  DP_CHECK(!inputs.empty(), ValueError, "reduce_add_coalesced: expected at least one device's tensors");
  DP_CHECK(buffer_size > 0, ValueError, "reduce_add_coalesced: buffer_size must be positive");
  check_device(destination);
  const std::vector<Tensor>& first = inputs[0];
  std::vector<detail::TensorSpec> specs;
  for (size_t i = 0; i < first.size(); ++i) {
    DP_CHECK(first[i].defined(), ValueError, "reduce_add_coalesced: tensor ", i, " of device list 0 is undefined");
    specs.push_back({first[i].sizes(), first[i].dtype()});
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    DP_CHECK(inputs[j].size() == first.size(), ValueError, "reduce_add_coalesced: device list ", j, " has ", inputs[j].size(),
             " tensors, but device list 0 has ", first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      const Tensor& t = inputs[j][i];
      DP_CHECK(t.defined(), ValueError, "reduce_add_coalesced: tensor ", i, " of device list ", j, " is undefined");
      DP_CHECK(t.sizes() == first[i].sizes(), ShapeError, "reduce_add_coalesced: input ", j, " has invalid size: got ", t.size_str(), " for tensor ",
               i, ", but expected ", first[i].size_str());
      DP_CHECK(t.dtype() == first[i].dtype(), DTypeError, "reduce_add_coalesced: input ", j, " has dtype ", dtype_name(t.dtype()), " for tensor ", i,
               ", but expected ", dtype_name(first[i].dtype()));
    }
  }
  std::vector<Tensor> out = detail::reduce_sum(inputs, specs, destination, buffer_size);
  // A lone input already on the destination is returned as a fresh tensor, never as the input.
  for (size_t i = 0; i < out.size(); ++i)
    if (inputs.size() == 1 && out[i].is_same(inputs[0][i])) out[i] = inputs[0][i].clone();
  return out;
}

Tensor reduce_add(const std::vector<Tensor>& inputs, Device destination) {
  DP_CHECK(!inputs.empty(), ValueError, "reduce_add: expected at least one tensor");
  std::vector<std::vector<Tensor>> lists;
  for (const Tensor& t : inputs) lists.push_back({t});
  return reduce_add_coalesced(lists, destination)[0];
}

}  // namespace dp::parallel
