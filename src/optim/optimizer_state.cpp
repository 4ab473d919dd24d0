// Optimizer::state_dict / load_state_dict: torch.optim's layout (state per parameter index,
// param_groups with hyper-parameters and index lists) as tensors + string metadata.
#include <charconv>
#include <nlohmann/json.hpp>
#include "dp/optim/optimizer.h"
#include "dp/optim/state_keys.h"
#include "optim/options_json.h"

namespace dp::optim {

using nlohmann::json;

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  json groups = json::array();
  int64_t index = 0;
  for (const auto& g : param_groups_) {
    json jg = detail::options_to_json(g.options());
    json ids = json::array();
    for (const Tensor& p : g.params()) {
      auto it = state_.find(p.unsafe_impl());
      if (it != state_.end() && it->second) it->second->save(dp::detail::str("state.", index, "."), out.tensors);
      ids.push_back(index++);
    }
    jg["params"] = std::move(ids);
    groups.push_back(std::move(jg));
  }
  out.metadata["param_groups"] = groups.dump();
  out.metadata["optimizer"] = name();
  return out;
}

bool parse_state_key(const std::string& key, int64_t& index, std::string& field) {
  const std::string prefix = "state.";
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  const char* begin = key.data() + prefix.size();
  const char* end = key.data() + key.size();
  auto [ptr, ec] = std::from_chars(begin, end, index);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != '.' || index < 0) return false;
  field.assign(ptr + 1, end);
  return !field.empty();
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  const std::string ctx = dp::detail::str(name(), ".load_state_dict");
  auto opt_it = state.metadata.find("optimizer");
  DP_CHECK(opt_it == state.metadata.end() || opt_it->second == name(), ValueError, ctx, ": the state was saved by ", opt_it->second.substr(0, 100),
           ", not ", name());
  auto pg_it = state.metadata.find("param_groups");
  DP_CHECK(pg_it != state.metadata.end(), ValueError, ctx, ": metadata has no 'param_groups' entry");
  const json groups = detail::parse_json(pg_it->second, ctx + ": metadata 'param_groups'");
  DP_CHECK(groups.is_array(), ValueError, ctx, ": metadata 'param_groups' must be a JSON list, got ", detail::brief(groups));
  DP_CHECK(groups.size() == param_groups_.size(), ValueError, ctx, ": the loaded state has ", groups.size(),
           " parameter groups but this optimizer has ", param_groups_.size());

  // New options per group, and saved parameter index -> this optimizer's parameter (zipped in
  // order, as torch.optim does).
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  std::map<int64_t, const Tensor*> by_index;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const json& jg = groups[gi];
    const std::string gctx = dp::detail::str(ctx, ": param group ", gi);
    DP_CHECK(jg.is_object() && jg.contains("params") && jg["params"].is_array(), ValueError, gctx, " must be an object with a 'params' list, got ",
             detail::brief(jg));
    const json& ids = jg["params"];
    const auto& params = param_groups_[gi].params();
    DP_CHECK(ids.size() == params.size(), ValueError, gctx, " has ", ids.size(), " parameters in the loaded state but ", params.size(),
             " in this optimizer");
    for (size_t k = 0; k < ids.size(); ++k) {
      DP_CHECK(ids[k].is_number_integer(), ValueError, gctx, ": parameter index ", detail::brief(ids[k]), " is not an integer");
      const int64_t id = ids[k].get<int64_t>();
      DP_CHECK(by_index.emplace(id, &params[k]).second, ValueError, gctx, ": parameter index ", id, " is listed twice");
    }
    std::unique_ptr<OptimizerOptions> o = param_groups_[gi].options().clone();
    detail::options_from_json(*o, jg, gctx);
    check_options(*o);
    options.push_back(std::move(o));
  }

  // Group the saved tensors by parameter.
  std::map<int64_t, std::map<std::string, Tensor>> per_param;
  for (const auto& item : state.tensors) {
    int64_t index = 0;
    std::string field;
    DP_CHECK(parse_state_key(item.key(), index, field), ValueError, ctx, ": unexpected key '", item.key(),
             "' (expected state.<parameter index>.<name>)");
    DP_CHECK(by_index.count(index) != 0, ValueError, ctx, ": key '", item.key(), "' refers to parameter ", index,
             ", which no saved param group lists");
    per_param[index][field] = item.value();
  }
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> new_state;
  for (const auto& [index, tensors] : per_param) {
    const Tensor& p = *by_index.at(index);
    new_state[p.unsafe_impl()] = load_param_state(p, static_cast<size_t>(index), tensors);
  }

  // Everything checked: commit.
  for (size_t gi = 0; gi < options.size(); ++gi) param_groups_[gi].set_options(std::move(options[gi]));
  state_ = std::move(new_state);
}

}  // namespace dp::optim
