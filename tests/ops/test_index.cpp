// Indexing ops against PyTorch (tests/golden/index.json): index_select, gather, scatter_add,
// index_add, embedding, one_hot, masked_fill, with their gradients; in-place variants; bounds,
// shape, dtype and device errors.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

using Fn = std::function<Tensor(const std::vector<Tensor>&, const json& args)>;
using Prep = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

void run_case(const std::string& name, const Fn& fn, const Prep& prep = nullptr, double rtol = 1e-6, double atol = 1e-9) {
  SCOPED_TRACE(name);
  const json& c = golden_case("index.json", name);
  const bool with_grads = c.contains("grads");
  std::vector<Tensor> leaves;
  for (const json& j : c.at("inputs")) {
    Tensor t = tensor_from_json(j);
    if (with_grads && t.dtype() == kFloat64) t.requires_grad_(true);
    leaves.push_back(t);
  }
  const json args = c.contains("args") ? c.at("args") : json::object();
  std::vector<Tensor> used = prep ? prep(leaves) : leaves;
  Tensor out = fn(used, args);
  EXPECT_EQ(dtype_name(out.dtype()), c.at("output").at("dtype").get<std::string>());
  EXPECT_TRUE(all_close(out, c.at("output"), rtol, atol));
  if (!with_grads) return;
  std::vector<Tensor> diff;
  std::vector<size_t> which;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (leaves[i].requires_grad()) {
      diff.push_back(leaves[i]);
      which.push_back(i);
    }
  ASSERT_TRUE(out.requires_grad());
  std::vector<Tensor> g = autograd::grad({out}, diff, {tensor_from_json(c.at("grad_output"))}, false, false, true);
  for (size_t k = 0; k < diff.size(); ++k) {
    SCOPED_TRACE("gradient of input " + std::to_string(which[k]));
    ASSERT_TRUE(g[k].defined());
    EXPECT_TRUE(all_close(g[k], c.at("grads")[which[k]], 1e-9, 1e-9));
  }
}

int64_t dim_of(const json& args) { return args.at("dim").get<int64_t>(); }

Fn index_select_fn() {
  return [](const std::vector<Tensor>& x, const json& a) { return index_select(x[0], dim_of(a), x[1]); };
}
Fn gather_fn() {
  return [](const std::vector<Tensor>& x, const json& a) { return gather(x[0], dim_of(a), x[1]); };
}
Fn scatter_add_fn() {
  return [](const std::vector<Tensor>& x, const json& a) { return scatter_add(x[0], dim_of(a), x[1], x[2]); };
}
Fn index_add_fn() {
  return [](const std::vector<Tensor>& x, const json& a) { return index_add(x[0], dim_of(a), x[1], x[2]); };
}
Fn embedding_fn() {
  return [](const std::vector<Tensor>& x, const json& a) {
    return embedding(x[0], x[1], a.contains("padding_idx") ? a.at("padding_idx").get<int64_t>() : -1);
  };
}

Scalar value_of(const json& a) {
  const json& v = a.at("value");
  if (v.is_string()) return v.get<std::string>() == "-inf" ? -INFINITY : INFINITY;
  if (v.is_number_integer()) return Scalar(v.get<int64_t>());
  return Scalar(v.get<double>());
}

// ------------------------------------------------------------------------------------------ golden

TEST(IndexGolden, IndexSelect) {
  for (const char* name : {"index_select_dim0", "index_select_dim1", "index_select_dim_neg", "index_select_empty_index", "index_select_int64_values"})
    run_case(name, index_select_fn());
  run_case("index_select_f32", index_select_fn(), nullptr, 0, 0);  // a pure copy: exact
  run_case("index_select_t", index_select_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1]}; });
}

TEST(IndexGolden, Gather) {
  for (const char* name : {"gather_dim0", "gather_dim1", "gather_smaller_index", "gather_3d"}) run_case(name, gather_fn());
  run_case("gather_t", gather_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1]}; });
}

TEST(IndexGolden, ScatterAdd) {
  for (const char* name : {"scatter_add_dim0_dups", "scatter_add_dim1", "scatter_add_index_smaller"}) run_case(name, scatter_add_fn());
  run_case("scatter_add_int64", scatter_add_fn(), nullptr, 0, 0);
}

TEST(IndexGolden, IndexAdd) {
  for (const char* name : {"index_add_dim0_dups", "index_add_dim1", "index_add_int32_index"}) run_case(name, index_add_fn());
  run_case("index_add_t", index_add_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1], x[2].t()}; });
}

TEST(IndexGolden, Embedding) {
  for (const char* name : {"embedding_2d_indices", "embedding_padding", "embedding_scalar_index"}) run_case(name, embedding_fn());
  run_case("embedding_int32", embedding_fn(), nullptr, 0, 0);
  run_case("embedding_wt", embedding_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1]}; });
}

TEST(IndexGolden, OneHot) {
  for (const char* name : {"one_hot_explicit", "one_hot_inferred", "one_hot_empty"})
    run_case(
        name, [](const std::vector<Tensor>& x, const json& a) { return one_hot(x[0], a.at("num_classes").get<int64_t>()); }, nullptr, 0, 0);
}

TEST(IndexGolden, MaskedFill) {
  auto fn = [](const std::vector<Tensor>& x, const json& a) { return masked_fill(x[0], x[1], value_of(a)); };
  for (const char* name : {"masked_fill_same", "masked_fill_bcast_mask", "masked_fill_bcast_self"}) run_case(name, fn);
  run_case("masked_fill_int64", fn, nullptr, 0, 0);
  run_case("masked_fill_f32_neg_inf", fn, nullptr, 0, 0);
}

// --------------------------------------------------------------------------------------- semantics

TEST(Index, EmbeddingDuplicateIndicesAccumulate) {
  Tensor w = zeros({4, 3}, kFloat64).requires_grad_();
  Tensor idx = tensor<int64_t>({1, 1, 1, 3, 1}, {5});
  embedding(w, idx).sum().backward();
  std::vector<double> g = w.grad().to_vector<double>();
  std::vector<double> expected = {0, 0, 0, 4, 4, 4, 0, 0, 0, 1, 1, 1};
  EXPECT_EQ(g, expected);
}

TEST(Index, EmbeddingPaddingRowGetsNoGradient) {
  Tensor w = randn({5, 2}, kFloat64).requires_grad_();
  Tensor idx = tensor<int64_t>({0, 2, 2, 4}, {2, 2});
  Tensor out = embedding(w, idx, 2);
  EXPECT_EQ(out.sizes(), (Shape{2, 2, 2}));
  EXPECT_TRUE(all_close(out.select(0, 1).select(0, 0), w.detach().select(0, 2), 0, 0));  // the forward still looks it up
  out.sum().backward();
  EXPECT_EQ(w.grad().select(0, 2).to_vector<double>(), (std::vector<double>{0, 0}));
  EXPECT_EQ(w.grad().select(0, 0).to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(out.grad_fn()->name(), "EmbeddingBackward0");
}

TEST(Index, ScatterAddInPlace) {
  Tensor self = zeros({2, 3});
  Tensor index = tensor<int64_t>({0, 2, 2, 1, 1, 1}, {2, 3});
  Tensor src = ones({2, 3});
  const uint32_t v0 = self.version();
  Tensor& r = scatter_add_(self, 1, index, src);
  EXPECT_TRUE(r.is_same(self));
  EXPECT_GT(self.version(), v0);
  EXPECT_EQ(self.to_vector<float>(), (std::vector<float>{1, 0, 2, 0, 3, 0}));
  // Tensor method form
  self.scatter_add_(1, index, src);
  EXPECT_EQ(self.to_vector<float>(), (std::vector<float>{2, 0, 4, 0, 6, 0}));
}

TEST(Index, IndexAddInPlaceOnNonContiguousSelf) {
  Tensor base = zeros({3, 4});
  Tensor view = base.t();  // [4, 3], strides (1, 4)
  index_add_(view, 0, tensor<int64_t>({3, 0, 3}, {3}), ones({3, 3}));
  // rows 3 and 0 of the view are columns 3 and 0 of base
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{1, 0, 0, 2, 1, 0, 0, 2, 1, 0, 0, 2}));
}

TEST(Index, InPlaceRecordsHistory) {
  Tensor a = randn({3, 2}, kFloat64).requires_grad_(), src = randn({2, 2}, kFloat64).requires_grad_();
  Tensor y = a * 2.0;
  index_add_(y, 0, tensor<int64_t>({2, 2}, {2}), src);
  EXPECT_EQ(y.grad_fn()->name(), "IndexAddBackward0");
  y.sum().backward();
  EXPECT_TRUE(all_close(a.grad(), full({3, 2}, 2.0, kFloat64), 0, 0));
  EXPECT_TRUE(all_close(src.grad(), ones({2, 2}, kFloat64), 0, 0));

  Tensor b = randn({2, 3}, kFloat64).requires_grad_();
  Tensor z = b * 1.0;
  z.scatter_add_(1, tensor<int64_t>({0, 0}, {1, 2}), b);
  EXPECT_EQ(z.grad_fn()->name(), "ScatterAddBackward0");
  z.sum().backward();
  // b reaches z directly (1 each) and through src at positions [0, 0] and [0, 1] (1 more each)
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 2, 1, 1, 1, 1}));
}

TEST(Index, InPlaceOnLeafRequiringGradIsRejected) {
  Tensor a = zeros({3}, kFloat64).requires_grad_();
  EXPECT_THROW(index_add_(a, 0, tensor<int64_t>({0}, {1}), ones({1}, kFloat64)), AutogradError);
  EXPECT_THROW(scatter_add_(a, 0, tensor<int64_t>({0}, {1}), ones({1}, kFloat64)), AutogradError);
  NoGradGuard ng;  // allowed without grad mode, like PyTorch's torch.no_grad()
  index_add_(a, 0, tensor<int64_t>({0}, {1}), ones({1}, kFloat64));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, 0, 0}));
}

TEST(Index, InPlaceAfterSaveIsDetectedInBackward) {
  Tensor a = randn({2, 2}, kFloat64).requires_grad_(), b = randn({2, 2}, kFloat64);
  Tensor y = a * 1.0;
  Tensor out = mm(y, b.requires_grad_());  // saves y for b's gradient
  index_add_(y, 0, tensor<int64_t>({1}, {1}), ones({1, 2}, kFloat64));
  EXPECT_THROW(out.sum().backward(), AutogradError);
}

TEST(Index, MaskedFillBroadcastsAndNames) {
  Tensor a = randn({3, 1}, kFloat64).requires_grad_();
  Tensor mask = tensor<bool>({true, false, false, true}, {1, 4});
  Tensor out = masked_fill(a, mask, -1.0);
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  EXPECT_EQ(out.grad_fn()->name(), "MaskedFillBackward0");
  out.sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
}

TEST(Index, NodeNames) {
  Tensor a = randn({3, 4}, kFloat64).requires_grad_();
  Tensor i = tensor<int64_t>({0, 2}, {2});
  EXPECT_EQ(index_select(a, 0, i).grad_fn()->name(), "IndexSelectBackward0");
  EXPECT_EQ(gather(a, 1, tensor<int64_t>({0, 1}, {1, 2})).grad_fn()->name(), "GatherBackward0");
  EXPECT_EQ(scatter_add(a, 0, tensor<int64_t>({0}, {1, 1}), a).grad_fn()->name(), "ScatterAddBackward0");
  EXPECT_EQ(index_add(a, 0, i, a.narrow(0, 0, 2)).grad_fn()->name(), "IndexAddBackward0");
  EXPECT_FALSE(one_hot(i, 3).requires_grad());
  EXPECT_EQ(one_hot(i, 3).dtype(), kInt64);
}

TEST(Index, ScalarAndEmptyEdgeCases) {
  Tensor s = scalar_tensor(5.0);
  Tensor r = index_select(s, 0, tensor<int64_t>({0}, {1}));
  EXPECT_EQ(r.dim(), 0);
  EXPECT_EQ(r.item<double>(), 5.0);
  EXPECT_EQ(index_select(zeros({3, 0}), 0, tensor<int64_t>({0, 2}, {2})).sizes(), (Shape{2, 0}));
  EXPECT_EQ(embedding(zeros({4, 3}), zeros({0}, kInt64)).sizes(), (Shape{0, 3}));
  EXPECT_EQ(gather(zeros({2, 2}), 0, zeros({0, 2}, kInt64)).sizes(), (Shape{0, 2}));
  Tensor zi = zeros({}, kInt64);
  EXPECT_EQ(embedding(arange(6.0).reshape({3, 2}), zi).to_vector<float>(), (std::vector<float>{0, 1}));
}

TEST(Index, AllDtypesMoveExactly) {
  for (DType dt : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = arange(12).reshape({3, 4}).to(dt);
    Tensor sel = index_select(a, 1, tensor<int64_t>({3, 0}, {2}));
    EXPECT_EQ(sel.dtype(), dt);
    std::vector<double> expected = {3, 0, 7, 4, 11, 8};
    if (dt == kBool) expected = {1, 0, 1, 1, 1, 1};
    EXPECT_EQ(sel.to_vector<double>(), expected);
    Tensor g = gather(a, 0, tensor<int64_t>({2, 1, 0, 2}, {1, 4}));
    std::vector<double> eg = {8, 5, 2, 11};
    if (dt == kBool) eg = {1, 1, 1, 1};
    EXPECT_EQ(g.to_vector<double>(), eg);
    Tensor e = embedding(a, tensor<int64_t>({1}, {1}));
    std::vector<double> ee = {4, 5, 6, 7};
    if (dt == kBool) ee = {1, 1, 1, 1};
    EXPECT_EQ(e.to_vector<double>(), ee);
    Tensor m = masked_fill(a, tensor<bool>({true, false, false, false}, {4}), 1);
    EXPECT_EQ(m.to_vector<double>()[4], 1.0);
    EXPECT_EQ(m.dtype(), dt);
  }
}

// ------------------------------------------------------------------------------------------ errors

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected to contain: " << needle;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
  }
}

TEST(IndexErrors, OutOfRangeIndicesNameOpValueAndRange) {
  Tensor a = zeros({3, 4});
  expect_error<IndexError>(
      [&] {
        index_select(a, 0, tensor<int64_t>({0, 5}, {2}));
      },
      "index_select: index 5 is out of bounds for dimension 0 with size 3 (valid range [0, 2])");
  expect_error<IndexError>([&] { index_select(a, 1, tensor<int32_t>({-1}, {1})); },
                           "index_select: index -1 is out of bounds for dimension 1 with size 4");
  expect_error<IndexError>(
      [&] {
        gather(a, 1, tensor<int64_t>({0, 4}, {1, 2}));
      },
      "gather: index 4 is out of bounds for dimension 1 with size 4 (valid range [0, 3])");
  expect_error<IndexError>([&] { scatter_add(a, 0, tensor<int64_t>({3}, {1, 1}), ones({1, 1})); }, "scatter_add: index 3");
  Tensor b = zeros({3, 4});
  expect_error<IndexError>([&] { scatter_add_(b, 0, tensor<int64_t>({0, -7}, {1, 2}), ones({1, 2})); }, "scatter_add_: index -7");
  EXPECT_EQ(b.sum().item<double>(), 0.0);  // nothing written before the bad index was found
  expect_error<IndexError>(
      [&] {
        index_add(a, 0, tensor<int64_t>({0, 3}, {2}), ones({2, 4}));
      },
      "index_add: index 3 is out of bounds for dimension 0 with size 3");
  expect_error<IndexError>([&] { index_add_(b, 1, tensor<int64_t>({9}, {1}), ones({3, 1})); }, "index_add_: index 9");
  EXPECT_EQ(b.sum().item<double>(), 0.0);
  expect_error<IndexError>(
      [&] {
        embedding(zeros({5, 3}), tensor<int64_t>({0, 10}, {2}));
      },
      "embedding: index 10 is out of bounds for dimension 0 with size 5 (valid range [0, 4])");
  expect_error<IndexError>([&] { embedding(zeros({5, 3}), tensor<int64_t>({-1}, {1})); }, "embedding: index -1");
  expect_error<IndexError>([&] { embedding(zeros({0, 3}), tensor<int64_t>({0}, {1})); }, "the dimension is empty");
  expect_error<IndexError>(
      [&] {
        one_hot(tensor<int64_t>({0, 3}, {2}), 3);
      },
      "one_hot: class value 3 is out of range for num_classes 3 (valid range [0, 2])");
  expect_error<IndexError>([&] { one_hot(tensor<int64_t>({0, -1}, {2}), 3); }, "one_hot: class value -1 is negative");
  expect_error<IndexError>([&] { index_select(a, 2, tensor<int64_t>({0}, {1})); }, "index_select");  // dim out of range
}

TEST(IndexErrors, ShapesDtypesDevices) {
  Tensor a = zeros({3, 4});
  expect_error<DTypeError>([&] { index_select(a, 0, zeros({1})); }, "index_select: expected an int64 or int32 index tensor, got float32");
  expect_error<IndexError>([&] { index_select(a, 0, zeros({1, 1}, kInt64)); }, "index_select: Index is supposed to be a vector");
  expect_error<ShapeError>([&] { gather(a, 1, zeros({2}, kInt64)); }, "gather: Index tensor must have the same number of dimensions as input tensor");
  expect_error<ShapeError>(
      [&] {
        gather(a, 1, zeros({4, 2}, kInt64));
      },
      "gather: Size does not match at dimension 0 expected index [4, 2] to be smaller than self [3, 4] apart from dimension 1");
  expect_error<DTypeError>(
      [&] {
        scatter_add(a, 1, zeros({1, 2}, kInt64), ones({1, 2}, kFloat64));
      },
      "scatter_add: Expected self.dtype to be equal to src.dtype");
  expect_error<ShapeError>(
      [&] {
        scatter_add(a, 1, zeros({1, 2}, kInt64), ones({1, 1}));
      },
      "scatter_add: Expected index [1, 2] to be smaller than self [3, 4] apart from dimension 1 and to be smaller size than src [1, 1]");
  expect_error<ShapeError>(
      [&] {
        index_add(a, 0, zeros({2}, kInt64), ones({3, 4}));
      },
      "index_add: Number of indices (2) should be equal to source.size(dim): (3), for dim: 0");
  expect_error<ShapeError>([&] { index_add(a, 0, zeros({2}, kInt64), ones({2, 5})); }, "index_add: source [2, 5] and self [3, 4]");
  expect_error<DTypeError>([&] { index_add(a, 0, zeros({2}, kInt64), ones({2, 4}, kFloat64)); }, "index_add: self (float32) and source (float64)");
  expect_error<ShapeError>([&] { embedding(zeros({5}), zeros({2}, kInt64)); }, "embedding: 'weight' must be 2-D");
  expect_error<DTypeError>([&] { embedding(zeros({5, 3}), zeros({2})); }, "embedding: Expected tensor for argument #1 'indices'");
  expect_error<ValueError>([&] { embedding(zeros({5, 3}), zeros({2}, kInt64), 7); }, "embedding: padding_idx must be within num_embeddings");
  expect_error<ValueError>([&] { one_hot(zeros({0}, kInt64), -1); }, "one_hot: Can not infer total number of classes from empty tensor.");
  expect_error<DTypeError>([&] { one_hot(zeros({2}), 3); }, "one_hot");
  expect_error<DTypeError>([&] { masked_fill(a, zeros({4}, kUInt8), 1.0); },
                           "masked_fill: only supports boolean masks, but got mask with dtype uint8");
  expect_error<ShapeError>([&] { masked_fill(a, zeros({3}, kBool), 1.0); }, "masked_fill");
  Tensor dev_idx = zeros({1}, TensorOptions().dtype(kInt64).device(Device("cpu:0")));
  expect_error<DeviceError>([&] { index_select(a, 0, dev_idx); }, "expected all tensors to be on the same device");
  expect_error<DeviceError>([&] { embedding(zeros({5, 3}), dev_idx); }, "embedding");
  expect_error<DeviceError>([&] { masked_fill(a, zeros({4}, TensorOptions().dtype(kBool).device(Device("cpu:0"))), 1.0); }, "masked_fill");
}

}  // namespace
}  // namespace dp
