#include "optim/options_json.h"
#include "dp/core/json_check.h"
#include <memory>
#include <typeinfo>

namespace dp::optim::detail {

std::string brief(const nlohmann::json& j) {
  if (j.is_array()) return "a list of " + std::to_string(j.size()) + " item(s)";
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " field(s)";
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    return s.size() > 100 ? nlohmann::json(s.substr(0, 100)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "..."
                          : j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return j.dump();
}

nlohmann::json parse_json(const std::string& text, const std::string& context) {
  const std::string problem = dp::detail::json_problem(text, 64);
  DP_CHECK(problem.empty(), ValueError, context, " ", problem);
  return nlohmann::json::parse(text);
}

namespace {

class ToJson : public OptionsVisitor {
 public:
  explicit ToJson(nlohmann::json& j) : j_(j) {}
  void field(const char* name, double& value, bool&) override { j_[name] = value; }
  void field(const char* name, bool& value, bool&) override { j_[name] = value; }
  void field(const char* name, std::tuple<double, double>& value, bool&) override {
    j_[name] = nlohmann::json::array({std::get<0>(value), std::get<1>(value)});
  }

 private:
  nlohmann::json& j_;
};

// only_unset: inheritance (skip fields the options set themselves, leave their flag unset).
class FromJson : public OptionsVisitor {
 public:
  FromJson(const nlohmann::json& j, std::string context, bool only_unset) : j_(j), context_(std::move(context)), only_unset_(only_unset) {}
  void field(const char* name, double& value, bool& is_set) override {
    const nlohmann::json* v = find(name, is_set);
    if (v == nullptr) return;
    DP_CHECK(v->is_number(), ValueError, context_, ": option '", name, "' must be a number, got ", brief(*v));
    value = v->get<double>();
  }
  void field(const char* name, bool& value, bool& is_set) override {
    const nlohmann::json* v = find(name, is_set);
    if (v == nullptr) return;
    DP_CHECK(v->is_boolean(), ValueError, context_, ": option '", name, "' must be a boolean, got ", brief(*v));
    value = v->get<bool>();
  }
  void field(const char* name, std::tuple<double, double>& value, bool& is_set) override {
    const nlohmann::json* v = find(name, is_set);
    if (v == nullptr) return;
    DP_CHECK(v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number(), ValueError, context_, ": option '", name,
             "' must be a list of two numbers, got ", brief(*v));
    value = {(*v)[0].get<double>(), (*v)[1].get<double>()};
  }

 private:
  const nlohmann::json* find(const char* name, bool& is_set) {
    if (only_unset_ && is_set) return nullptr;
    auto it = j_.find(name);
    if (it == j_.end()) return nullptr;
    if (!only_unset_) is_set = true;
    return &*it;
  }
  const nlohmann::json& j_;
  std::string context_;
  bool only_unset_;
};

}  // namespace

nlohmann::json options_to_json(const OptimizerOptions& options) {
  // visit() takes a mutable object (one walker serves reading and writing): walk a copy.
  std::unique_ptr<OptimizerOptions> copy = options.clone();
  nlohmann::json j = nlohmann::json::object();
  ToJson v(j);
  copy->visit(v);
  return j;
}

void options_from_json(OptimizerOptions& options, const nlohmann::json& j, const std::string& context) {
  DP_CHECK(j.is_object(), ValueError, context, ": expected a JSON object of options, got ", brief(j));
  FromJson v(j, context, /*only_unset=*/false);
  options.visit(v);
}

void inherit_unset(OptimizerOptions& options, const OptimizerOptions& defaults, const char* optimizer) {
  DP_CHECK(typeid(options) == typeid(defaults), ValueError, optimizer, ": a param group's options are of another optimizer's options type (",
           optimizer, " takes ", optimizer, "Options)");
  nlohmann::json d = options_to_json(defaults);
  FromJson v(d, "optimizer defaults", /*only_unset=*/true);
  options.visit(v);
}

}  // namespace dp::optim::detail
