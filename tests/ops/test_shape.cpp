// Views and shape ops: values, strides and storage offsets against PyTorch (tests/golden/shape.json),
// storage sharing, write-through, chunk/split tables, cat/stack with promotion, and the errors.
#include <gtest/gtest.h>
#include <functional>
#include <map>
#include "backend/cpu/loops.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::golden_case;
using test::json;
using test::tensor_from_json;

const char* kFile = "shape.json";

Tensor make_base(const std::string& base, const Tensor& root) {
  if (base == "x" || base == "col") return root;
  if (base == "xt") return root.transpose(0, 2);
  if (base == "xs") return root.slice(2, 1, 3);
  if (base == "xp") return root.permute({2 - 1, 0, 2});
  throw std::runtime_error("unknown base " + base);
}

const std::map<std::string, std::function<Tensor(const Tensor&)>>& view_ops() {
  static const std::map<std::string, std::function<Tensor(const Tensor&)>> ops = {
      {"view_6_4",
       [](const Tensor& t) {
         return t.view({6, 4});
       }},
      {"view_m1", [](const Tensor& t) { return t.view({-1}); }},
      {"view_2_m1_2",
       [](const Tensor& t) {
         return t.view({2, -1, 2});
       }},
      {"view_xp_split_last",
       [](const Tensor& t) {
         return t.view({3, 2, 2, 2});
       }},
      {"view_xs_unit",
       [](const Tensor& t) {
         return t.view({2, 3, 2, 1});
       }},
      {"view_xt_1_4_3_2",
       [](const Tensor& t) {
         return t.view({1, 4, 3, 2});
       }},
      {"reshape_view",
       [](const Tensor& t) {
         return t.reshape({4, 6});
       }},
      {"reshape_copy_xt", [](const Tensor& t) { return t.reshape({24}); }},
      {"reshape_copy_xs",
       [](const Tensor& t) {
         return t.reshape({-1, 3});
       }},
      {"as_strided_3x3",
       [](const Tensor& t) {
         return t.as_strided({3, 3}, {4, 1}, 2);
       }},
      {"as_strided_overlap",
       [](const Tensor& t) {
         return t.as_strided({4, 3}, {1, 2});
       }},
      {"narrow_1_1_2", [](const Tensor& t) { return t.narrow(1, 1, 2); }},
      {"narrow_neg", [](const Tensor& t) { return t.narrow(-1, -3, 2); }},
      {"narrow_xt", [](const Tensor& t) { return t.narrow(0, 1, 2); }},
      {"slice_step2", [](const Tensor& t) { return t.slice(1, std::nullopt, std::nullopt, 2); }},
      {"slice_start1_step2", [](const Tensor& t) { return t.slice(2, 1, std::nullopt, 2); }},
      {"slice_neg", [](const Tensor& t) { return t.slice(2, -3, -1); }},
      {"slice_clamp", [](const Tensor& t) { return t.slice(2, -100, 100); }},
      {"slice_empty", [](const Tensor& t) { return t.slice(1, 5, 10); }},
      {"slice_xs", [](const Tensor& t) { return t.slice(0, 1).slice(1, 1); }},
      {"select_1_m1", [](const Tensor& t) { return t.select(1, -1); }},
      {"select_0_1", [](const Tensor& t) { return t.select(0, 1); }},
      {"select_xt", [](const Tensor& t) { return t.select(2, 0); }},
      {"transpose_0_2", [](const Tensor& t) { return t.transpose(0, 2); }},
      {"transpose_neg", [](const Tensor& t) { return t.transpose(-1, -2); }},
      {"transpose_xs", [](const Tensor& t) { return t.transpose(0, 1); }},
      {"permute_2_0_1",
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"permute_xt",
       [](const Tensor& t) {
         return t.permute({1, 2, 0});
       }},
      {"expand_col",
       [](const Tensor& t) {
         return t.expand({3, 4});
       }},
      {"expand_lead",
       [](const Tensor& t) {
         return t.expand({2, 3, 5});
       }},
      {"expand_m1",
       [](const Tensor& t) {
         return t.expand({2, -1, 4});
       }},
      {"expand_narrow",
       [](const Tensor& t) {
         return t.narrow(1, 0, 1).expand({2, 3, 4});
       }},
      {"squeeze_all", [](const Tensor& t) { return t.narrow(1, 0, 1).squeeze(); }},
      {"squeeze_dim", [](const Tensor& t) { return t.narrow(1, 0, 1).squeeze(1); }},
      {"squeeze_noop", [](const Tensor& t) { return t.squeeze(0); }},
      {"unsqueeze_0", [](const Tensor& t) { return t.unsqueeze(0); }},
      {"unsqueeze_last", [](const Tensor& t) { return t.unsqueeze(-1); }},
      {"unsqueeze_2", [](const Tensor& t) { return t.unsqueeze(2); }},
      {"unsqueeze_xt", [](const Tensor& t) { return t.unsqueeze(1); }},
      {"flatten_all", [](const Tensor& t) { return t.flatten(); }},
      {"flatten_1", [](const Tensor& t) { return t.flatten(1); }},
      {"flatten_0_1", [](const Tensor& t) { return t.flatten(0, 1); }},
      {"flatten_xt", [](const Tensor& t) { return t.flatten(); }},
      {"flatten_xt_1", [](const Tensor& t) { return t.flatten(1); }},
      {"flatten_xp_1", [](const Tensor& t) { return t.flatten(1); }},
      {"unflatten_2",
       [](const Tensor& t) {
         return t.unflatten(2, {2, 2});
       }},
      {"unflatten_neg",
       [](const Tensor& t) {
         return t.unflatten(-1, {-1, 2});
       }},
      {"contiguous_xt", [](const Tensor& t) { return t.contiguous(); }},
      {"clone_xs", [](const Tensor& t) { return t.clone(); }},
      {"to_f64_xt", [](const Tensor& t) { return t.to(kFloat64); }},
      {"to_f64_xs", [](const Tensor& t) { return t.to(kFloat64); }},
      {"to_i32_xp", [](const Tensor& t) { return t.to(kInt32); }},
  };
  return ops;
}

const std::map<std::string, std::function<std::vector<Tensor>(const Tensor&)>>& multi_ops() {
  static const std::map<std::string, std::function<std::vector<Tensor>(const Tensor&)>> ops = {
      {"chunk_2_dim2", [](const Tensor& t) { return t.chunk(2, 2); }},
      {"chunk_xt_3", [](const Tensor& t) { return t.chunk(3, 0); }},
      {"split_2_dim1", [](const Tensor& t) { return t.split(2, 1); }},
      {"split_sizes_1_0_3",
       [](const Tensor& t) {
         return t.split_with_sizes({1, 0, 3}, 2);
       }},
      {"split_xp", [](const Tensor& t) { return t.split(3, -1); }},
  };
  return ops;
}

// Ops whose result is a view of the base (the others copy).
bool is_view_case(const std::string& name) {
  return name != "reshape_copy_xt" && name != "reshape_copy_xs" && name != "flatten_xt" && name != "flatten_xt_1" && name != "flatten_xp_1" &&
         name != "contiguous_xt" && name != "clone_xs" && name.rfind("to_", 0) != 0;
}

TEST(ShapeGolden, ViewValuesStridesOffsets) {
  for (const auto& [name, op] : view_ops()) {
    SCOPED_TRACE(name);
    const json& c = golden_case(kFile, name);
    Tensor root = tensor_from_json(c.at("inputs")[0]);
    Tensor base = make_base(c.at("base").get<std::string>(), root);
    Tensor out = op(base);
    const json& expected = c.at("output");
    EXPECT_EQ(dtype_name(out.dtype()), expected.at("dtype").get<std::string>());
    EXPECT_TRUE(test::all_close(out, expected, 0, 0));
    EXPECT_EQ(out.strides(), c.at("strides").get<Shape>());
    EXPECT_EQ(out.storage_offset(), c.at("storage_offset").get<int64_t>());
    if (is_view_case(name)) {
      EXPECT_EQ(out.storage().get(), root.storage().get()) << "a view must share its base's storage";
    } else {
      EXPECT_NE(out.storage().get(), root.storage().get()) << "a copy must not alias its input";
    }
  }
}

TEST(ShapeGolden, MultiOutputViews) {
  for (const auto& [name, op] : multi_ops()) {
    SCOPED_TRACE(name);
    const json& c = golden_case(kFile, name);
    Tensor root = tensor_from_json(c.at("inputs")[0]);
    std::vector<Tensor> outs = op(make_base(c.at("base").get<std::string>(), root));
    const json& expected = c.at("output");
    ASSERT_EQ(outs.size(), expected.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_TRUE(test::all_close(outs[i], expected[i], 0, 0)) << "piece " << i;
      EXPECT_EQ(outs[i].strides(), c.at("strides")[i].get<Shape>()) << "piece " << i;
      EXPECT_EQ(outs[i].storage_offset(), c.at("storage_offset")[i].get<int64_t>()) << "piece " << i;
      EXPECT_EQ(outs[i].storage().get(), root.storage().get());
    }
  }
}

TEST(ShapeGolden, CatAndStack) {
  for (const json& c : test::golden_file(kFile).at("cases")) {
    if (!c.contains("args") || !c.at("args").contains("op")) continue;
    const std::string op = c.at("args").at("op").get<std::string>();
    if (op != "cat" && op != "stack") continue;
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    std::vector<Tensor> ins;
    for (const json& j : c.at("inputs")) {
      Tensor t = tensor_from_json(j);
      if (c.at("args").value("transpose_inputs", false)) t = t.t();
      ins.push_back(t);
    }
    const int64_t dim = c.at("args").at("dim").get<int64_t>();
    Tensor out = op == "cat" ? cat(ins, dim) : stack(ins, dim);
    EXPECT_EQ(dtype_name(out.dtype()), c.at("output").at("dtype").get<std::string>());
    EXPECT_TRUE(test::all_close(out, c.at("output"), 0, 0));
    EXPECT_TRUE(out.is_contiguous());
  }
}

// ---- storage sharing and write-through ----

Tensor arange24() { return arange(24, kFloat32).view({2, 3, 4}); }

TEST(Views, EveryViewSharesStorageAndWritesThrough) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
  };
  const std::vector<Case> cases = {
      {"view",
       [](const Tensor& t) {
         return t.view({6, 4});
       }},
      {"reshape",
       [](const Tensor& t) {
         return t.reshape({4, 6});
       }},
      {"as_strided",
       [](const Tensor& t) {
         return t.as_strided({3, 3}, {4, 1}, 2);
       }},
      {"narrow", [](const Tensor& t) { return t.narrow(2, 1, 2); }},
      {"slice", [](const Tensor& t) { return t.slice(2, 1, std::nullopt, 2); }},
      {"select", [](const Tensor& t) { return t.select(1, 2); }},
      {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
      {"permute",
       [](const Tensor& t) {
         return t.permute({1, 2, 0});
       }},
      {"expand",
       [](const Tensor& t) {
         return t.narrow(0, 1, 1).expand({5, 3, 4});
       }},
      {"squeeze", [](const Tensor& t) { return t.narrow(0, 1, 1).squeeze(); }},
      {"squeeze_dim", [](const Tensor& t) { return t.narrow(0, 1, 1).squeeze(0); }},
      {"unsqueeze", [](const Tensor& t) { return t.unsqueeze(1); }},
      {"flatten", [](const Tensor& t) { return t.flatten(); }},
      {"unflatten",
       [](const Tensor& t) {
         return t.unflatten(2, {2, 2});
       }},
      {"chunk", [](const Tensor& t) { return t.chunk(2, 2)[1]; }},
      {"split", [](const Tensor& t) { return t.split(2, 1)[1]; }},
      {"split_with_sizes",
       [](const Tensor& t) {
         return t.split_with_sizes({1, 3}, 2)[1];
       }},
      {"t_of_select", [](const Tensor& t) { return t.select(0, 1).t(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor base = arange24();
    Tensor v = c.op(base);
    ASSERT_EQ(v.storage().get(), base.storage().get());
    // Write 1000 + i through the view (i = row-major position in the view), then check that every
    // storage position the view covers holds what was written there and the others are untouched.
    Tensor vals = arange(1000, 1000 + v.numel(), 1, kFloat32).view(v.sizes());
    backend::copy_kernel(backend::copy_device_type(v, vals), v, vals);
    std::vector<float> b = base.to_vector<float>();
    std::vector<bool> covered(b.size(), false);
    const bool overlapping = std::string(c.name) == "expand";
    std::vector<int64_t> idx(v.dim(), 0);
    for (int64_t i = 0; i < v.numel(); ++i) {
      int64_t pos = v.storage_offset();
      for (int64_t d = 0; d < v.dim(); ++d) pos += idx[d] * v.strides()[d];
      covered[pos] = true;
      if (!overlapping) {
        EXPECT_EQ(b[pos], 1000.0f + static_cast<float>(i)) << "element " << i;
      }
      for (int64_t d = v.dim() - 1; d >= 0; --d) {
        if (++idx[d] < v.sizes()[d]) break;
        idx[d] = 0;
      }
    }
    for (size_t pos = 0; pos < b.size(); ++pos) {
      if (covered[pos])
        EXPECT_GE(b[pos], 1000.0f);
      else
        EXPECT_EQ(b[pos], static_cast<float>(pos)) << "position " << pos << " is outside the view";
    }
    EXPECT_EQ(v.version(), base.version()) << "views share the version counter";
    base.bump_version();
    EXPECT_EQ(v.version(), base.version());
  }
}

TEST(Views, WriteThroughViewLandsInBase) {
  Tensor base = zeros({3, 4});
  Tensor row = base.select(0, 1);
  Tensor col = base.select(1, 2);
  Tensor block = base.slice(0, 1).slice(1, 2);
  // copy_kernel-free write: through the typed pointer of each view (offset applied by data_ptr).
  float* r = row.data_ptr<float>();
  for (int64_t j = 0; j < 4; ++j) r[j * row.stride(0)] = 1.0f + j;
  float* c = col.data_ptr<float>();
  for (int64_t i = 0; i < 3; ++i) c[i * col.stride(0)] += 10.0f;
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 0, 10, 0, 1, 2, 13, 4, 0, 0, 10, 0}));
  EXPECT_EQ(block.sizes(), (Shape{2, 2}));
  EXPECT_EQ(block.to_vector<float>(), (std::vector<float>{13, 4, 10, 0}));
  // A view of a view of a transposed base.
  Tensor tv = base.t().narrow(0, 1, 2).select(1, 1);  // base[1, 1:3]
  EXPECT_EQ(tv.to_vector<float>(), (std::vector<float>{2, 13}));
  EXPECT_EQ(tv.storage_offset(), 5);
}

TEST(Views, ViewOfEmptyAndScalar) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.view({1, 1}).sizes(), (Shape{1, 1}));
  EXPECT_EQ(s.view({1, 1}).strides(), (Shape{1, 1}));
  EXPECT_EQ(s.view({-1}).sizes(), (Shape{1}));
  EXPECT_EQ(s.reshape({}).dim(), 0);
  EXPECT_EQ(s.unsqueeze(0).sizes(), (Shape{1}));
  EXPECT_EQ(s.flatten().sizes(), (Shape{1}));
  EXPECT_EQ(s.squeeze().dim(), 0);
  EXPECT_EQ(s.squeeze(0).dim(), 0);
  EXPECT_EQ(s.transpose(0, -1).dim(), 0);
  EXPECT_EQ(s.expand({2, 3}).strides(), (Shape{0, 0}));
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.view({3, 0}).sizes(), (Shape{3, 0}));
  EXPECT_EQ(e.view({0, 3}).strides(), (Shape{3, 1}));
  EXPECT_EQ(e.view({-1, 3}).sizes(), (Shape{0, 3}));
  EXPECT_EQ(e.reshape({0}).sizes(), (Shape{0}));
  EXPECT_EQ(e.view({-1}).sizes(), (Shape{0}));
  EXPECT_THROW(e.view({-1, 0}), ShapeError);  // -1 could be anything: ambiguous
  EXPECT_EQ(e.view({-1, 1}).sizes(), (Shape{0, 1}));
}

TEST(Views, NonContiguousInputsToEveryOp) {
  // Every op on a transposed (non-contiguous) input gives the values of the same op on a
  // contiguous copy.
  Tensor base = arange24().transpose(0, 2);  // [4, 3, 2]
  Tensor dense = base.contiguous();
  ASSERT_FALSE(base.is_contiguous());
  ASSERT_TRUE(dense.is_contiguous());
  auto same = [](const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  };
  same(base.reshape({6, 4}), dense.reshape({6, 4}));
  same(base.narrow(1, 1, 2), dense.narrow(1, 1, 2));
  same(base.slice(0, 1, std::nullopt, 2), dense.slice(0, 1, std::nullopt, 2));
  same(base.select(2, 1), dense.select(2, 1));
  same(base.transpose(0, 1), dense.transpose(0, 1));
  same(base.permute({2, 0, 1}), dense.permute({2, 0, 1}));
  same(base.narrow(2, 0, 1).expand({4, 3, 5}), dense.narrow(2, 0, 1).expand({4, 3, 5}));
  same(base.narrow(1, 0, 1).squeeze(), dense.narrow(1, 0, 1).squeeze());
  same(base.unsqueeze(3), dense.unsqueeze(3));
  same(base.flatten(), dense.flatten());
  same(base.flatten(0, 1), dense.flatten(0, 1));
  same(base.unflatten(0, {2, 2}), dense.unflatten(0, {2, 2}));
  same(base.as_strided({2, 2}, {1, 4}, 0), base.as_strided({2, 2}, {1, 4}, 0).contiguous());
  same(base.clone(), dense);
  same(base.to(kFloat64).to(kFloat32), dense);
  same(cat({base, base}, 1), cat({dense, dense}, 1));
  same(stack({base, dense}, 2), stack({dense, dense}, 2));
  auto pieces = base.chunk(2, 0), dense_pieces = dense.chunk(2, 0);
  ASSERT_EQ(pieces.size(), 2u);
  for (size_t i = 0; i < pieces.size(); ++i) same(pieces[i], dense_pieces[i]);
  auto sp = base.split_with_sizes({1, 2}, 1), dsp = dense.split_with_sizes({1, 2}, 1);
  for (size_t i = 0; i < sp.size(); ++i) same(sp[i], dsp[i]);
}

// ---- chunk / split ----

std::vector<int64_t> chunk_sizes(int64_t b, int64_t n) {
  std::vector<int64_t> out;
  for (const Tensor& t : zeros({b, 2}).chunk(n, 0)) out.push_back(t.size(0));
  return out;
}

TEST(Chunk, TorchChunkTable) {
  EXPECT_EQ(chunk_sizes(20, 2), (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(chunk_sizes(9, 4), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(chunk_sizes(6, 4), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(chunk_sizes(20, 8), (std::vector<int64_t>{3, 3, 3, 3, 3, 3, 2}));
  EXPECT_EQ(chunk_sizes(1, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(chunk_sizes(0, 2), (std::vector<int64_t>{0, 0}));
  // The spec's DataParallel examples.
  EXPECT_EQ(chunk_sizes(30, 2), (std::vector<int64_t>{15, 15}));
  EXPECT_EQ(chunk_sizes(10, 2), (std::vector<int64_t>{5, 5}));
}

TEST(Chunk, OffsetsAndNegativeDim) {
  Tensor t = arange(20, kFloat32).view({2, 10});
  auto pieces = t.chunk(4, -1);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[3].sizes(), (Shape{2, 1}));
  EXPECT_EQ(pieces[3].storage_offset(), 9);
  EXPECT_EQ(pieces[1].to_vector<float>(), (std::vector<float>{3, 4, 5, 13, 14, 15}));
}

TEST(Chunk, Errors) {
  EXPECT_THROW(chunk(zeros({4}), 0), ValueError);
  EXPECT_THROW(chunk(zeros({4}), -1), ValueError);
  try {
    chunk(scalar_tensor(1.0), 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "chunk expects at least a 1-dimensional tensor");
  }
  EXPECT_THROW(chunk(zeros({4}), 2, 1), IndexError);
}

TEST(Split, SizesAndErrors) {
  Tensor t = arange(10, kFloat32);
  auto s = t.split(3);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[3].sizes(), (Shape{1}));
  EXPECT_EQ(s[3].storage_offset(), 9);
  EXPECT_EQ(t.split(20).size(), 1u);
  EXPECT_EQ(zeros({0}).split(0).size(), 1u);
  EXPECT_THROW(t.split(0), ValueError);
  EXPECT_THROW(t.split(-1), ValueError);
  auto w = t.split_with_sizes({0, 4, 0, 6});
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].numel(), 0);
  EXPECT_EQ(w[2].storage_offset(), 4);
  EXPECT_EQ(w[3].to_vector<float>(), (std::vector<float>{4, 5, 6, 7, 8, 9}));
  try {
    t.split_with_sizes({3, 3});
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sum exactly to 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 3]"), std::string::npos) << msg;
  }
  EXPECT_THROW(t.split_with_sizes({-1, 11}), ValueError);
}

// ---- errors of the view ops ----

TEST(ViewErrors, IncompatibleStridesAndSizes) {
  Tensor t = arange24().transpose(0, 1);  // [3, 2, 4] strides (4, 12, 1)
  try {
    t.view({3, 8});
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous "
                  "subspaces). Use .reshape(...) instead.",
                  0),
              0u)
        << e.what();
  }
  EXPECT_EQ(t.reshape({3, 8}).sizes(), (Shape{3, 8}));  // reshape copies instead
  try {
    arange24().view({5, 5});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("shape '[5, 5]' is invalid for input of size 24"), std::string::npos) << e.what();
  }
  EXPECT_THROW(arange24().view({-1, -1}), ValueError);
  EXPECT_THROW(arange24().view({-2, 12}), ValueError);
}

TEST(ViewErrors, SelectNarrowSliceMessages) {
  Tensor t = zeros({3, 4});
  try {
    t.select(0, 5);
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "select(): index 5 out of range for tensor of size [3, 4] at dimension 0");
  }
  EXPECT_THROW(t.select(1, -5), IndexError);
  EXPECT_EQ(t.select(1, -4).sizes(), (Shape{3}));
  EXPECT_THROW(t.select(2, 0), IndexError);
  EXPECT_THROW(scalar_tensor(1.0).select(0, 0), IndexError);
  EXPECT_THROW(t.narrow(1, 3, 2), IndexError);
  EXPECT_THROW(t.narrow(1, 5, 0), IndexError);
  EXPECT_THROW(t.narrow(1, 0, -1), ValueError);
  EXPECT_EQ(t.narrow(1, 4, 0).sizes(), (Shape{3, 0}));
  EXPECT_EQ(t.narrow(1, -4, 4).sizes(), (Shape{3, 4}));
  EXPECT_THROW(t.slice(1, 0, 4, 0), ValueError);
  EXPECT_THROW(t.slice(1, 0, 4, -1), ValueError);
  EXPECT_EQ(t.slice(1, 3, 1).sizes(), (Shape{3, 0}));
  EXPECT_EQ(t.slice(1, std::nullopt, -10).sizes(), (Shape{3, 0}));
  EXPECT_EQ(t.slice(0, 1, std::nullopt, 5).sizes(), (Shape{1, 4}));
}

TEST(ViewErrors, PermuteExpandSqueezeUnflatten) {
  Tensor t = zeros({2, 3});
  EXPECT_THROW(t.permute({0}), ShapeError);
  EXPECT_THROW(t.permute({0, 0}), ValueError);
  EXPECT_THROW(t.permute({0, 2}), IndexError);
  EXPECT_EQ(t.permute({-1, 0}).sizes(), (Shape{3, 2}));
  try {
    t.expand({2, 4});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("The expanded size of the tensor (4) must match the existing size (3) at non-singleton dimension 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(t.expand({3}), ShapeError);
  EXPECT_THROW(t.expand({-1, 2, 3}), ShapeError);
  EXPECT_EQ(t.expand({4, -1, -1}).sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(t.expand({4, -1, -1}).strides(), (Shape{0, 3, 1}));
  EXPECT_EQ(t.squeeze(1).sizes(), (Shape{2, 3}));
  EXPECT_THROW(t.squeeze(2), IndexError);
  EXPECT_THROW(t.unsqueeze(3), IndexError);
  EXPECT_EQ(t.unsqueeze(-3).sizes(), (Shape{1, 2, 3}));
  EXPECT_THROW(t.unflatten(1, {2, 2}), ShapeError);
  EXPECT_THROW(t.unflatten(1, {-1, 2}), ShapeError);
  EXPECT_EQ(t.unflatten(1, {-1, 1}).sizes(), (Shape{2, 3, 1}));
  EXPECT_THROW(t.flatten(1, 0), ValueError);
  EXPECT_THROW(t.as_strided({3, 3}, {3, 1}), ValueError);  // out of bounds of the 6-element storage
  EXPECT_THROW(t.as_strided({2}, {1, 1}), ShapeError);
  EXPECT_TRUE(t.flatten(1, 1).is_same(t));
}

// ---- cat / stack ----

TEST(Cat, NegativeDimsAndSkipping) {
  Tensor a = arange(6, kFloat32).view({2, 3}), b = arange(4, kFloat32).view({2, 2});
  Tensor c = cat({a, b}, -1);
  EXPECT_EQ(c.sizes(), (Shape{2, 5}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 1, 2, 0, 1, 3, 4, 5, 2, 3}));
  // Legacy rule: a 1-D [0] tensor is skipped whatever the others' shape.
  Tensor skipped = cat({zeros({0}), a, zeros({0})}, 1);
  EXPECT_EQ(skipped.sizes(), (Shape{2, 3}));
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes(), (Shape{0}));
  // A [2, 0] tensor is not skipped: it takes part (and must match).
  EXPECT_EQ(cat({a, zeros({2, 0})}, 1).sizes(), (Shape{2, 3}));
  EXPECT_THROW(cat({a, zeros({3, 0})}, 1), ShapeError);
  // The result is a fresh tensor.
  EXPECT_NE(cat({a}).storage().get(), a.storage().get());
}

TEST(Cat, Errors) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW(cat({}), ValueError);
  try {
    cat({a, zeros({2, 3}), zeros({3, 4})}, 0);
    FAIL();
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor number 2 in the list"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(cat({a, zeros({2, 3, 1})}), ShapeError);
  EXPECT_THROW(cat({a, scalar_tensor(1.0)}), ShapeError);
  EXPECT_THROW(cat({a, a}, 2), IndexError);
  if (cpu_device_count() >= 2) {
    EXPECT_THROW(cat({a, zeros({2, 3}, Device("cpu:1"))}), DeviceError);
    EXPECT_THROW(stack({a, zeros({2, 3}, Device("cpu:1"))}), DeviceError);
  }
  EXPECT_THROW(cat({a, zeros({2, 3}, Device("cpu:0"))}), DeviceError);
}

TEST(Stack, ShapesAndErrors) {
  Tensor a = arange(6, kFloat32).view({2, 3});
  EXPECT_EQ(stack({a, a, a}).sizes(), (Shape{3, 2, 3}));
  EXPECT_EQ(stack({a, a, a}, 1).sizes(), (Shape{2, 3, 3}));
  EXPECT_EQ(stack({a, a, a}, -1).sizes(), (Shape{2, 3, 3}));
  EXPECT_EQ(stack({a, a}, -3).sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(stack({a, a}, -1).to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}));
  EXPECT_THROW(stack({a, a}, 3), IndexError);
  EXPECT_THROW(stack({a, zeros({3, 2})}), ShapeError);
  EXPECT_THROW(stack({}), ValueError);
  EXPECT_EQ(stack({zeros({0, 2}), zeros({0, 2})}).sizes(), (Shape{2, 0, 2}));
}

TEST(Clone, ContiguousCopyPreservesValues) {
  Tensor base = arange24();
  Tensor v = base.permute({2, 0, 1});
  Tensor c = v.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), v.to_vector<float>());
  EXPECT_NE(c.storage().get(), base.storage().get());
  Tensor cc = base.contiguous();
  EXPECT_TRUE(cc.is_same(base));
  EXPECT_TRUE(contiguous(base).is_same(base));
  Tensor vc = contiguous(v);
  EXPECT_FALSE(vc.is_same(v));
  EXPECT_EQ(vc.strides(), (Shape{6, 3, 1}));
}

}  // namespace
}  // namespace dp
