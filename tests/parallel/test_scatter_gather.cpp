// Typed, recursive scatter and gather (dp/parallel/scatter_gather.h).
#include <gtest/gtest.h>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include "dp/dp.h"
#include "dp/parallel/scatter_gather.h"

// A user struct made scatterable and gatherable by one declaration.
struct Batch {
  dp::Tensor images;
  dp::Tensor labels;
  std::string source = "train";  // not listed: copied
  int epoch = 0;
  DP_FIELDS(images, labels)
};

// A type we "can't edit": made scatterable through the trait.
struct Theirs {
  dp::Tensor a;
  double scale = 1.0;
};
template <>
struct dp::parallel::Fields<Theirs> {
  static auto tie(Theirs& t) { return std::tie(t.a, t.scale); }
  static auto tie(const Theirs& t) { return std::tie(t.a, t.scale); }
};

struct NotComparable {
  int x = 0;
};

namespace dp::parallel {
namespace {

class ScatterGather : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
  SplitOptions two{{Device("cpu:0"), Device("cpu:1")}, 0, SplitPolicy::Chunk, {}, {}, {}};
  SplitOptions four{{Device("cpu:0"), Device("cpu:1"), Device("cpu:2"), Device("cpu:3")}, 0, SplitPolicy::Chunk, {}, {}, {}};
};

TEST_F(ScatterGather, TensorsAreSplitAndOtherArgumentsCopied) {
  Tensor x = randn({6, 3});
  auto parts = scatter_args(std::make_tuple(x, 7, std::string("mode"), Tensor()), two);
  ASSERT_EQ(parts.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(std::get<0>(parts[j]).sizes(), Shape({3, 3}));
    EXPECT_EQ(std::get<0>(parts[j]).device(), Device::cpu(static_cast<int>(j)));
    EXPECT_TRUE(equal(std::get<0>(parts[j]).cpu(), x.narrow(0, 3 * static_cast<int64_t>(j), 3)));
    EXPECT_EQ(std::get<1>(parts[j]), 7);
    EXPECT_EQ(std::get<2>(parts[j]), "mode");
    EXPECT_FALSE(std::get<3>(parts[j]).defined());  // an undefined tensor (None) passes through
  }
}

TEST_F(ScatterGather, NestedContainersAreScatteredElementByElement) {
  using Arg = std::tuple<std::vector<Tensor>, std::array<Tensor, 2>, std::pair<Tensor, int>, std::map<std::string, Tensor>,
                         std::unordered_map<int, Tensor>, std::optional<Tensor>, std::optional<Tensor>, std::vector<int>>;
  Arg arg{{randn({4, 2}), randn({4})},
          {randn({4, 1}), randn({4, 5})},
          {randn({4}), 3},
          {{"a", randn({4, 2})}, {"b", randn({4})}},
          {{1, randn({4, 3})}},
          randn({4, 2}),
          std::nullopt,
          {1, 2, 3}};
  auto parts = scatter_value(arg, four);
  ASSERT_EQ(parts.size(), 4u);
  for (size_t j = 0; j < 4; ++j) {
    const Device d = Device::cpu(static_cast<int>(j));
    const Arg& p = parts[j];
    EXPECT_EQ(std::get<0>(p)[1].sizes(), Shape({1}));
    EXPECT_EQ(std::get<0>(p)[1].device(), d);
    EXPECT_EQ(std::get<1>(p)[1].sizes(), Shape({1, 5}));
    EXPECT_EQ(std::get<2>(p).second, 3);
    EXPECT_TRUE(equal(std::get<3>(p).at("a").cpu(), std::get<3>(arg).at("a").narrow(0, static_cast<int64_t>(j), 1)));
    EXPECT_EQ(std::get<4>(p).at(1).device(), d);
    ASSERT_TRUE(std::get<5>(p).has_value());
    EXPECT_EQ(std::get<5>(p)->sizes(), Shape({1, 2}));
    EXPECT_FALSE(std::get<6>(p).has_value());
    EXPECT_EQ(std::get<7>(p), (std::vector<int>{1, 2, 3}));
  }
}

TEST_F(ScatterGather, EmptyContainersPassThrough) {
  auto parts = scatter_args(std::make_tuple(randn({2, 2}), std::vector<Tensor>{}, std::map<std::string, Tensor>{}), two);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(std::get<1>(parts[1]).empty());
  EXPECT_TRUE(std::get<2>(parts[1]).empty());
}

TEST_F(ScatterGather, UserStructsScatterTheirDeclaredFields) {
  Batch b{arange(0, 8, 1, TensorOptions().dtype(kFloat32)).view({4, 2}), arange(0, 4, 1, TensorOptions().dtype(kInt64)), "val", 3};
  auto parts = scatter_value(b, two);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].images.sizes(), Shape({2, 2}));
  EXPECT_EQ(parts[1].labels.device(), Device("cpu:1"));
  EXPECT_TRUE(equal(parts[1].labels.cpu(), tensor<int64_t>({2, 3})));
  EXPECT_EQ(parts[1].source, "val");
  EXPECT_EQ(parts[1].epoch, 3);
  Theirs t{randn({4, 3}), 0.5};
  auto theirs = scatter_value(t, two);
  EXPECT_EQ(theirs[0].a.sizes(), Shape({2, 3}));
  EXPECT_EQ(theirs[1].scale, 0.5);
}

TEST_F(ScatterGather, ChunkCountComesFromTheTensorsOrFromTheDevices) {
  // Fewer rows than devices: fewer replicas (torch.chunk: 5 rows on 4 devices -> 2, 2, 1).
  EXPECT_EQ(scatter_value(randn({5, 2}), four).size(), 3u);
  EXPECT_EQ(scatter_value(randn({1, 2}), four).size(), 1u);
  // Balanced: every device while there are rows.
  SplitOptions balanced = four;
  balanced.policy = SplitPolicy::Balanced;
  auto parts = scatter_value(randn({6, 2}), balanced);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[3].size(0), 1);
  // No tensor at all: every device runs with a copy.
  EXPECT_EQ(scatter_args(std::make_tuple(1, std::string("x")), four).size(), 4u);
}

TEST_F(ScatterGather, TensorsThatSplitDifferentlyAreAnError) {
  try {
    scatter_args(std::make_tuple(randn({8, 2}), randn({2, 2})), four);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("different numbers of chunks"), std::string::npos) << e.what();
  }
  // Same count with different sizes is allowed (as torch.chunk splits each).
  auto parts = scatter_args(std::make_tuple(randn({30, 2}), randn({29})), two);
  EXPECT_EQ(std::get<1>(parts[1]).size(0), 14);
  EXPECT_THROW(scatter_value(tensor<float>({1.0f}).view({}), two), ShapeError);
}

TEST_F(ScatterGather, NestedOutputsKeepTheirTypesAndValues) {
  // PyTorch's test_data_parallel_nested_output, in C++ types.
  using Out = std::tuple<Tensor, std::tuple<Tensor, Tensor, std::vector<Tensor>>, Tensor, std::map<std::string, std::vector<Tensor>>>;
  std::vector<Out> outs;
  std::vector<Tensor> ts;
  for (int j = 0; j < 3; ++j) {
    Tensor t = randn({2, 3}).to(Device::cpu(j));
    ts.push_back(t.cpu());
    outs.push_back(Out{t, {t.sin(), t.cos(), {t + 1}}, t, {{"a", {t}}, {"b", {t.sin()}}}});
  }
  Out g = gather_outputs(outs, Device::cpu());
  Tensor full_t = cat(ts, 0);
  EXPECT_TRUE(allclose(std::get<0>(g), full_t));
  EXPECT_TRUE(allclose(std::get<0>(std::get<1>(g)), full_t.sin()));
  EXPECT_TRUE(allclose(std::get<1>(std::get<1>(g)), full_t.cos()));
  EXPECT_TRUE(allclose(std::get<2>(std::get<1>(g))[0], full_t + 1));
  EXPECT_TRUE(allclose(std::get<3>(g).at("b")[0], full_t.sin()));
  EXPECT_EQ(std::get<0>(g).device(), Device::cpu());
}

TEST_F(ScatterGather, GatheredStructsAndOptionals) {
  std::vector<Batch> outs{{randn({2, 2}), randn({2}), "x", 1}, {randn({3, 2}), randn({3}), "x", 1}};
  Batch g = gather_outputs(outs, "cpu:1");
  EXPECT_EQ(g.images.sizes(), Shape({5, 2}));
  EXPECT_EQ(g.labels.device(), Device("cpu:1"));
  EXPECT_EQ(g.source, "x");
  std::vector<std::optional<Tensor>> none{std::nullopt, std::nullopt};
  EXPECT_FALSE(gather_outputs(none, Device::cpu()).has_value());
  std::vector<std::optional<Tensor>> mixed{randn({1}), std::nullopt};
  EXPECT_THROW(gather_outputs(mixed, Device::cpu()), ValueError);
  std::vector<Tensor> undefined{Tensor(), Tensor()};
  EXPECT_FALSE(gather_outputs(undefined, Device::cpu()).defined());
}

TEST_F(ScatterGather, MapsWithDifferentKeysAreAClearError) {
  std::vector<std::map<std::string, Tensor>> outs{{{"loss", randn({1})}, {"logits", randn({1, 2})}},
                                                  {{"loss", randn({1})}, {"probs", randn({1, 2})}}};
  try {
    gather_outputs(outs, Device::cpu());
    FAIL();
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("different keys"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'logits'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'probs'"), std::string::npos) << msg;
  }
}

TEST_F(ScatterGather, LengthAndShapeMismatchesNameWhereInTheOutput) {
  std::vector<std::vector<Tensor>> lengths{{randn({1}), randn({1})}, {randn({1})}};
  EXPECT_THROW(gather_outputs(lengths, Device::cpu()), ValueError);
  std::vector<std::pair<Tensor, Tensor>> shapes{{randn({1, 2}), randn({1, 2})}, {randn({1, 2}), randn({1, 3})}};
  try {
    gather_outputs(shapes, Device::cpu());
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("output.get<1>()"), std::string::npos) << e.what();
  }
}

TEST_F(ScatterGather, NonTensorLeavesMustAgree) {
  std::vector<std::pair<Tensor, int>> same{{randn({1}), 4}, {randn({1}), 4}};
  EXPECT_EQ(gather_outputs(same, Device::cpu()).second, 4);
  std::vector<std::pair<Tensor, int>> differ{{randn({1}), 4}, {randn({1}), 5}};
  EXPECT_THROW(gather_outputs(differ, Device::cpu()), ValueError);
  // NotComparable has no ==: gather_outputs(std::vector<NotComparable>) does not compile (static_assert).
  static_assert(!std::equality_comparable<NotComparable>);
}

TEST_F(ScatterGather, MoveOutputMovesWithoutConcatenating) {
  Tensor t = randn({2, 2}).to("cpu:1");
  Tensor same = move_output(t, "cpu:1");
  EXPECT_TRUE(same.is_same(t));
  Tensor scalar = move_output(t.sum(), Device::cpu());
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.device(), Device::cpu());
}

}  // namespace
}  // namespace dp::parallel
