// nn::utils::rnn::pad_sequence against PyTorch (tests/golden/gen_text_data.py): outputs in both
// layouts, trailing dimensions, empty sequences, integer and bool padding, and the gradients of a
// fixed scalar loss; finite-difference gradients (and double backward); the error messages.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <string>
#include "dp/nn/utils/rnn.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp::nn::utils::rnn {
namespace {

using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

void check_golden(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case("text_data.json", name);
  std::vector<Tensor> seqs;
  for (const json& s : c.at("sequences")) {
    Tensor t = tensor_from_json(s);
    if (is_floating_point(t.dtype())) t.requires_grad_(true);
    seqs.push_back(t);
  }
  Tensor out = pad_sequence(seqs, c.at("batch_first").get<bool>(), c.at("padding_value").get<double>());
  const Tensor expected = tensor_from_json(c.at("output"));
  EXPECT_EQ(out.dtype(), expected.dtype());
  EXPECT_TRUE(all_close(out, expected, 0, 0));  // copies and a fill: exact
  if (!c.contains("grads")) {
    EXPECT_FALSE(out.requires_grad());
    return;
  }
  (out * tensor_from_json(c.at("r"))).sum().backward();
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_TRUE(seqs[i].grad().defined()) << "sequence " << i;
    EXPECT_TRUE(all_close(seqs[i].grad(), c.at("grads")[i], 0, 0)) << "sequence " << i;
  }
}

TEST(PadSequenceGolden, TimeMajor) { check_golden("time_major"); }
TEST(PadSequenceGolden, BatchFirst) { check_golden("batch_first"); }
TEST(PadSequenceGolden, OneDimensional) { check_golden("one_d"); }
TEST(PadSequenceGolden, TrailingDimsAndAnEmptySequence) { check_golden("trailing_dims_and_empty"); }
TEST(PadSequenceGolden, TrailingDimsTimeMajor) { check_golden("trailing_dims_time_major"); }
TEST(PadSequenceGolden, IntegerPaddingIsTruncated) { check_golden("int_truncates_padding"); }
TEST(PadSequenceGolden, Bool) { check_golden("bool"); }
TEST(PadSequenceGolden, AllEmpty) { check_golden("all_empty"); }
TEST(PadSequenceGolden, Single) { check_golden("single"); }

TEST(PadSequence, GradcheckBothLayoutsAndDoubleBackward) {
  for (bool batch_first : {false, true}) {
    SCOPED_TRACE(batch_first);
    std::vector<Tensor> in = {test::rand_leaf({3, 2}), test::rand_leaf({1, 2}), test::rand_leaf({0, 2}), test::rand_leaf({2, 2})};
    auto f = [batch_first](const std::vector<Tensor>& x) { return pad_sequence(x, batch_first, 0.5) * pad_sequence(x, batch_first, 0.5); };
    EXPECT_TRUE(test::gradcheck(f, in, {.check_grad_grad = true}));
  }
}

TEST(PadSequence, OnlyTheSequencesThatRequireGradGetOne) {
  Tensor a = test::rand_leaf({2, 3}), b = rand({3, 3}, kFloat64);
  Tensor out = pad_sequence({a, b}, true);
  ASSERT_TRUE(out.requires_grad());
  EXPECT_EQ(out.grad_fn()->name(), "PadSequenceBackward0");
  out.sum().backward();
  EXPECT_TRUE(all_close(a.grad(), ones({2, 3}, kFloat64), 0, 0));
  EXPECT_FALSE(b.grad().defined());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(pad_sequence({a, b}).requires_grad());
  }
}

TEST(PadSequence, OutputIsFreshAndContiguous) {
  Tensor a = arange(6, TensorOptions().dtype(kFloat32)).view({3, 2}), b = full({1, 2}, 9.0);
  Tensor out = pad_sequence({a.t().t(), b}, false, -1);
  EXPECT_EQ(out.sizes(), Shape({3, 2, 2}));
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>({0, 1, 9, 9, 2, 3, -1, -1, 4, 5, -1, -1}));
  a.add_(1);  // the output does not alias the inputs
  EXPECT_EQ(out.to_vector<float>()[0], 0.0f);
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(PadSequence, Errors) {
  EXPECT_EQ(error_of<ValueError>([] { pad_sequence({}); }), "pad_sequence: received an empty list of sequences");
  EXPECT_NE(error_of<ValueError>([] { pad_sequence({zeros({2}), Tensor()}); }).find("sequence 1 is an undefined tensor"), std::string::npos);
  EXPECT_NE(error_of<ShapeError>([] { pad_sequence({zeros({2}), zeros({})}); }).find("sequence 1 is a 0-dimensional tensor"), std::string::npos);
  const std::string shape = error_of<ShapeError>([] { pad_sequence({zeros({2, 3}), zeros({4, 3}), zeros({1, 4})}); });
  EXPECT_NE(shape.find("sequence 2 has shape [1, 4] but sequence 0 has shape [2, 3]"), std::string::npos) << shape;
  // PyTorch broadcasts [1] into a [*, 3] slot; here it is refused.
  EXPECT_NE(error_of<ShapeError>([] { pad_sequence({zeros({2, 3}), zeros({1})}); }).find("sequence 1 has shape [1]"), std::string::npos);
  const std::string dtype = error_of<DTypeError>([] { pad_sequence({zeros({2}), zeros({2}), zeros({1}, kInt64)}); });
  EXPECT_NE(dtype.find("sequence 2 has dtype int64 but sequence 0 has float32"), std::string::npos) << dtype;
  const std::string device = error_of<DeviceError>([] { pad_sequence({zeros({2}), zeros({2}).to(Device("cpu:0"))}); });
  EXPECT_NE(device.find("sequence 1 is on cpu:0 but sequence 0 is on cpu"), std::string::npos) << device;
  const std::string nan_pad = error_of<ValueError>([] { pad_sequence({zeros({2}, kInt64)}, false, std::nan("")); });
  EXPECT_NE(nan_pad.find("padding_value nan cannot be converted to the sequences' dtype int64"), std::string::npos) << nan_pad;
  EXPECT_NE(error_of<ValueError>([] { pad_sequence({zeros({2}, kUInt8)}, false, -100); }).find("dtype uint8 without overflow"), std::string::npos);
  EXPECT_NE(error_of<ValueError>([] { pad_sequence({zeros({2}, kInt32)}, false, 1e10); }).find("int32"), std::string::npos);
  // The edges that fit: PyTorch's int64 range and uint8's 255.
  EXPECT_EQ(pad_sequence({zeros({1}, kUInt8), zeros({2}, kUInt8)}, true, 255.9).to_vector<uint8_t>(), std::vector<uint8_t>({0, 255, 0, 0}));
  EXPECT_EQ(pad_sequence({zeros({0}, kInt64), zeros({1}, kInt64)}, true, -9223372036854775808.0).to_vector<int64_t>()[0],
            std::numeric_limits<int64_t>::min());
  EXPECT_THROW(pad_sequence({zeros({0}, kInt64), zeros({1}, kInt64)}, true, 9223372036854775808.0), ValueError);
}

}  // namespace
}  // namespace dp::nn::utils::rnn
