// Output dtypes of ops under CPU bfloat16 autocast, against torch 1.13 under
// torch.autocast("cpu", torch.bfloat16) on arguments of the same dtypes and shapes
// (tests/golden/gen_autocast.py). Covers every policy: lower precision, float32, promote and
// untouched ops, float64 never cast.
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>
#include "dp/amp/autocast.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::golden_file;
using Args = std::vector<Tensor>;

DType dtype_named(const std::string& s) {
  for (DType t : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (s == dtype_name(t)) return t;
  throw std::runtime_error("unknown dtype " + s);
}

// dparallel's op for each "op" of the golden file, on arguments in PyTorch's order.
const std::map<std::string, std::function<Tensor(const Args&)>>& ops() {
  static const std::map<std::string, std::function<Tensor(const Args&)>> table = {
      {"linear", [](const Args& a) { return dp::linear(a[0], a[1], a[2]); }},
      {"mm", [](const Args& a) { return dp::mm(a[0], a[1]); }},
      {"matmul", [](const Args& a) { return dp::matmul(a[0], a[1]); }},
      {"addmm", [](const Args& a) { return dp::addmm(a[0], a[1], a[2]); }},
      {"bmm", [](const Args& a) { return dp::bmm(a[0], a[1]); }},
      {"conv2d", [](const Args& a) { return dp::conv2d(a[0], a[1], a[2]); }},
      {"dot", [](const Args& a) { return dp::dot(a[0], a[1]); }},
      {"mse_loss", [](const Args& a) { return dp::mse_loss(a[0], a[1]); }},
      {"l1_loss", [](const Args& a) { return dp::l1_loss(a[0], a[1]); }},
      {"nll_loss", [](const Args& a) { return dp::nll_loss(a[0], a[1]); }},
      {"cross_entropy", [](const Args& a) { return dp::cross_entropy(a[0], a[1]); }},
      {"binary_cross_entropy", [](const Args& a) { return dp::binary_cross_entropy(a[0], a[1]); }},
      {"binary_cross_entropy_with_logits", [](const Args& a) { return dp::binary_cross_entropy_with_logits(a[0], a[1]); }},
      {"cat", [](const Args& a) { return dp::cat(a); }},
      {"stack", [](const Args& a) { return dp::stack(a); }},
      {"softmax", [](const Args& a) { return dp::softmax(a[0], 1); }},
      {"log_softmax", [](const Args& a) { return dp::log_softmax(a[0], 1); }},
      {"exp", [](const Args& a) { return dp::exp(a[0]); }},
      {"sum", [](const Args& a) { return dp::sum(a[0]); }},
      {"logsumexp", [](const Args& a) { return dp::logsumexp(a[0], {1}); }},
      {"relu", [](const Args& a) { return dp::relu(a[0]); }},
      {"add", [](const Args& a) { return dp::add(a[0], a[1]); }},
      {"layer_norm", [](const Args& a) { return dp::layer_norm(a[0], {a[0].size(-1)}); }},
      {"lstm_cell", [](const Args& a) { return std::get<0>(dp::lstm_cell(a[0], a[1], a[2], a[3], a[4], a[5], a[6])); }},
  };
  return table;
}

// Arguments of the case's dtypes and shapes: floats in (0.1, 0.9) (valid probabilities for the
// binary cross entropies), int64 class indices 0.
Args make_args(const test::json& c) {
  Args out;
  for (size_t i = 0; i < c["inputs"].size(); ++i) {
    const DType dt = dtype_named(c["inputs"][i].get<std::string>());
    const Shape shape = c["shapes"][i].get<std::vector<int64_t>>();
    out.push_back(is_floating_point(dt) ? (dp::rand(shape) * 0.8 + 0.1).to(dt) : dp::zeros(shape, dt));
  }
  return out;
}

// Whether dparallel runs `op` on bfloat16 CPU tensors at all (an op without a bfloat16 CPU
// kernel does not). When autocast still casts for it, so the call must then fail on the
// bfloat16 arguments, naming the op and the dtype, instead of silently running in float32.
bool runs_in_bfloat16(const std::string& op, const Args& args) {
  Args bf;
  for (const Tensor& a : args) bf.push_back(is_floating_point(a.dtype()) ? a.to(kBFloat16) : a);
  try {
    ops().at(op)(bf);
    return true;
  } catch (const DTypeError&) {
    return false;
  }
}

// dparallel's deliberate departures from torch 1.13's CPU lists (docs/mixed-precision.md,
// "Differences from PyTorch"): the output dtype the op has instead under CPU autocast.
const std::map<std::string, DType> kCpuDeviations = {
    {"layer_norm", kFloat32},  // on the float32 list, as on CUDA (src/amp/autocast_policy.cpp)
};

TEST(AutocastDtypes, EveryOpMatchesTorchUnderCpuBFloat16) {
  const auto& cases = golden_file("autocast.json")["dtypes"];
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    auto op = ops().find(c["op"].get<std::string>());
    ASSERT_NE(op, ops().end()) << "no dparallel op for " << c["op"];
    const Args args = make_args(c);
    const DType torch_dtype = dtype_named(c["output"].get<std::string>());
    const auto deviation = kCpuDeviations.find(op->first);
    const DType expected = deviation == kCpuDeviations.end() ? torch_dtype : deviation->second;
    if (expected != torch_dtype)
      std::cout << name << ": " << op->first << " runs in " << dtype_name(expected)
                << " by dparallel's CPU policy (torch 1.13: " << dtype_name(torch_dtype) << ")\n";
    if (expected == kBFloat16 && !runs_in_bfloat16(op->first, args)) {
      std::cout << name << ": dparallel has no bfloat16 CPU kernel for " << op->first << "; checking that the call fails\n";
      AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      try {
        op->second(args);
        ADD_FAILURE() << "expected a DTypeError from the bfloat16 call";
      } catch (const DTypeError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(op->first), std::string::npos) << what;
        EXPECT_NE(what.find("bfloat16"), std::string::npos) << what;
        if (op->first == "conv2d") {  // the cast autocast made is named: the caller passed float32
          EXPECT_NE(what.find("under CPU autocast, which cast conv2d's floating arguments to bfloat16"), std::string::npos) << what;
        }
      }
      continue;
    }
    Tensor out;
    try {
      AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      out = op->second(args);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(out.dtype(), expected);
    // The arguments themselves are never changed.
    for (size_t i = 0; i < args.size(); ++i) EXPECT_EQ(args[i].dtype(), dtype_named(c["inputs"][i].get<std::string>()));
  }
}

// Without autocast the same calls keep their own dtypes (the float32 cases stay float32).
TEST(AutocastDtypes, NothingChangesOutsideARegion) {
  for (const auto& c : golden_file("autocast.json")["dtypes"]) {
    bool all_f32 = true;
    for (const auto& d : c["inputs"]) all_f32 = all_f32 && (d == "float32" || d == "int64");
    if (!all_f32) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(ops().at(c["op"].get<std::string>())(make_args(c)).dtype(), kFloat32);
  }
}

}  // namespace
}  // namespace dp
