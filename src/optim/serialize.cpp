#include "dp/optim/serialize.h"
#include "dp/core/serialize.h"

namespace dp {

namespace {

constexpr const char* kSchedulerKey = "lr_scheduler";

optim::OptimizerState optimizer_state_of(SafetensorsFile& file, const std::string& path) {
  DP_CHECK(file.metadata.count("param_groups") != 0, ValueError, "load: '", path,
           "' holds no optimizer state (its metadata has no 'param_groups'; was it saved from a module?)");
  return optim::OptimizerState{std::move(file.tensors), std::move(file.metadata)};
}

// Runs fn, adding the checkpoint's path to the message of the errors that describe its content.
template <typename Fn>
void naming_the_file(const std::string& path, Fn&& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    throw ValueError(std::string(e.what()) + " (checkpoint: " + path + ")");
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(e.what()) + " (checkpoint: " + path + ")");
  }
}

}  // namespace

void save(const optim::Optimizer& optimizer, const std::string& path) {
  optim::OptimizerState state = optimizer.state_dict();
  state.metadata["format"] = "dparallel.optimizer";
  save(state.tensors, path, state.metadata);
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  SafetensorsFile file = load_file(path);  // file-level problems are named by the reader
  optim::OptimizerState state = optimizer_state_of(file, path);
  naming_the_file(path, [&] { optimizer.load_state_dict(state); });
}

void save(const optim::Optimizer& optimizer, const optim::LRScheduler& scheduler, const std::string& path) {
  optim::OptimizerState state = optimizer.state_dict();
  state.metadata["format"] = "dparallel.optimizer";
  state.metadata[kSchedulerKey] = optim::lr_scheduler_state_to_json(scheduler.state_dict());
  save(state.tensors, path, state.metadata);
}

void load(optim::Optimizer& optimizer, optim::LRScheduler& scheduler, const std::string& path) {
  SafetensorsFile file = load_file(path);
  auto it = file.metadata.find(kSchedulerKey);
  DP_CHECK(it != file.metadata.end(), ValueError, "load: '", path, "' holds no learning-rate scheduler state (its metadata has no '", kSchedulerKey,
           "'; was it saved with dp::save(optimizer, path) alone?)");
  optim::LRSchedulerState s;
  naming_the_file(path, [&] {
    s = optim::lr_scheduler_state_from_json(it->second);
    scheduler.check_state_dict(s);
  });
  optim::OptimizerState state = optimizer_state_of(file, path);
  naming_the_file(path, [&] { optimizer.load_state_dict(state); });
  scheduler.load_state_dict(s);  // checked above: changes only now
}

}  // namespace dp
