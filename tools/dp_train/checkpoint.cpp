#include "checkpoint.h"

#include <filesystem>
#include <system_error>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/core/generator.h"
#include "dp/core/serialize.h"

namespace dp::train {
namespace {

constexpr int kFormatVersion = 1;
const std::string kModel = "model.", kOptimizer = "optimizer.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

nlohmann::json history_json(const History& h) {
  nlohmann::json evals = nlohmann::json::array();
  for (const auto& e : h.evals)
    evals.push_back({{"step", e.step}, {"test_accuracy", e.test_accuracy}, {"test_loss", e.test_loss}, {"train_loss", e.train_loss}});
  return {{"step_loss", h.step_loss}, {"evals", evals}, {"epoch_seconds", h.epoch_seconds}};
}

History history_from(const nlohmann::json& j) {
  History h;
  h.step_loss = j.at("step_loss").get<std::vector<float>>();
  for (const auto& e : j.at("evals"))
    h.evals.push_back({e.at("step").get<int64_t>(), e.at("test_accuracy").get<double>(), e.at("test_loss").get<double>(),
                       e.at("train_loss").get<double>()});
  h.epoch_seconds = j.at("epoch_seconds").get<std::vector<double>>();
  return h;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return (std::filesystem::path(dir) / "checkpoint.safetensors").string(); }

nlohmann::json generator_states(const std::vector<Device>& devices) {
  nlohmann::json out = nlohmann::json::array();
  std::vector<Device> all{Device::cpu()};
  all.insert(all.end(), devices.begin(), devices.end());
  for (Device d : all) {
    Generator& g = default_generator(d);
    out.push_back({{"device", d.str()}, {"seed", g.seed()}, {"offset", g.offset()}});
  }
  return out;
}

void restore_generators(const nlohmann::json& states) {
  for (const auto& s : states) {
    Device d(s.at("device").get<std::string>());
    if (d.has_index() && d.index >= device_count(d.type)) continue;
    default_generator(d).set_state(s.at("seed").get<uint64_t>(), s.at("offset").get<uint64_t>());
  }
}

CheckpointContents checkpoint_contents(const RunSettings& settings, const TrainState& state, const nn::Module& model,
                                       const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler,
                                       const std::vector<Device>& devices, int world_size) {
  CheckpointContents out;
  for (const auto& item : model.state_dict()) out.tensors.insert(kModel + item.key(), item.value());
  const optim::OptimizerState opt = optimizer.state_dict();
  for (const auto& item : opt.tensors) out.tensors.insert(kOptimizer + item.key(), item.value());

  nlohmann::json meta = {{"version", kFormatVersion},
                         {"settings", to_json(settings)},
                         {"position", {{"global_step", state.position.global_step}, {"epoch", state.position.epoch}, {"batch", state.position.batch}}},
                         {"train_seconds", state.train_seconds},
                         {"epoch_seconds", state.epoch_seconds},
                         {"wall_seconds", state.wall_seconds},
                         {"generators", generator_states(devices)},
                         {"history", history_json(state.history)},
                         {"world_size", world_size}};
  if (scheduler) {
    const optim::LRSchedulerState s = scheduler->state();
    meta["scheduler"] = {{"last_epoch", s.last_epoch}, {"step_count", s.step_count}, {"base_lrs", s.base_lrs}, {"last_lrs", s.last_lrs}};
  }
  out.metadata = {{"format", "pt"}, {"dp_train", meta.dump()}};
  for (const auto& [key, value] : opt.metadata) out.metadata[kOptimizer + key] = value;
  return out;
}

void save_checkpoint(const std::string& dir, const RunSettings& settings, const TrainState& state, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler, const std::vector<Device>& devices) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DP_CHECK(!ec, IOError, "checkpoint: cannot create the directory ", dir, ": ", ec.message());
  const CheckpointContents c = checkpoint_contents(settings, state, model, optimizer, scheduler, devices);
  save(c.tensors, checkpoint_path(dir), c.metadata);
}

Checkpoint load_checkpoint(const std::string& dir) {
  const std::string path = checkpoint_path(dir);
  DP_CHECK(std::filesystem::is_directory(dir), IOError, dir, " is not a directory (expected a --checkpoint-dir of an earlier run)");
  DP_CHECK(std::filesystem::exists(path), IOError, "no checkpoint in ", dir, " (", path, " is missing)");
  return parse_checkpoint(load_file(path), path);
}

Checkpoint parse_checkpoint(const SafetensorsFile& file, const std::string& path) {
  auto found = file.metadata.find("dp_train");
  DP_CHECK(found != file.metadata.end(), ValueError, path, " is a safetensors file but not a dp-train checkpoint");
  Checkpoint c;
  try {
    const nlohmann::json meta = nlohmann::json::parse(found->second);
    const int version = meta.at("version").get<int>();
    DP_CHECK(version == kFormatVersion, ValueError, "checkpoint format version ", version, " (this dp-train reads ", kFormatVersion, ")");
    c.settings = run_settings_from_json(meta.at("settings"));
    const auto& pos = meta.at("position");
    c.state.position = {pos.at("global_step").get<int64_t>(), pos.at("epoch").get<int64_t>(), pos.at("batch").get<int64_t>()};
    c.state.train_seconds = meta.at("train_seconds").get<double>();
    c.state.epoch_seconds = meta.at("epoch_seconds").get<double>();
    c.state.wall_seconds = meta.at("wall_seconds").get<double>();
    c.state.history = history_from(meta.at("history"));
    c.generators = meta.at("generators");
    if (meta.contains("scheduler")) {
      const auto& s = meta.at("scheduler");
      c.scheduler = optim::LRSchedulerState{s.at("last_epoch").get<int64_t>(), s.at("step_count").get<int64_t>(),
                                            s.at("base_lrs").get<std::vector<double>>(), s.at("last_lrs").get<std::vector<double>>()};
    }
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(path + ": damaged dp-train metadata: " + e.what());
  } catch (const ValueError& e) {
    throw ValueError(path + ": " + e.what());
  }
  for (const auto& item : file.tensors) {
    if (starts_with(item.key(), kModel)) c.model.insert(item.key().substr(kModel.size()), item.value());
    else if (starts_with(item.key(), kOptimizer)) c.optimizer.tensors.insert(item.key().substr(kOptimizer.size()), item.value());
  }
  for (const auto& [key, value] : file.metadata)
    if (starts_with(key, kOptimizer)) c.optimizer.metadata[key.substr(kOptimizer.size())] = value;
  return c;
}

}  // namespace dp::train
