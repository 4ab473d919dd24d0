#include "support/golden.h"
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>

namespace dp::test {

const json& golden_file(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, json> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it != cache.end()) return it->second;
  std::string path = std::string(DP_GOLDEN_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("golden file not found: " + path + " (regenerate with tests/golden/gen_*.py)");
  json j = json::parse(in);
  return cache.emplace(file, std::move(j)).first->second;
}

const json& golden_case(const std::string& file, const std::string& name) {
  const json& f = golden_file(file);
  for (const json& c : f.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("golden case '" + name + "' not in " + file);
}

static double json_number(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw std::runtime_error("bad number in golden data: " + s);
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

Tensor tensor_from_json(const json& j, bool requires_grad) {
  DType dt = kFloat32;
  std::string name = j.at("dtype").get<std::string>();
  for (DType d : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (name == dtype_name(d)) dt = d;
  Shape shape = j.at("shape").get<Shape>();
  std::vector<double> values;
  const json& data = j.at("data");
  if (dt == kInt64) {  // int64 exactly (doubles lose precision past 2^53)
    std::vector<int64_t> iv;
    for (const json& v : data) iv.push_back(v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>());
    Tensor t = tensor<int64_t>(iv, shape);
    return t;
  }
  for (const json& v : data) values.push_back(json_number(v));
  Tensor t = tensor<double>(values, shape).to(dt);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

json tensor_to_json(const Tensor& t) {
  json j;
  j["dtype"] = dtype_name(t.dtype());
  j["shape"] = t.sizes();
  j["data"] = t.to_vector<double>();
  return j;
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "actual tensor is undefined";
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << actual.size_str() << " != expected " << expected.size_str();
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = (std::isnan(a[i]) && std::isnan(e[i])) || a[i] == e[i] || std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i]);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << " (of " << a.size() << "): " << a[i] << " vs expected " << e[i] << " (rtol " << rtol
                                           << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const json& expected, double rtol, double atol) {
  return all_close(actual, tensor_from_json(expected), rtol, atol);
}

void load_named_parameters(nn::Module& m, const json& params) {
  nn::TensorDict named = m.named_parameters();
  ASSERT_EQ(named.size(), params.size());
  size_t i = 0;
  NoGradGuard no_grad;
  for (const auto& item : named) {
    const json& p = params[i++];
    ASSERT_EQ(item.key(), p.at(0).get<std::string>());
    Tensor v = tensor_from_json(p.at(1));
    ASSERT_EQ(item.value().sizes(), v.sizes()) << item.key();
    Tensor dst = item.value();
    dst.copy_(v);
  }
}

}  // namespace dp::test
