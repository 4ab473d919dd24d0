// Errors of replicas: re-thrown with the replica and device named, type kept.
#include "dp/parallel/parallel_apply.h"
#include <cxxabi.h>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include "dp/parallel/detail/run.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#endif

namespace dp::parallel::detail {
namespace {

std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? d.get() : t.name();
}

// Throws an exception of the same type as `e` (when it is one we can rebuild from a message).
template <typename... Types>
[[noreturn]] void throw_as(const std::exception& e, const std::string& msg) {
  // Most derived first: the first type in the list that `e` is exactly (or derives from) wins.
  (([&] {
     if (typeid(e) == typeid(Types)) throw Types(msg);
   }()),
   ...);
  (([&] {
     if (dynamic_cast<const Types*>(&e) != nullptr) throw Types(msg);
   }()),
   ...);
  throw Error(msg);
}

}  // namespace

std::vector<Worker*> workers_of(const std::vector<Device>& devices) {
  std::vector<Worker*> out;
  out.reserve(devices.size());
  for (Device d : devices) out.push_back(worker_for(d));
  return out;
}

std::vector<std::exception_ptr> run_replicas(const std::vector<Device>& devices, const std::function<void(size_t)>& fn) {
#if DP_HAVE_CUDA
  std::vector<std::optional<cuda::Stream>> streams(devices.size());
  bool any = false;
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].is_cuda()) {
      streams[i] = cuda::current_stream(devices[i].index);
      any = true;
    }
  if (any) {
    return run_on_workers(workers_of(devices), [&](size_t i) {
      if (!streams[i]) return fn(i);
      cuda::StreamGuard guard(*streams[i]);
      fn(i);
    });
  }
#endif
  return run_on_workers(workers_of(devices), fn);
}

void rethrow_first_replica_error(const std::vector<std::exception_ptr>& errors, const std::vector<Device>& devices) {
  size_t first = errors.size(), failed = 0;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    ++failed;
    if (first == errors.size()) first = i;
  }
  if (failed == 0) return;
  const std::string where = "in replica " + std::to_string(first) + " on device " + devices[first].str();
  const std::string others = failed > 1 ? " (" + std::to_string(failed - 1) + " other replica(s) failed too; the first by index is shown)" : "";
  try {
    std::rethrow_exception(errors[first]);
  } catch (const std::bad_alloc&) {
    throw;  // can't carry a message; its type says enough
  } catch (const std::exception& e) {
    const std::string msg = "Caught " + type_name(typeid(e)) + " " + where + others + ".\nOriginal message: " + e.what();
    throw_as<ShapeError, DTypeError, DeviceError, IndexError, ValueError, AutogradError, NotImplementedError, OutOfMemory, IOError, Error,
             std::invalid_argument, std::domain_error, std::length_error, std::out_of_range, std::range_error, std::overflow_error,
             std::underflow_error, std::logic_error, std::runtime_error>(e, msg);
  } catch (...) {
    throw Error("Caught an exception of unknown type " + where + others + ".");
  }
}

}  // namespace dp::parallel::detail
