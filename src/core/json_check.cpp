#include "dp/core/json_check.h"

#include <nlohmann/json.hpp>

namespace dp::detail {
namespace {

// Accepts any JSON, but stops at the first value nested deeper than the limit.
struct DepthCheck : nlohmann::json_sax<nlohmann::json> {
  explicit DepthCheck(int max_depth) : max_depth(max_depth) {}
  int max_depth;
  int depth = 0;
  bool too_deep = false;
  std::string error;
  bool open() { return !(too_deep = ++depth > max_depth); }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = ex.what();
    return false;
  }
};

}  // namespace

std::string json_problem(std::string_view text, int max_depth) {
  DepthCheck check(max_depth);
  try {
    nlohmann::json::sax_parse(text, &check);
  } catch (const nlohmann::json::exception& e) {
    check.error = e.what();
  }
  if (check.too_deep) return "nests deeper than " + std::to_string(max_depth) + " levels";
  if (check.error.empty()) return "";
  if (check.error.size() > 200) check.error = check.error.substr(0, 200) + "...";
  return "is not valid JSON (" + check.error + ")";
}

}  // namespace dp::detail
