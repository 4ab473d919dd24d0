#include "checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <system_error>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/core/generator.h"
#include "dp/core/json_check.h"
#include "dp/core/serialize.h"
#include "dp/data/char_tokenizer.h"

namespace dp::train {
namespace {

constexpr int kFormatVersion = 1;

// json::parse of the metadata, refusing JSON nested deeper than 64 levels (the checkpoint's is 4
// deep): printing or comparing such a value recurses. Any problem is a ValueError.
nlohmann::json checked_parse(const std::string& text) {
  const std::string problem = dp::detail::json_problem(text, 64);
  DP_CHECK(problem.empty(), ValueError, "\"dp_train\" metadata ", problem);
  return nlohmann::json::parse(text);
}
const std::string kModel = "model.", kOptimizer = "optimizer.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

nlohmann::json history_json(const History& h) {
  nlohmann::json evals = nlohmann::json::array();
  for (const auto& e : h.evals)
    evals.push_back({{"step", e.step}, {"test_accuracy", e.test_accuracy}, {"test_loss", e.test_loss}, {"train_loss", e.train_loss}});
  return {{"step_loss", h.step_loss}, {"evals", evals}, {"epoch_seconds", h.epoch_seconds}};
}

// ---- reading the metadata: every field checked, each problem a ValueError naming the field
// ("settings.batch-size", "history.step_loss[3]"), never a JSON library exception, never a piece of
// the value longer than a few words.
using nlohmann::json;

[[noreturn]] void field_error(const std::string& field, const std::string& what) { throw ValueError("\"" + field + "\" " + what); }

std::string kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "nothing";
    default:
      return "a number";
  }
}

const json& field(const json& obj, const std::string& key, const std::string& path) {
  const std::string name = path.empty() ? key : path + "." + key;
  if (!obj.is_object()) field_error(path.empty() ? "dp_train" : path, "must be an object, got " + kind(obj));
  auto it = obj.find(key);
  if (it == obj.end()) field_error(name, "is missing");
  return *it;
}
std::string name_of(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

int64_t get_int(const json& obj, const std::string& key, const std::string& path, int64_t least = std::numeric_limits<int64_t>::min()) {
  const json& v = field(obj, key, path);
  if (!v.is_number_integer()) field_error(name_of(path, key), "must be an integer, got " + kind(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    field_error(name_of(path, key), "is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < least) field_error(name_of(path, key), "must be at least " + std::to_string(least) + ", got " + std::to_string(x));
  return x;
}
uint64_t get_uint(const json& v, const std::string& name) {
  if (!v.is_number_unsigned()) field_error(name, "must be an integer >= 0, got " + kind(v) + (v.is_number_integer() ? " below 0" : ""));
  return v.get<uint64_t>();
}
double number(const json& v, const std::string& name, bool null_is_nan = false) {
  if (null_is_nan && v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // NaN is written as null
  if (!v.is_number()) field_error(name, "must be a number, got " + kind(v));
  return v.get<double>();
}
double get_seconds(const json& obj, const std::string& key) {
  const double x = number(field(obj, key, ""), key);
  if (!std::isfinite(x) || x < 0) field_error(key, "must be a finite number >= 0");
  return x;
}
// Every string of the metadata is a name or a path: one longer than a path can be is refused here,
// by its length, so that no later message (a file not found in --data-dir, an unknown name) quotes
// an unbounded piece of the file.
std::string get_string(const json& obj, const std::string& key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_string()) field_error(name_of(path, key), "must be a string, got " + kind(v));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > kMaxPathBytes)
    field_error(name_of(path, key), "is " + std::to_string(s.size()) + " bytes long (at most " + std::to_string(kMaxPathBytes) + ")");
  return s;
}
const json& get_list(const json& obj, const std::string& key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_array()) field_error(name_of(path, key), "must be a list, got " + kind(v));
  return v;
}
std::vector<double> get_numbers(const json& obj, const std::string& key, const std::string& path) {
  const json& list = get_list(obj, key, path);
  std::vector<double> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) out.push_back(number(list[i], name_of(path, key) + "[" + std::to_string(i) + "]"));
  return out;
}

RunSettings settings_from(const json& j) {
  const std::string p = "settings";
  RunSettings s;
  s.model = get_string(j, "model", p);
  s.hidden = get_int(j, "hidden", p);
  s.data = get_string(j, "data", p);
  s.data_dir = get_string(j, "data-dir", p);
  s.data_size = get_int(j, "data-size", p);
  s.epochs = get_int(j, "epochs", p);
  s.steps = get_int(j, "steps", p);
  s.batch_size = get_int(j, "batch-size", p);
  s.optimizer = get_string(j, "optimizer", p);
  s.lr = number(field(j, "lr", p), p + ".lr");
  s.momentum = number(field(j, "momentum", p), p + ".momentum");
  s.weight_decay = number(field(j, "weight-decay", p), p + ".weight-decay");
  s.schedule = get_string(j, "schedule", p);
  s.seed = get_uint(field(j, "seed", p), p + ".seed");
  const json& shuffle = field(j, "shuffle", p);
  if (!shuffle.is_boolean()) field_error(p + ".shuffle", "must be a boolean, got " + kind(shuffle));
  s.shuffle = shuffle.get<bool>();
  if (s.language_model()) {  // a language model's shape
    s.layers = get_int(j, "layers", p);
    s.heads = get_int(j, "heads", p);
    s.embd = get_int(j, "embd", p);
    s.block_size = get_int(j, "block-size", p);
    s.dropout = number(field(j, "dropout", p), p + ".dropout");
  }
  try {
    check_run_settings(s);  // the command line's rules
  } catch (const ValueError& e) {
    throw ValueError(std::string("\"settings\" break the command line's rules: ") + e.what());
  }
  return s;
}

History history_from(const json& j, int64_t global_step) {
  const std::string p = "history";
  History h;
  const json& losses = get_list(j, "step_loss", p);
  // One loss per step taken: the summary and evaluation read them by step.
  if (losses.size() != static_cast<uint64_t>(global_step))
    field_error("history.step_loss", "has " + std::to_string(losses.size()) + " entries but \"position.global_step\" is " +
                                         std::to_string(global_step) + " (one loss per step)");
  h.step_loss.reserve(losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    const double x = number(losses[i], "history.step_loss[" + std::to_string(i) + "]", true);
    // Beyond float's range: infinity (a plain conversion would be undefined).
    h.step_loss.push_back(std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max()
                              ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x > 0 ? 1 : -1))
                              : static_cast<float>(x));
  }
  const json& evals = get_list(j, "evals", p);
  int64_t previous = 0;
  for (size_t i = 0; i < evals.size(); ++i) {
    const std::string e = "history.evals[" + std::to_string(i) + "]";
    const json& ev = evals[i];
    History::Eval out;
    out.step = get_int(ev, "step", e, 0);
    if (out.step < previous || out.step > global_step)
      field_error(e + ".step",
                  "is " + std::to_string(out.step) + ": evaluations must be in step order, at or before step " + std::to_string(global_step));
    previous = out.step;
    out.test_accuracy = number(field(ev, "test_accuracy", e), e + ".test_accuracy");
    out.test_loss = number(field(ev, "test_loss", e), e + ".test_loss", true);
    out.train_loss = number(field(ev, "train_loss", e), e + ".train_loss", true);
    h.evals.push_back(out);
  }
  h.epoch_seconds = get_numbers(j, "epoch_seconds", p);
  return h;
}

// [{"device": "cpu", "seed": s, "offset": o}, ...]: the host first, each device once.
json generators_from(const json& j) {
  if (!j.is_array() || j.empty()) field_error("generators", "must be a non-empty list, got " + kind(j));
  std::set<std::string> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string g = "generators[" + std::to_string(i) + "]";
    const std::string device = get_string(j[i], "device", g);
    try {
      const Device d(device);
      if (d.has_index() && d.index < 0) throw ValueError("negative index");
    } catch (const std::exception&) {
      field_error(g + ".device", "is not a device name (cpu, cpu:N or cuda:N)");
    }
    if (!seen.insert(Device(device).str()).second) field_error(g + ".device", "names " + Device(device).str() + " a second time");
    get_uint(field(j[i], "seed", g), g + ".seed");
    get_uint(field(j[i], "offset", g), g + ".offset");
  }
  if (!seen.count("cpu")) field_error("generators", "has no entry for the host (\"cpu\")");
  return j;
}

// The largest "text.vocab" read (every code point, 4 bytes each, is 4.4 MB).
constexpr size_t kMaxVocabBytes = size_t{8} << 20;

std::string vocab_text(const std::vector<char32_t>& vocab) {
  const data::CharTokenizer tok(vocab);
  std::string out;
  for (int64_t i = 0; i < tok.vocab_size(); ++i) out += tok.token(i);
  return out;
}

json text_json(const TextRecord& t) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(t.fingerprint));
  return {{"vocab", vocab_text(t.vocab)}, {"characters", t.characters}, {"fnv1a64", hex}};
}

// {"vocab": the characters in order, as one UTF-8 string; "characters": N; "fnv1a64": 16 hex digits}.
TextRecord text_from(const json& j) {
  const std::string p = "text";
  TextRecord t;
  const json& v = field(j, "vocab", p);
  if (!v.is_string()) field_error("text.vocab", "must be a string, got " + kind(v));
  const std::string& chars = v.get_ref<const std::string&>();
  if (chars.size() > kMaxVocabBytes) field_error("text.vocab", "is " + std::to_string(chars.size()) + " bytes long (at most 8 MiB)");
  try {
    const data::CharTokenizer tok = data::CharTokenizer::from_text(chars);
    // Distinct and in order: the i-th character of the string is the vocabulary's i-th.
    const std::vector<int64_t> ids = tok.encode(chars).to_vector<int64_t>();
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] != static_cast<int64_t>(i)) throw ValueError("its characters are not distinct and sorted by code point");
    t.vocab = tok.chars();
  } catch (const ValueError& e) {
    field_error("text.vocab", std::string("is not a vocabulary: ") + e.what());
  }
  t.characters = get_int(j, "characters", p, 1);
  const json& f = field(j, "fnv1a64", p);
  if (!f.is_string()) field_error("text.fnv1a64", "must be a string, got " + kind(f));
  const std::string& hex = f.get_ref<const std::string&>();
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    field_error("text.fnv1a64", "must be 16 lower-case hexadecimal digits");
  t.fingerprint = std::stoull(hex, nullptr, 16);
  return t;
}

}  // namespace

std::string vocabulary_json(const std::vector<char32_t>& vocab) {
  const data::CharTokenizer tok(vocab);
  json chars = json::array();
  for (int64_t i = 0; i < tok.vocab_size(); ++i) chars.push_back(tok.token(i));
  return json{{"format", "dparallel.CharTokenizer"}, {"version", 1}, {"vocab_size", tok.vocab_size()}, {"chars", chars}}.dump();
}

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

Checkpoint parse_checkpoint_metadata(const std::string& text) {
  const json meta = checked_parse(text);
  Checkpoint c;
  try {
    const int64_t version = get_int(meta, "version", "");
    DP_CHECK(version == kFormatVersion, ValueError, "checkpoint format version ", version, " (this dp-train reads ", kFormatVersion, ")");
    c.settings = settings_from(field(meta, "settings", ""));
    const json& pos = field(meta, "position", "");
    c.state.position = {get_int(pos, "global_step", "position", 0), get_int(pos, "epoch", "position", 0), get_int(pos, "batch", "position", 0)};
    c.state.train_seconds = get_seconds(meta, "train_seconds");
    c.state.epoch_seconds = get_seconds(meta, "epoch_seconds");
    c.state.wall_seconds = get_seconds(meta, "wall_seconds");
    c.state.history = history_from(field(meta, "history", ""), c.state.position.global_step);
    // One training time per finished epoch.
    if (c.state.history.epoch_seconds.size() != static_cast<uint64_t>(c.state.position.epoch))
      field_error("history.epoch_seconds", "has " + std::to_string(c.state.history.epoch_seconds.size()) + " entries but \"position.epoch\" is " +
                                               std::to_string(c.state.position.epoch) + " (one per finished epoch)");
    c.generators = generators_from(field(meta, "generators", ""));
    if (c.settings.language_model()) c.text = text_from(field(meta, "text", ""));
    if (meta.contains("scheduler")) {
      const json& s = meta.at("scheduler");
      optim::LRSchedulerState state;  // the position and rates (dp-train makes the scheduler itself)
      state.last_epoch = get_int(s, "last_epoch", "scheduler", -1);
      state.step_count = get_int(s, "step_count", "scheduler", 0);
      state.base_lrs = get_numbers(s, "base_lrs", "scheduler");
      state.last_lrs = get_numbers(s, "last_lrs", "scheduler");
      c.scheduler = std::move(state);
    }
  } catch (const json::exception& e) {  // not expected (every access is checked first); never let one escape
    throw ValueError(std::string("damaged metadata: ") + std::string(e.what()).substr(0, 200));
  }
  return c;
}

void check_position(const Checkpoint& c, int64_t steps_per_epoch, int64_t total_steps) {
  const Position& p = c.state.position;
  if (p.batch >= steps_per_epoch)
    field_error("position.batch", "is " + std::to_string(p.batch) + " but an epoch of this run has " + std::to_string(steps_per_epoch) + " batches");
  if (p.epoch > (total_steps + steps_per_epoch - 1) / steps_per_epoch ||
      (p.epoch != 0 && p.epoch > std::numeric_limits<int64_t>::max() / steps_per_epoch) || p.epoch * steps_per_epoch + p.batch != p.global_step)
    field_error("position", "is inconsistent: epoch " + std::to_string(p.epoch) + ", batch " + std::to_string(p.batch) + " is not global step " +
                                std::to_string(p.global_step) + " with " + std::to_string(steps_per_epoch) + " batches an epoch");
  if (p.global_step > total_steps)
    field_error("position.global_step", "is " + std::to_string(p.global_step) + ", past the run's " + std::to_string(total_steps) + " steps");
  if (c.scheduler && c.scheduler->step_count > total_steps + 1)
    field_error("scheduler.step_count",
                "is " + std::to_string(c.scheduler->step_count) + ", past the run's " + std::to_string(total_steps) + " steps");
}

void restore_generators(const nlohmann::json& states) {
  for (const auto& s : states) {
    Device d(s.at("device").get<std::string>());
    if (d.has_index() && d.index >= device_count(d.type)) continue;
    default_generator(d).set_state(s.at("seed").get<uint64_t>(), s.at("offset").get<uint64_t>());
  }
}

CheckpointContents checkpoint_contents(const RunSettings& settings, const TrainState& state, const nn::Module& model,
                                       const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler, const std::vector<Device>& devices,
                                       int world_size, const TextRecord* text) {
  CheckpointContents out;
  for (const auto& item : model.state_dict()) out.tensors.insert(kModel + item.key(), item.value());
  const optim::OptimizerState opt = optimizer.state_dict();
  for (const auto& item : opt.tensors) out.tensors.insert(kOptimizer + item.key(), item.value());

  nlohmann::json meta = {
      {"version", kFormatVersion},
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
  if (text) meta["text"] = text_json(*text);
  out.metadata = {{"format", "pt"}, {"dp_train", meta.dump()}};
  for (const auto& [key, value] : opt.metadata) out.metadata[kOptimizer + key] = value;
  return out;
}

void save_checkpoint(const std::string& dir, const RunSettings& settings, const TrainState& state, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler, const std::vector<Device>& devices,
                     const TextRecord* text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DP_CHECK(!ec, IOError, "checkpoint: cannot create the directory ", dir, ": ", ec.message());
  const CheckpointContents c = checkpoint_contents(settings, state, model, optimizer, scheduler, devices, 1, text);
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
    c = parse_checkpoint_metadata(found->second);
  } catch (const ValueError& e) {
    throw ValueError(path + ": damaged dp-train checkpoint: " + e.what());
  }
  for (const auto& item : file.tensors) {
    if (starts_with(item.key(), kModel))
      c.model.insert(item.key().substr(kModel.size()), item.value());
    else if (starts_with(item.key(), kOptimizer))
      c.optimizer.tensors.insert(item.key().substr(kOptimizer.size()), item.value());
  }
  for (const auto& [key, value] : file.metadata)
    if (starts_with(key, kOptimizer)) c.optimizer.metadata[key.substr(kOptimizer.size())] = value;
  return c;
}

}  // namespace dp::train
