#include "dp/optim/serialize.h"
#include "dp/core/serialize.h"

namespace dp {

void save(const optim::Optimizer& optimizer, const std::string& path) {
  optim::OptimizerState state = optimizer.state_dict();
  state.metadata["format"] = "dparallel.optimizer";
  save(state.tensors, path, state.metadata);
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  SafetensorsFile file = load_file(path);  // file-level problems are named by the reader
  DP_CHECK(file.metadata.count("param_groups") != 0, ValueError, "load: '", path,
           "' holds no optimizer state (its metadata has no 'param_groups'; was it saved from a module?)");
  optim::OptimizerState state{std::move(file.tensors), std::move(file.metadata)};
  try {
    optimizer.load_state_dict(state);
  } catch (const ValueError& e) {
    throw ValueError(std::string(e.what()) + " (checkpoint: " + path + ")");
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(e.what()) + " (checkpoint: " + path + ")");
  }
}

}  // namespace dp
