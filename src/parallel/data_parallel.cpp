// DataParallel's type-independent half: devices, the location check, replicas.
#include "dp/parallel/data_parallel.h"
#include <algorithm>
#include "dp/core/device_registry.h"
#include "dp/core/device_runtime.h"

namespace dp::parallel::detail {
namespace {

// "cuda" without an index: the calling thread's current device of that type (as PyTorch's
// _get_device_index); index 0 when there is none, so check_device names the problem.
Device current_of(DeviceType type) {
  const DeviceRuntime* rt = device_runtime(type);
  if (rt != nullptr && rt->device_count() > 0) return Device(type, rt->current_device());
  return Device(type, 0);
}

Device normalize(Device d, const char* what) {
  if (!d.is_cpu() && !d.has_index()) d = current_of(d.type);
  DP_CHECK(d.has_index(), ValueError, "DataParallel: ", what, " must be indexed devices such as cpu:0 or cuda:1, not the host device '", d.str(),
           "' (CPU devices are cpu:0 ... cpu:", cpu_device_count() - 1, ")");
  check_device(d);
  return d;
}

}  // namespace

DataParallelCore::DataParallelCore(const nn::ModulePtr& module, const DataParallelOptions& options) : options_(options) {
  DP_CHECK(module != nullptr, ValueError, "DataParallel: the module is null");
  if (options.device_ids()) {
    DP_CHECK(!options.device_ids()->empty(), ValueError,
             "DataParallel: device_ids is empty; list at least one device (e.g. {\"cpu:0\", \"cpu:1\"}), or leave it unset to use every CUDA device");
    for (Device d : *options.device_ids()) {
      Device n = normalize(d, "device_ids");
      DP_CHECK(std::find(device_ids_.begin(), device_ids_.end(), n) == device_ids_.end(), ValueError, "DataParallel: device ", n.str(),
               " is listed twice in device_ids");
      DP_CHECK(device_ids_.empty() || device_ids_[0].type == n.type, ValueError, "DataParallel: device_ids mixes ", device_ids_[0].str(), " and ",
               n.str(), "; list devices of one type");
      device_ids_.push_back(n);
    }
  } else {
    // Every device of the accelerator this build and machine have (none: the no-device path).
    if (const std::optional<DeviceType> type = default_accelerator()) device_ids_ = devices(*type);
  }
  if (device_ids_.empty()) return;
  if (options.output_device()) {
    Device out = *options.output_device();
    if (!out.is_cpu() && !out.has_index()) out = current_of(out.type);
    check_device(out);
    output_device_ = out;
  } else {
    output_device_ = device_ids_[0];
  }
  split_.devices = device_ids_;
  split_.dim = options.dim();
  split_.policy = options.split();
  split_.chunk_sizes = options.chunk_sizes();
  DP_CHECK(split_.chunk_sizes.empty() || split_.chunk_sizes.size() == device_ids_.size(), ValueError, "DataParallel: chunk_sizes has ",
           split_.chunk_sizes.size(), " entries but there are ", device_ids_.size(), " devices");
  for (int64_t s : split_.chunk_sizes) DP_CHECK(s >= 0, ValueError, "DataParallel: chunk_sizes must be non-negative, got ", s);
}

SplitOptions DataParallelCore::split_for(size_t args, bool with_target) const {
  const auto& in_dims = options_.in_dims();
  const auto& target_dim = options_.target_dim();
  if (!in_dims && !(with_target && target_dim)) return split_;
  SplitOptions split = split_;
  if (with_target) {
    const int64_t d = target_dim.value_or(options_.dim());
    split.arg_dims.push_back(d);
    split.arg_names.push_back("the target (" + std::string(target_dim ? "target_dim" : "dim") + " = " + std::to_string(d) + ")");
  }
  if (in_dims) {
    DP_CHECK(in_dims->size() == args, ValueError, "DataParallel: in_dims has ", in_dims->size(), " entries but forward", with_target ? "_loss" : "",
             " was called with ", args, " argument", args == 1 ? "" : "s", " (", with_target ? "after the target; " : "",
             "give one dim per argument, std::nullopt for one that is not split)");
    for (size_t i = 0; i < args; ++i) {
      split.arg_dims.push_back((*in_dims)[i]);
      split.arg_names.push_back("argument " + std::to_string(i) + " (in_dims[" + std::to_string(i) +
                                "] = " + ((*in_dims)[i] ? std::to_string(*(*in_dims)[i]) : std::string("nullopt")) + ")");
    }
  } else {
    for (size_t i = 0; i < args; ++i) {
      split.arg_dims.push_back(options_.dim());
      split.arg_names.push_back("argument " + std::to_string(i) + " (dim = " + std::to_string(options_.dim()) + ")");
    }
  }
  return split;
}

void DataParallelCore::check_location(const nn::ModulePtr& module) {
  if (!replicas_ || replicas_->original() != module) replicas_ = std::make_unique<ReplicaSet>(module);
  replicas_->check_location(device_ids_[0]);
}

std::vector<nn::ModulePtr> DataParallelCore::replicas(const nn::ModulePtr& module, size_t count) {
  if (!replicas_ || replicas_->original() != module) replicas_ = std::make_unique<ReplicaSet>(module);
  if (!options_.keep_replicas()) replicas_->reset();
  // check_location() ran just before (every forward), so the structure snapshot is fresh.
  return replicas_->prepare(std::vector<Device>(device_ids_.begin(), device_ids_.begin() + static_cast<std::ptrdiff_t>(count)), false,
                            /*check_structure=*/false);
}

void DataParallelCore::invalidate() {
  if (replicas_) replicas_->reset();
}

}  // namespace dp::parallel::detail
