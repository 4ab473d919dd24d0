// Packed sequences (dp/nn/utils/rnn.h): pack_padded_sequence, pack_sequence and pad_packed_sequence
// against PyTorch 1.13 (tests/golden/gen_rnn.py: data, batch_sizes, sorted/unsorted indices, the
// gradient w.r.t. the padded input, padding with total_length), PackedSequence itself, the error
// messages, and the PyTorch FAQ case: a module that packs inside forward and pads back with
// total_length, under DataParallel on cpu:0/cpu:1, against one device.
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>
#include "dp/nn/modules/rnn.h"
#include "dp/nn/utils/rnn.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "dp/parallel/data_parallel.h"
#include "support/devices.h"
#include "support/golden.h"

namespace dp {
namespace {

using nn::PackedSequence;
using nn::utils::rnn::pack_padded_sequence;
using nn::utils::rnn::pack_sequence;
using nn::utils::rnn::pad_packed_sequence;
using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

Tensor i64(std::vector<int64_t> v) { return tensor(v); }

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

std::string torch_message(const std::string& key) { return golden_case("rnn.json", "errors").at("messages").at(key).get<std::string>(); }

// ---------------------------------------------------------------- against PyTorch

void check_pack_case(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case("rnn.json", name);
  const std::vector<int64_t> lengths = c.at("lengths").get<std::vector<int64_t>>();
  const bool batch_first = c.at("batch_first").get<bool>(), enforce = c.at("enforce_sorted").get<bool>();
  for (bool as_tensor : {true, false}) {
    SCOPED_TRACE(as_tensor ? "lengths as a tensor" : "lengths as a vector");
    Tensor x = tensor_from_json(c.at("input"), true);
    PackedSequence p =
        as_tensor ? pack_padded_sequence(x, i64(lengths), batch_first, enforce) : pack_padded_sequence(x, lengths, batch_first, enforce);
    EXPECT_TRUE(all_close(p.data(), c.at("data"), 0, 0)) << "data";
    EXPECT_TRUE(equal(p.batch_sizes(), tensor_from_json(c.at("batch_sizes"))));
    EXPECT_EQ(p.batch_sizes().dtype(), kInt64);
    EXPECT_TRUE(p.batch_sizes().is_cpu());
    ASSERT_EQ(p.sorted_indices().defined(), c.contains("sorted_indices"));
    if (c.contains("sorted_indices")) {
      EXPECT_TRUE(equal(p.sorted_indices(), tensor_from_json(c.at("sorted_indices"))));
      EXPECT_TRUE(equal(p.unsorted_indices(), tensor_from_json(c.at("unsorted_indices"))));
    } else {
      EXPECT_FALSE(p.unsorted_indices().defined());
    }
    // Differentiable: the padded input's gradient is the packed rows' (zero at the padding).
    sum(mul(p.data(), tensor_from_json(c.at("r")))).backward();
    EXPECT_TRUE(all_close(x.grad(), c.at("grad_input"), 0, 0)) << "grad input";
    auto [padded, lens] = pad_packed_sequence(p, batch_first, c.at("padding_value").get<double>(), c.at("total_length").get<int64_t>());
    EXPECT_TRUE(all_close(padded, c.at("padded"), 0, 0)) << "padded";
    EXPECT_TRUE(equal(lens, tensor_from_json(c.at("padded_lengths"))));
    EXPECT_TRUE(lens.is_cpu());
  }
}

TEST(PackPadded, MatchesPyTorch) {
  check_pack_case("pack_unsorted");
  check_pack_case("pack_sorted_batch_first");
  check_pack_case("pack_unsorted_batch_first");
}

TEST(PackSequence, MatchesPyTorch) {
  {
    const json& c = golden_case("rnn.json", "pack_sequence_unsorted");
    std::vector<Tensor> seqs;
    for (const json& s : c.at("sequences")) seqs.push_back(tensor_from_json(s, true));
    PackedSequence p = pack_sequence(seqs, false);
    EXPECT_TRUE(all_close(p.data(), c.at("data"), 0, 0));
    EXPECT_TRUE(equal(p.batch_sizes(), tensor_from_json(c.at("batch_sizes"))));
    EXPECT_TRUE(equal(p.sorted_indices(), tensor_from_json(c.at("sorted_indices"))));
    EXPECT_TRUE(equal(p.unsorted_indices(), tensor_from_json(c.at("unsorted_indices"))));
    sum(mul(p.data(), tensor_from_json(c.at("r")))).backward();
    for (size_t i = 0; i < seqs.size(); ++i) EXPECT_TRUE(all_close(seqs[i].grad(), c.at("grads")[i], 0, 0)) << "grad of sequence " << i;
  }
  const json& c = golden_case("rnn.json", "pack_sequence_sorted_1d");
  std::vector<Tensor> seqs;
  for (const json& s : c.at("sequences")) seqs.push_back(tensor_from_json(s));
  PackedSequence p = pack_sequence(seqs);
  EXPECT_TRUE(all_close(p.data(), c.at("data"), 0, 0));
  EXPECT_TRUE(equal(p.batch_sizes(), tensor_from_json(c.at("batch_sizes"))));
  EXPECT_FALSE(p.sorted_indices().defined());
}

TEST(PackPadded, WorkedExampleAndRoundTrip) {
  // The notes' example: a = [a1, a2, a3], b = [b1], c = [c1, c2] (one feature, a_i = 10 + i, ...).
  Tensor x = tensor({11, 21, 31, 12, 0, 32, 13, 0, 0}, TensorOptions(kFloat32)).view({3, 3, 1});
  PackedSequence p = pack_padded_sequence(x, i64({3, 1, 2}), false, false);
  EXPECT_TRUE(equal(p.data().flatten(), tensor({11, 31, 21, 12, 32, 13}, TensorOptions(kFloat32))));
  EXPECT_TRUE(equal(p.batch_sizes(), i64({3, 2, 1})));
  EXPECT_TRUE(equal(p.sorted_indices(), i64({0, 2, 1})));
  EXPECT_TRUE(equal(p.unsorted_indices(), i64({0, 2, 1})));
  auto [back, lens] = pad_packed_sequence(p);
  EXPECT_TRUE(equal(back, x));
  EXPECT_TRUE(equal(lens, i64({3, 1, 2})));
  // Equal lengths keep their order (a stable sort; PyTorch's order of ties is unspecified).
  PackedSequence ties = pack_padded_sequence(randn({2, 4, 1}), i64({1, 2, 1, 2}), false, false);
  EXPECT_TRUE(equal(ties.sorted_indices(), i64({1, 3, 0, 2})));
}

TEST(PackPadded, DocsExample) {
  // docs/sequence-models.md, "Variable-length batches".
  namespace rnnu = dp::nn::utils::rnn;
  dp::Tensor padded = dp::randn({4, 6, 10});
  dp::Tensor lengths = dp::tensor(std::vector<int64_t>{3, 6, 1, 4});
  rnnu::PackedSequence packed = rnnu::pack_padded_sequence(padded, lengths, /*batch_first=*/true, /*enforce_sorted=*/false);
  dp::nn::GRU gru(dp::nn::GRUOptions(10, 20).num_layers(2).bidirectional(true).batch_first(true));
  auto [out, h_n] = gru(packed);
  auto [y, out_lengths] = rnnu::pad_packed_sequence(out, /*batch_first=*/true);
  EXPECT_EQ(y.sizes(), Shape({4, 6, 40}));
  EXPECT_EQ(h_n.sizes(), Shape({4, 4, 20}));
  EXPECT_TRUE(equal(out_lengths, lengths));
  // Padding positions are zeros; each sequence's last forward output is its forward h_n (layer 1).
  EXPECT_EQ(max(abs(y.select(0, 2).narrow(0, 1, 5))).item<double>(), 0.0);
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t last = lengths[b].item<int64_t>() - 1;
    EXPECT_TRUE(equal(y.select(0, b).select(0, last).narrow(0, 0, 20), h_n.select(0, 2).select(0, b))) << b;
    EXPECT_TRUE(equal(y.select(0, b).select(0, 0).narrow(0, 20, 20), h_n.select(0, 3).select(0, b))) << b;  // reverse: ends at step 0
  }
}

// ---------------------------------------------------------------- PackedSequence

TEST(PackedSequenceType, ConstructionAndTo) {
  Tensor data = randn({6, 2});
  PackedSequence p(data, i64({3, 2, 1}), i64({2, 0, 1}));
  EXPECT_TRUE(p.data().is_same(data));
  EXPECT_TRUE(equal(p.unsorted_indices(), i64({1, 2, 0})));  // the inverse, computed
  EXPECT_FALSE(p.is_cuda());
  PackedSequence q = p.to(kFloat64);
  EXPECT_EQ(q.data().dtype(), kFloat64);
  EXPECT_EQ(q.sorted_indices().dtype(), kInt64);
  set_cpu_device_count(std::max(cpu_device_count(), 2));
  PackedSequence r = p.to(Device::cpu(1));
  EXPECT_EQ(r.data().device(), Device::cpu(1));
  EXPECT_EQ(r.sorted_indices().device(), Device::cpu(1));
  EXPECT_EQ(r.batch_sizes().device(), Device::cpu());  // stays on the host, as in PyTorch
  // Differentiable move.
  Tensor leaf = randn({3, 2}).set_requires_grad(true);
  sum(PackedSequence(leaf, i64({2, 1})).to(Device::cpu(1)).data()).backward();
  EXPECT_TRUE(equal(leaf.grad(), ones({3, 2})));
}

// ---------------------------------------------------------------- errors

TEST(PackErrors, AsPyTorchWordsThem) {
  Tensor x = zeros({3, 3, 1});
  expect_error<ValueError>([&] { pack_padded_sequence(x, i64({3, 1, 2})); }, torch_message("unsorted"));
  expect_error<ValueError>([&] { pack_padded_sequence(x, i64({3, 1, 2})); }, "You can pass `enforce_sorted=False`");
  expect_error<ShapeError>([&] { pack_padded_sequence(x, i64({3, 1})); }, torch_message("lengths_count"));
  expect_error<ValueError>([&] { pack_padded_sequence(x, i64({3, 0, 1}), false, false); }, torch_message("zero_length"));
  expect_error<ValueError>([&] { pack_padded_sequence(x, i64({3, -2, 1}), false, false); }, torch_message("zero_length"));
  expect_error<ValueError>([&] { pack_sequence({zeros({2, 1}), zeros({0, 1})}); }, torch_message("zero_length"));
  // (PyTorch says "2D cpu Long tensor"; the dtype is named as dparallel names it.)
  expect_error<ShapeError>(
      [&] {
        pack_padded_sequence(x, tensor(std::vector<int64_t>{3, 1, 1}, {1, 3}));
      },
      "'lengths' argument should be a 1D CPU int64 tensor, but got");
  expect_error<DTypeError>([&] { pack_padded_sequence(x, tensor({3, 2, 1})); }, "'lengths' argument should be a 1D CPU int64 tensor");
  auto p = pack_padded_sequence(zeros({3, 2, 1}), i64({3, 2}));
  expect_error<ValueError>([&] { pad_packed_sequence(p, false, 0.0, 2); }, torch_message("total_length"));
  expect_error<ValueError>([&] { pack_sequence({zeros({2, 1}), zeros({3, 1})}); }, "sorted in decreasing order");
}

TEST(PackErrors, BeyondPyTorchs) {
  // PyTorch 1.13 accepts a length past the input's end and reads outside it; here it is an error.
  expect_error<ValueError>(
      [] {
        pack_padded_sequence(zeros({2, 3, 1}), i64({3, 2, 1}));
      },
      "pack_padded_sequence: lengths[0] = 3 is longer than the input's 2 steps (input [2, 3, 1]: [T, B, *])");
  expect_error<ValueError>(
      [] {
        pack_padded_sequence(zeros({2, 2, 1}), std::vector<int64_t>{3, 2}, true);
      },
      "lengths[0] = 3 is longer than the input's 2 steps (input [2, 2, 1], batch_first: [B, T, *])");
  expect_error<ShapeError>([] { pack_padded_sequence(zeros({3}), i64({3})); },
                           "pack_padded_sequence: expected input of shape [T, B, *] (at least 2-D)");
  expect_error<ValueError>([] { pack_padded_sequence(zeros({0, 2, 1}), i64({1, 1})); }, "Cannot pack empty tensors");
  expect_error<ShapeError>([] { pack_sequence({zeros({2, 1}), zeros({1, 2})}); }, "pack_sequence: every sequence must have the trailing shape");
  expect_error<DTypeError>([] { pack_sequence({zeros({2, 1}), zeros({1, 1}, kFloat64)}); }, "pack_sequence: every sequence must have the dtype");
  expect_error<ValueError>([] { pack_sequence({}); }, "pack_sequence: received an empty list of sequences");
  expect_error<ValueError>([] { PackedSequence(zeros({3, 1}), i64({2, 1}).to(kFloat32)); }, "PackedSequence: batch_sizes must be a 1-D int64 tensor");
  set_cpu_device_count(std::max(cpu_device_count(), 2));
  // A CPU device's tensor (cpu:1) is host memory: accepted, as a DataParallel replica's slice is.
  EXPECT_NO_THROW(pack_padded_sequence(zeros({3, 2, 1}), i64({3, 2}).to(Device::cpu(1))));
  expect_error<ValueError>([] { pad_packed_sequence(PackedSequence()); }, "pad_packed_sequence: the PackedSequence is empty");
}

// ---------------------------------------------------------------- DataParallel (the PyTorch FAQ case)

// Packs inside forward and pads back to the input's full length: every replica then returns
// [B_i, T, H] with the same T, so the gather can concatenate them.
template <typename Rnn>
struct PackPadModel : nn::Module {
  Rnn rnn{nullptr};
  bool use_total_length = true;
  explicit PackPadModel(Rnn r) { rnn = register_module("rnn", r); }
  Tensor forward(const Tensor& padded, const Tensor& lengths) {
    const int64_t total_length = padded.size(1);  // batch_first: [B, T, I]
    PackedSequence packed = pack_padded_sequence(padded, lengths, /*batch_first=*/true, /*enforce_sorted=*/false);
    auto result = rnn(packed);
    const PackedSequence& out = std::get<0>(result);
    std::optional<int64_t> total;
    if (use_total_length) total = total_length;
    return std::get<0>(pad_packed_sequence(out, /*batch_first=*/true, 0.0, total));
  }
};

class PackedDataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(std::max(cpu_device_count(), 2)); }
};

template <typename Rnn>
void check_data_parallel(Rnn rnn) {
  manual_seed(41);
  auto model = std::make_shared<PackPadModel<Rnn>>(rnn);
  model->to(kFloat64);
  auto reference = nn::clone(model);
  model->to(Device::cpu(0));
  nn::DataParallel<PackPadModel<Rnn>> net(model, test::cpu_devices(2), Device::cpu());
  // Replica 0 gets rows 0-2 (longest 3 steps), replica 1 rows 3-5 (longest 7).
  Tensor x = randn({6, 7, 3}, kFloat64);
  Tensor lengths = i64({3, 2, 1, 7, 5, 6});
  Tensor x_dp = x.detach().set_requires_grad(true), x_ref = x.detach().set_requires_grad(true);
  Tensor y = net(x_dp, lengths);
  Tensor y_ref = reference->forward(x_ref, lengths);
  ASSERT_EQ(y.sizes(), Shape({6, 7, 10}));
  EXPECT_TRUE(all_close(y, y_ref, 1e-12, 1e-12));
  Tensor w = randn(y.sizes(), kFloat64);
  sum(mul(y, w)).backward();
  sum(mul(y_ref, w)).backward();
  EXPECT_TRUE(all_close(x_dp.grad(), x_ref.grad(), 1e-12, 1e-12)) << "grad input";
  auto got = model->named_parameters();
  auto want = reference->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].value().grad().defined()) << got[i].key();
    EXPECT_TRUE(all_close(got[i].value().grad().cpu(), want[i].value().grad(), 1e-12, 1e-12)) << got[i].key();
  }
  // Without total_length the replicas pad to 3 and 7 steps: the gather cannot concatenate them.
  model->use_total_length = false;
  net->invalidate_replicas();
  EXPECT_THROW(net(x_dp, lengths), Error);
}

TEST_F(PackedDataParallel, GRUPackInsideForwardMatchesOneDevice) {
  check_data_parallel(nn::GRU(nn::GRUOptions(3, 5).num_layers(2).bidirectional(true).batch_first(true)));
}

TEST_F(PackedDataParallel, LSTMPackInsideForwardMatchesOneDevice) {
  check_data_parallel(nn::LSTM(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true).batch_first(true)));
}

}  // namespace
}  // namespace dp
