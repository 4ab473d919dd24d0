#pragma once
// Golden values written by PyTorch (tests/golden/gen_*.py, run with Debian's python3-torch) and
// committed as JSON, so the tests need no Python. A tensor is {"dtype", "shape", "data"} with data
// flattened row-major; non-finite floats are the strings "nan", "inf", "-inf".
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include "dp/dp.h"
#include "dp/nn/module.h"

namespace dp::test {

using json = nlohmann::json;

// Loads tests/golden/<file> once per process; throws with the path if missing or invalid.
const json& golden_file(const std::string& file);
// The case named `name` in the file's "cases" list; throws if absent.
const json& golden_case(const std::string& file, const std::string& name);
// Builds a CPU tensor from {"dtype", "shape", "data"}; requires_grad as given.
Tensor tensor_from_json(const json& j, bool requires_grad = false);
json tensor_to_json(const Tensor& t);
// Copies PyTorch's parameters, a list of [name, tensor] pairs in named_parameters() order, into
// `m`, checking (gtest failures) that the names, their order and the shapes are the same.
void load_named_parameters(nn::Module& m, const json& params);

// Element-wise |a - b| <= atol + rtol * |b| (NaN matches NaN), same shape; dtypes may differ
// (both compared in float64). The message names the first mismatch and its index.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-6);
::testing::AssertionResult all_close(const Tensor& actual, const json& expected, double rtol = 1e-5, double atol = 1e-6);

}  // namespace dp::test
