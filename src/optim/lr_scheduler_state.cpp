// LRSchedulerState <-> JSON: how a scheduler's state travels in a checkpoint's metadata.
#include <cmath>
#include <nlohmann/json.hpp>
#include "dp/optim/lr_scheduler.h"
#include "optim/options_json.h"

namespace dp::optim {

using nlohmann::json;

std::string lr_scheduler_state_to_json(const LRSchedulerState& s) {
  json settings = json::object();
  for (const auto& [key, values] : s.settings) settings[key] = values;
  json j = {{"last_epoch", s.last_epoch}, {"step_count", s.step_count}, {"base_lrs", s.base_lrs}, {"last_lrs", s.last_lrs}};
  if (!s.scheduler.empty()) {
    j["scheduler"] = s.scheduler;
    j["settings"] = std::move(settings);
  }
  return j.dump();
}

namespace {

constexpr const char* kWhere = "lr_scheduler";

const json& field(const json& j, const char* key) {
  auto it = j.find(key);
  DP_CHECK(it != j.end(), ValueError, kWhere, ": the state has no '", key, "' field");
  return *it;
}

int64_t integer(const json& j, const char* key) {
  const json& v = field(j, key);
  DP_CHECK(v.is_number_integer(), ValueError, kWhere, ".", key, " must be an integer, got ", detail::brief(v));
  return v.get<int64_t>();
}

std::vector<double> numbers(const json& v, const std::string& name) {
  DP_CHECK(v.is_array(), ValueError, kWhere, ".", name, " must be a list of numbers, got ", detail::brief(v));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    DP_CHECK(v[i].is_number(), ValueError, kWhere, ".", name, "[", i, "] must be a number, got ", detail::brief(v[i]));
    out.push_back(v[i].get<double>());
  }
  return out;
}

}  // namespace

LRSchedulerState lr_scheduler_state_from_json(const std::string& text) {
  const json j = detail::parse_json(text, std::string(kWhere) + ":");
  DP_CHECK(j.is_object(), ValueError, kWhere, ": the state must be a JSON object, got ", detail::brief(j));
  LRSchedulerState s;
  s.last_epoch = integer(j, "last_epoch");
  s.step_count = integer(j, "step_count");
  s.base_lrs = numbers(field(j, "base_lrs"), "base_lrs");
  s.last_lrs = numbers(field(j, "last_lrs"), "last_lrs");
  if (j.contains("scheduler")) {
    const json& name = j.at("scheduler");
    DP_CHECK(name.is_string() && !name.get_ref<const std::string&>().empty(), ValueError, kWhere, ".scheduler must be a scheduler's name, got ",
             detail::brief(name));
    s.scheduler = name.get<std::string>();
    const json& settings = field(j, "settings");
    DP_CHECK(settings.is_object(), ValueError, kWhere, ".settings must be an object, got ", detail::brief(settings));
    for (const auto& [key, value] : settings.items()) s.settings[key] = numbers(value, "settings." + key.substr(0, 100));
  }
  return s;
}

}  // namespace dp::optim
