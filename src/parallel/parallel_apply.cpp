// Errors of replicas: re-thrown with the replica and device named, type kept (errors in the backward of
// a replica's nodes get the same context from the autograd engine: Node::replica()).
#include "dp/parallel/parallel_apply.h"
#include <cctype>
#include <cstdlib>
#include <string>
#include "dp/amp/autocast.h"
#include "dp/autograd/node.h"
#include "dp/core/device_runtime.h"
#include "dp/core/replica_context.h"
#include "dp/parallel/detail/run.h"

namespace dp::parallel::detail {
std::vector<Worker*> workers_of(const std::vector<Device>& devices) {
  std::vector<Worker*> out;
  out.reserve(devices.size());
  for (Device d : devices) out.push_back(worker_for(d));
  return out;
}

std::vector<std::exception_ptr> run_replicas(const std::vector<Device>& devices, const std::function<void(size_t)>& fn) {
  // Each replica runs with the caller's autocast state, as with its grad mode (autocast state is
  // per thread too); each replica's forward is an autocast region of its own on its worker.
  const autocast::ThreadState autocast_state = autocast::ThreadState::current();
  // A replica on a device with streams runs on the caller's current stream of that device (as
  // PyTorch's parallel_apply), so its work is ordered after what the caller queued there.
  std::vector<Stream> streams(devices.size());
  bool any = false;
  for (size_t i = 0; i < devices.size(); ++i)
    if (!devices[i].is_cpu()) {
      streams[i] = current_stream(devices[i]);
      any = true;
    }
  if (any) {
    return run_on_workers(workers_of(devices), [&](size_t i) {
      autograd::ReplicaScope replica(static_cast<int>(i));
      dp::detail::ReplicaContextScope context(static_cast<int>(i), static_cast<int>(devices.size()));
      autocast::ThreadStateGuard autocast_on(autocast_state);
      StreamGuard guard(streams[i]);  // nothing for a host device
      fn(i);
    });
  }
  return run_on_workers(workers_of(devices), [&](size_t i) {
    // Nodes this replica's forward records remember it: a backward error then names the replica.
    autograd::ReplicaScope replica(static_cast<int>(i));
    dp::detail::ReplicaContextScope context(static_cast<int>(i), static_cast<int>(devices.size()));
    autocast::ThreadStateGuard autocast_on(autocast_state);
    fn(i);
  });
}

void rethrow_first_replica_error(const std::vector<std::exception_ptr>& errors, const std::vector<Device>& devices,
                                 const std::vector<std::string>& notes) {
  size_t first = errors.size(), failed = 0;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    ++failed;
    if (first == errors.size()) first = i;
  }
  if (failed == 0) return;
  std::vector<std::string> remarks;
  if (first < notes.size() && !notes[first].empty()) remarks.push_back(notes[first]);
  if (failed > 1) remarks.push_back(std::to_string(failed - 1) + " other replica(s) failed too; the first by index is shown");
  // A replica that met a tensor of device_ids[0] most likely reached the original module through
  // a member its copy could not re-point (copies that hold the original's child directly are
  // refused when the replica is built; a container of pointers is not seen there).
  if (first > 0) {
    try {
      std::rethrow_exception(errors[first]);
    } catch (const DeviceError& e) {
      const std::string msg = e.what(), d0 = devices[0].str();
      for (size_t at = msg.find(d0); at != std::string::npos; at = msg.find(d0, at + 1)) {
        const bool whole = at + d0.size() == msg.size() || !std::isdigit(static_cast<unsigned char>(msg[at + d0.size()]));
        if (!whole) continue;
        remarks.push_back("it met a tensor on " + d0 +
                          ", the original module's device: does the module reach a submodule or tensor through a member that its copy "
                          "can't re-point (a std::shared_ptr or raw pointer, or a container of them)? Hold submodules as "
                          "dp::nn::ModuleHolder<...> (in a ModuleList or a std::vector<ModuleHolder<...>>) and tensors as registered "
                          "parameters or buffers");
        break;
      }
    } catch (...) {
    }
  }
  std::string where = "in replica " + std::to_string(first) + " on device " + devices[first].str();
  for (size_t r = 0; r < remarks.size(); ++r) where += (r == 0 ? " (" : "; ") + remarks[r];
  if (!remarks.empty()) where += ")";
  ::dp::detail::rethrow_with_context(errors[first], where);
}

}  // namespace dp::parallel::detail
