// DistributedDataParallel against the single-process run of the concatenated batch: gradients
// after every step (MLP, CNN, Embedding, BatchNorm; 2 and 3 ranks; equal and ragged shares; plain
// forward and forward_loss), parameters bitwise identical across ranks after 50 SGD and Adam
// steps, unused parameters on some or all ranks, no_sync / accumulate, comm hooks, the hybrid
// with DataParallel inside each rank, and the model check. Ranks are threads (ddp_test_support.h).
#include <gtest/gtest.h>
#include <cstring>
#include <functional>
#include <mutex>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
#include "support/test_models.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"

namespace dp::distributed {
namespace {

using dp::test::Branchy;
using test::run_ranks;

using dp::test::Cnn;
using dp::test::EmbeddingModel;
using dp::test::Mlp;

struct BatchNormModel : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::BatchNorm1d bn{nullptr};
  BatchNormModel() {
    fc1 = register_module("fc1", nn::Linear(8, 12));
    bn = register_module("bn", nn::BatchNorm1d(12));
    fc2 = register_module("fc2", nn::Linear(12, 4));
  }
  Tensor forward(const Tensor& x) { return fc2(bn(fc1(x)).relu()); }
};

enum class Opt { Sgd, Adam };
std::unique_ptr<optim::Optimizer> make_optimizer(Opt opt, std::vector<Tensor> params) {
  if (opt == Opt::Sgd) return std::make_unique<optim::SGD>(params, optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<optim::Adam>(params, optim::AdamOptions(0.01));
}

template <typename M>
std::shared_ptr<M> make_model(uint64_t seed, DType dtype) {
  manual_seed(seed);
  auto m = std::make_shared<M>();
  m->template remember_type<M>();
  m->to(dtype);
  return m;
}

// One model per rank, made on the calling thread (the default generator is not for concurrent
// use): rank 0's from seed 42, the others from other seeds, since DDP must copy rank 0's.
template <typename M>
std::vector<std::shared_ptr<M>> rank_models(int world, DType dtype = kFloat32) {
  std::vector<std::shared_ptr<M>> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model<M>(r == 0 ? 42 : 1000 + r, dtype));
  return models;
}

// Row offsets of each rank's share.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& rows) {
  std::vector<int64_t> off{0};
  for (int64_t r : rows) off.push_back(off.back() + r);
  return off;
}

std::vector<Tensor> grads_of(nn::Module& m) {
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return g;
}
std::vector<Tensor> values_of(nn::Module& m) {
  std::vector<Tensor> v;
  for (const Tensor& p : m.parameters()) v.push_back(p.detach().clone());
  for (const Tensor& b : m.buffers()) v.push_back(b.detach().clone());
  return v;
}
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

struct Run {
  std::vector<int64_t> rows;  // per rank
  Opt opt = Opt::Sgd;
  int steps = 3;
  DType dtype = kFloat32;
  double rtol = 1e-5;
  double atol = 1e-6;
  bool forward_loss = true;  // else a plain forward and cross_entropy per rank (mean over ranks)
  bool compare_every_step = true;
};

// The reference: one process, the concatenated batch; per step its loss, gradients and the
// parameters after the step. Then DDP on rows.size() ranks, rank r holding rows [off_r, off_r+1).
template <typename M>
void check_equivalence(const std::function<Tensor(int64_t)>& input, const Run& run) {
  const int world = static_cast<int>(run.rows.size());
  const std::vector<int64_t> off = offsets_of(run.rows);
  const int64_t total = off.back();
  SCOPED_TRACE(::testing::Message() << world << " ranks, " << total << " rows, " << dtype_name(run.dtype)
                                    << (run.opt == Opt::Sgd ? ", SGD" : ", Adam") << (run.forward_loss ? ", forward_loss" : ", forward"));
  manual_seed(7);
  std::vector<Tensor> xs, ts;
  for (int s = 0; s < run.steps; ++s) {
    Tensor x = input(total);
    if (is_floating_point(x.dtype())) x = x.to(run.dtype);
    xs.push_back(x);
    ts.push_back(randint(0, 4, {total}));
  }
  auto reference = make_model<M>(42, run.dtype);
  // Every rank starts from other weights: DDP must copy rank 0's.
  std::vector<std::shared_ptr<M>> models = rank_models<M>(world, run.dtype);

  std::vector<Tensor> ref_loss;
  std::vector<std::vector<Tensor>> ref_grads, ref_values;
  auto ref_opt = make_optimizer(run.opt, reference->parameters());
  for (int s = 0; s < run.steps; ++s) {
    ref_opt->zero_grad();
    Tensor loss = cross_entropy(reference->forward(xs[s]), ts[s]);
    loss.backward();
    ref_loss.push_back(loss.detach().clone());
    ref_grads.push_back(grads_of(*reference));
    ref_opt->step();
    ref_values.push_back(values_of(*reference));
  }

  std::vector<std::vector<Tensor>> final_values(world);
  run_ranks(world, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<M> ddp(models[r], group);
    auto opt = make_optimizer(run.opt, ddp->parameters());
    for (int s = 0; s < run.steps; ++s) {
      Tensor x = xs[s].narrow(0, off[r], run.rows[r]);
      Tensor t = ts[s].narrow(0, off[r], run.rows[r]);
      opt->zero_grad();
      Tensor loss = run.forward_loss ? ddp->forward_loss(nn::CrossEntropyLoss(), t, x) : cross_entropy(ddp(x), t);
      loss.backward();
      EXPECT_TRUE(ddp->last_backward_synced());
      if (run.compare_every_step || s == 0) {
        if (run.forward_loss) {
          EXPECT_TRUE(allclose(loss, ref_loss[s], run.rtol, run.atol)) << "rank " << r << " step " << s << " loss";
        }
        const auto params = ddp->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          ASSERT_TRUE(params[i].grad().defined()) << "rank " << r << " step " << s << " param " << i;
          EXPECT_TRUE(allclose(params[i].grad(), ref_grads[s][i], run.rtol, run.atol))
              << "rank " << r << " step " << s << ": gradient of parameter " << i << " differs";
        }
      }
      opt->step();
    }
    final_values[r] = values_of(*ddp);
  });
  ASSERT_EQ(final_values[0].size(), ref_values.back().size());
  for (size_t i = 0; i < final_values[0].size(); ++i) {
    for (int r = 1; r < world; ++r) EXPECT_TRUE(bitwise_equal(final_values[r][i], final_values[0][i])) << "rank " << r << " tensor " << i;
    if (run.compare_every_step) {
      EXPECT_TRUE(allclose(final_values[0][i], ref_values.back()[i], run.rtol * 10, run.atol * 10)) << "tensor " << i << " vs reference";
    }
  }
}

Tensor mlp_input(int64_t b) { return randn({b, 8}); }
Tensor cnn_input(int64_t b) { return randn({b, 1, 8, 8}); }
Tensor tokens(int64_t b) { return randint(0, 50, {b, 3}); }

TEST(DDPEquivalence, MlpTwoRanksRagged) {
  check_equivalence<Mlp>(mlp_input, {.rows = {7, 4}, .opt = Opt::Sgd});
  check_equivalence<Mlp>(mlp_input, {.rows = {7, 4}, .opt = Opt::Adam});
}
TEST(DDPEquivalence, MlpThreeRanksRagged) {
  check_equivalence<Mlp>(mlp_input, {.rows = {5, 5, 2}, .opt = Opt::Sgd});
  check_equivalence<Mlp>(mlp_input, {.rows = {1, 6, 3}, .opt = Opt::Adam});
}
TEST(DDPEquivalence, MlpPlainForwardAveragesEqualShares) {
  check_equivalence<Mlp>(mlp_input, {.rows = {4, 4}, .forward_loss = false});
  check_equivalence<Mlp>(mlp_input, {.rows = {3, 3, 3}, .opt = Opt::Adam, .forward_loss = false});
}
TEST(DDPEquivalence, MlpFloat64) {
  check_equivalence<Mlp>(mlp_input, {.rows = {6, 3}, .dtype = kFloat64, .rtol = 1e-6, .atol = 1e-12});
  check_equivalence<Mlp>(mlp_input, {.rows = {2, 3, 4}, .opt = Opt::Adam, .dtype = kFloat64, .rtol = 1e-6, .atol = 1e-12});
}
TEST(DDPEquivalence, Cnn) {
  check_equivalence<Cnn>(cnn_input, {.rows = {5, 3}});
  check_equivalence<Cnn>(cnn_input, {.rows = {3, 3, 2}, .opt = Opt::Adam});
}
TEST(DDPEquivalence, Embedding) {
  check_equivalence<EmbeddingModel>(tokens, {.rows = {6, 5}});
  check_equivalence<EmbeddingModel>(tokens, {.rows = {4, 4, 1}, .opt = Opt::Adam});
}
// 50 steps: every rank ends on bitwise the same weights (and close to the single process).
TEST(DDPEquivalence, FiftyStepsBitwiseIdenticalAcrossRanks) {
  check_equivalence<Mlp>(mlp_input, {.rows = {6, 4}, .opt = Opt::Sgd, .steps = 50, .compare_every_step = false});
  check_equivalence<Mlp>(mlp_input, {.rows = {3, 4, 5}, .opt = Opt::Adam, .steps = 50, .compare_every_step = false});
}

// BatchNorm: each rank normalises with its own rows' statistics (as PyTorch's DDP without
// SyncBatchNorm), so the reference runs each rank's rows through the model separately; the
// running statistics come from rank 0 before every forward.
void check_batch_norm(const std::vector<int64_t>& rows) {
  const int world = static_cast<int>(rows.size());
  const std::vector<int64_t> off = offsets_of(rows);
  const int64_t total = off.back();
  SCOPED_TRACE(::testing::Message() << world << " ranks");
  manual_seed(3);
  Tensor x = randn({total, 8}), t = randint(0, 4, {total});
  auto reference = make_model<BatchNormModel>(42, kFloat32);
  Tensor ref_sum = Tensor();
  for (int r = 0; r < world; ++r) {
    Tensor part = cross_entropy(reference->forward(x.narrow(0, off[r], rows[r])), t.narrow(0, off[r], rows[r]), {}, -100, Reduction::Sum);
    ref_sum = ref_sum.defined() ? ref_sum + part : part;
  }
  (ref_sum / static_cast<double>(total)).backward();
  std::vector<Tensor> ref_grads = grads_of(*reference);
  std::vector<std::vector<Tensor>> buffers_after_eval(world);
  std::vector<Tensor> eval_out(world);
  auto models = rank_models<BatchNormModel>(world);
  run_ranks(world, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<BatchNormModel> ddp(models[r], group);
    Tensor loss = ddp->forward_loss(nn::CrossEntropyLoss(), t.narrow(0, off[r], rows[r]), x.narrow(0, off[r], rows[r]));
    loss.backward();
    const auto params = ddp->parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad(), ref_grads[i], 1e-5, 1e-6)) << "rank " << r << " param " << i;
    // Each rank's running statistics now hold its own rows'; the next forward starts from rank 0's.
    ddp->eval();
    NoGradGuard no_grad;
    eval_out[r] = ddp(x).clone();
    // Evaluation runs no collective per batch: rank 0 evaluating more batches does not hang.
    if (r == 0) ddp(x);
    for (const Tensor& b : ddp->buffers()) buffers_after_eval[r].push_back(b.clone());
  });
  ASSERT_EQ(buffers_after_eval[0].size(), 3u);  // running_mean, running_var, num_batches_tracked
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(buffers_after_eval[0][i], buffers_after_eval[r][i])) << "rank " << r << " buffer " << i;
    EXPECT_TRUE(bitwise_equal(eval_out[0], eval_out[r])) << "rank " << r;
  }
}

TEST(DDPEquivalence, BatchNormPerRankStatisticsAndRankZerosBuffers) {
  check_batch_norm({5, 3});
  check_batch_norm({3, 3, 2});
}

// Rank 0 never uses `b`, rank 1 does; nobody uses `never`. b's gradient on rank 0 is rank 1's
// share; never's stays undefined on both, as in PyTorch.
TEST(DDPUnused, ParametersUnusedOnSomeOrAllRanks) {
  manual_seed(5);
  Tensor x = randn({6, 8}), t = randint(0, 4, {6});
  const std::vector<int64_t> off{0, 2, 6};
  auto reference = make_model<Branchy>(42, kFloat32);
  Tensor out0 = reference->forward(x.narrow(0, 0, 2), false);
  Tensor out1 = reference->forward(x.narrow(0, 2, 4), true);
  ((cross_entropy(out0, t.narrow(0, 0, 2), {}, -100, Reduction::Sum) + cross_entropy(out1, t.narrow(0, 2, 4), {}, -100, Reduction::Sum)) / 6.0)
      .backward();
  std::vector<std::shared_ptr<Branchy>> models{make_model<Branchy>(42, kFloat32), make_model<Branchy>(43, kFloat32)};
  for (int pass = 0; pass < 2; ++pass) {  // twice: the second pass starts from the first one's views
    run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
      nn::DistributedDataParallel<Branchy> ddp(models[r], group);
      for (int step = 0; step < 2; ++step) {
        ddp->zero_grad();
        Tensor loss =
            ddp->forward_loss(nn::CrossEntropyLoss(), t.narrow(0, off[r], off[r + 1] - off[r]), x.narrow(0, off[r], off[r + 1] - off[r]), r == 1);
        loss.backward();
        Branchy& m = *ddp->module();
        EXPECT_TRUE(allclose(m.a->weight.grad(), reference->a->weight.grad(), 1e-5, 1e-6)) << "rank " << r;
        ASSERT_TRUE(m.b->weight.grad().defined()) << "rank " << r << ": b is used on rank 1, so it has a gradient everywhere";
        EXPECT_TRUE(allclose(m.b->weight.grad(), reference->b->weight.grad(), 1e-5, 1e-6)) << "rank " << r;
        EXPECT_TRUE(allclose(m.b->bias.grad(), reference->b->bias.grad(), 1e-5, 1e-6)) << "rank " << r;
        EXPECT_FALSE(m.never->weight.grad().defined()) << "rank " << r << ": unused on every rank keeps an undefined .grad";
        EXPECT_FALSE(m.never->bias.grad().defined());
      }
    });
  }
  // Unused on every rank: b too stays undefined; a still reduces.
  auto fresh = rank_models<Branchy>(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<Branchy> ddp(fresh[r], group);
    Tensor loss = cross_entropy(ddp(x.narrow(0, r * 3, 3), false), t.narrow(0, r * 3, 3));
    loss.backward();
    EXPECT_TRUE(ddp->module()->a->weight.grad().defined());
    EXPECT_FALSE(ddp->module()->b->weight.grad().defined());
    EXPECT_FALSE(ddp->module()->never->weight.grad().defined());
  });
}

// A rank whose output does not depend on any parameter (its batch takes a path around the model)
// still takes part: the hook on the model's output runs the end-of-pass reduction, so there is no
// hang, and the other rank's gradient is averaged with zeros.
struct MaybeBypass : nn::Module {
  nn::Linear fc{nullptr};
  MaybeBypass() { fc = register_module("fc", nn::Linear(8, 4)); }
  Tensor forward(const Tensor& x, bool bypass) { return bypass ? x.narrow(1, 0, 4) * 2.0 : fc(x); }
};

TEST(DDPUnused, RankWhoseOutputBypassesEveryParameterDoesNotHang) {
  manual_seed(6);
  Tensor x = randn({4, 8});
  auto reference = make_model<MaybeBypass>(42, kFloat32);
  reference->forward(x, false).sum().backward();
  const Tensor ref = reference->fc->weight.grad() / 2.0;
  std::vector<Tensor> grads(2);
  auto models = rank_models<MaybeBypass>(2);
  run_ranks(
      2,
      [&](const ProcessGroupPtr& group, int r) {
        nn::DistributedDataParallel<MaybeBypass> ddp(models[r], group);
        Tensor input = x.clone().requires_grad_(r == 1);
        ddp(input, r == 1).sum().backward();
        EXPECT_TRUE(ddp->last_backward_synced()) << "rank " << r;
        grads[r] = ddp->module()->fc->weight.grad();
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(grads[0].defined() && grads[1].defined());
  EXPECT_TRUE(bitwise_equal(grads[0], grads[1]));
  EXPECT_TRUE(allclose(grads[0], ref, 1e-6, 1e-7));
}

// Three micro-batches, the first two without synchronisation (a guard around forward+backward,
// then one around backward alone): the result equals the sum of the three full-batch gradients.
TEST(DDPAccumulation, NoSyncGuardEitherPlacement) {
  manual_seed(8);
  std::vector<Tensor> xs, ts;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(randn({6, 8}));
    ts.push_back(randint(0, 4, {6}));
  }
  auto reference = make_model<Mlp>(42, kFloat32);
  for (int i = 0; i < 3; ++i) cross_entropy(reference->forward(xs[i]), ts[i]).backward();
  std::vector<Tensor> ref = grads_of(*reference);
  // forward_loss (summed over ranks) and a plain forward (averaged; equal shares, so the same).
  for (bool use_loss : {true, false}) {
    auto models = rank_models<Mlp>(2);
    run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
      nn::DistributedDataParallel<Mlp> ddp(models[r], group);
      auto loss_of = [&](int i) {
        Tensor x = xs[i].narrow(0, r * 3, 3), t = ts[i].narrow(0, r * 3, 3);
        return use_loss ? ddp->forward_loss(nn::CrossEntropyLoss(), t, x) : cross_entropy(ddp(x), t);
      };
      {
        auto guard = ddp->no_sync();
        EXPECT_FALSE(ddp->will_sync());
        loss_of(0).backward();
      }
      EXPECT_FALSE(ddp->last_backward_synced());
      Tensor loss1 = loss_of(1);
      {
        auto guard = ddp->no_sync();
        loss1.backward();
      }
      EXPECT_FALSE(ddp->last_backward_synced());
      EXPECT_TRUE(ddp->will_sync());
      loss_of(2).backward();
      EXPECT_TRUE(ddp->last_backward_synced());
      const auto params = ddp->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(allclose(params[i].grad(), ref[i], 1e-5, 1e-6)) << "rank " << r << " param " << i << " forward_loss " << use_loss;
    });
  }
}

TEST(DDPAccumulation, AccumulateEveryK) {
  manual_seed(9);
  std::vector<Tensor> xs, ts;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(randn({4, 8}));
    ts.push_back(randint(0, 4, {4}));
  }
  auto reference = make_model<Mlp>(42, kFloat32);
  auto ref_opt = make_optimizer(Opt::Sgd, reference->parameters());
  for (int i = 0; i < 6; ++i) {
    cross_entropy(reference->forward(xs[i]), ts[i]).backward();
    if (i % 3 == 2) {
      ref_opt->step();
      ref_opt->zero_grad();
    }
  }
  std::vector<std::vector<Tensor>> finals(2);
  auto models = rank_models<Mlp>(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<Mlp> ddp(models[r], group);
    ddp->accumulate(3);
    auto opt = make_optimizer(Opt::Sgd, ddp->parameters());
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(ddp->will_sync(), i % 3 == 2) << "micro-step " << i;
      ddp->forward_loss(nn::CrossEntropyLoss(), ts[i].narrow(0, r * 2, 2), xs[i].narrow(0, r * 2, 2)).backward();
      EXPECT_EQ(ddp->last_backward_synced(), i % 3 == 2) << "micro-step " << i;
      if (ddp->last_backward_synced()) {
        opt->step();
        opt->zero_grad();
      }
    }
    finals[r] = values_of(*ddp);
  });
  const auto ref = values_of(*reference);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(finals[0][i], finals[1][i])) << "tensor " << i;
    EXPECT_TRUE(allclose(finals[0][i], ref[i], 1e-5, 1e-6)) << "tensor " << i;
  }
  EXPECT_THROW(nn::DistributedDataParallel<Mlp>(make_model<Mlp>(1, kFloat32), nullptr), ValueError);
}

// One rank: nothing to reduce (no hooks, buffers or collectives), the gradients are the plain
// module's, and accumulate(k) still says when to step.
TEST(DDPAccumulation, OneRankIsThePlainModule) {
  manual_seed(13);
  Tensor x = randn({5, 8}), t = randint(0, 4, {5});
  auto reference = make_model<Mlp>(42, kFloat32);
  cross_entropy(reference->forward(x), t).backward();
  const auto ref = grads_of(*reference);
  auto models = rank_models<Mlp>(1);
  run_ranks(1, [&](const ProcessGroupPtr& group, int) {
    nn::DistributedDataParallel<Mlp> ddp(models[0], group);
    ddp->accumulate(2);
    for (int micro = 0; micro < 4; ++micro) {
      EXPECT_EQ(ddp->will_sync(), micro % 2 == 1);
      ddp->zero_grad();
      (micro % 2 ? ddp->forward_loss(nn::CrossEntropyLoss(), t, x) : cross_entropy(ddp(x), t)).backward();
      EXPECT_EQ(ddp->last_backward_synced(), micro % 2 == 1);
      const auto params = ddp->parameters();
      for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad(), ref[i], 1e-6, 1e-7)) << "micro " << micro << " param " << i;
    }
    EXPECT_EQ(ddp->reducer_stats().bytes, 0);
  });
}

// Buckets: reverse registration order; with a tiny cap one parameter per bucket; .grad tensors
// are views into the bucket buffers (the same storage within a bucket).
TEST(DDPBuckets, ReverseOrderAndGradientsAsViews) {
  manual_seed(10);
  Tensor x = randn({4, 8}), t = randint(0, 4, {4});
  auto reference = make_model<Mlp>(42, kFloat32);
  cross_entropy(reference->forward(x), t).backward();
  const auto ref = grads_of(*reference);
  auto first = rank_models<Mlp>(2), second = rank_models<Mlp>(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    {
      nn::DistributedDataParallel<Mlp> ddp(first[r], group);
      auto buckets = ddp->bucket_indices();
      ASSERT_EQ(buckets.size(), 1u);  // 6 small parameters: all in the 1 MiB first bucket
      EXPECT_EQ(buckets[0], (std::vector<size_t>{5, 4, 3, 2, 1, 0}));
      ddp->forward_loss(nn::CrossEntropyLoss(), t.narrow(0, r * 2, 2), x.narrow(0, r * 2, 2)).backward();
      const auto params = ddp->parameters();
      for (const Tensor& p : params) EXPECT_EQ(p.grad().storage().get(), params[0].grad().storage().get());
      const ReducerStats stats = ddp->reducer_stats();
      EXPECT_EQ(stats.buckets, 1);
      EXPECT_GT(stats.bytes, 0);
    }
    DistributedDataParallelOptions tiny;
    tiny.first_bucket_mb = tiny.bucket_cap_mb = 1e-6;
    nn::DistributedDataParallel<Mlp> ddp(second[r], group, tiny);
    auto buckets = ddp->bucket_indices();
    ASSERT_EQ(buckets.size(), 6u);
    for (size_t b = 0; b < 6; ++b) EXPECT_EQ(buckets[b], (std::vector<size_t>{5 - b}));
    // zero_grad() (set to none: gradients copied into the buckets) and zero_grad(false)
    // (accumulated in place in the views), with forward_loss (summed over ranks) and a plain
    // forward (averaged: in the copy, or at launch for in-place gradients).
    for (bool set_to_none : {true, false, true, false}) {
      for (bool use_loss : {true, false}) {
        ddp->zero_grad(set_to_none);
        Tensor xr = x.narrow(0, r * 2, 2), tr = t.narrow(0, r * 2, 2);
        (use_loss ? ddp->forward_loss(nn::CrossEntropyLoss(), tr, xr) : cross_entropy(ddp(xr), tr)).backward();
        const auto params = ddp->parameters();
        for (size_t i = 0; i < params.size(); ++i)
          EXPECT_TRUE(allclose(params[i].grad(), ref[i], 1e-5, 1e-6)) << "param " << i << " set_to_none " << set_to_none << " loss " << use_loss;
      }
    }
  });
}

TEST(DDPCommHooks, Fp16AndBf16CompressionCloseToExact) {
  manual_seed(11);
  Tensor x = randn({8, 8}), t = randint(0, 4, {8});
  auto reference = make_model<Mlp>(42, kFloat32);
  cross_entropy(reference->forward(x), t).backward();
  const auto ref = grads_of(*reference);
  for (auto [hook, tol] :
       {std::pair{comm_hooks::fp16_compress(), 2e-3}, std::pair{comm_hooks::bf16_compress(), 2e-2}, std::pair{comm_hooks::allreduce(), 1e-5}}) {
    auto models = rank_models<Mlp>(2);
    run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
      nn::DistributedDataParallel<Mlp> ddp(models[r], group);
      ddp->register_comm_hook(hook);
      EXPECT_THROW(ddp->register_comm_hook(hook), ValueError);
      // Plain forward (the hook averages) and forward_loss (the hook sums) both come out right.
      for (bool use_loss : {false, true}) {
        ddp->zero_grad();
        Tensor xr = x.narrow(0, r * 4, 4), tr = t.narrow(0, r * 4, 4);
        (use_loss ? ddp->forward_loss(nn::CrossEntropyLoss(), tr, xr) : cross_entropy(ddp(xr), tr)).backward();
        const auto params = ddp->parameters();
        for (size_t i = 0; i < params.size(); ++i)
          EXPECT_TRUE(allclose(params[i].grad(), ref[i], tol, tol * 1e-2)) << "rank " << r << " param " << i << " tol " << tol;
      }
    });
  }
}

// N processes x M cores: each rank runs DataParallel over its own two CPU devices.
TEST(DDPHybrid, DataParallelInsideEachRank) {
  set_cpu_device_count(4);
  manual_seed(12);
  Tensor x = randn({10, 8}), t = randint(0, 4, {10});
  auto reference = make_model<Mlp>(42, kFloat32);
  auto ref_opt = make_optimizer(Opt::Adam, reference->parameters());
  std::vector<std::vector<Tensor>> ref_grads;
  for (int step = 0; step < 3; ++step) {
    ref_opt->zero_grad();
    cross_entropy(reference->forward(x), t).backward();
    ref_grads.push_back(grads_of(*reference));
    ref_opt->step();
  }
  const std::vector<int64_t> off{0, 7, 10};
  auto models = rank_models<Mlp>(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    auto model = models[r];
    model->to(Device::cpu(2 * r));
    nn::DataParallel<Mlp> local(model, {Device::cpu(2 * r), Device::cpu(2 * r + 1)});
    nn::DistributedDataParallel ddp(local, group);  // DistributedDataParallel<parallel::DataParallelImpl<Mlp>>
    auto opt = make_optimizer(Opt::Adam, ddp->parameters());
    for (int step = 0; step < 3; ++step) {
      opt->zero_grad();
      Tensor xr = x.narrow(0, off[r], off[r + 1] - off[r]).to(Device::cpu(2 * r));
      Tensor tr = t.narrow(0, off[r], off[r + 1] - off[r]).to(Device::cpu(2 * r));
      ddp->forward_loss(nn::CrossEntropyLoss(), tr, xr).backward();
      const auto params = ddp->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(allclose(params[i].grad().cpu(), ref_grads[step][i], 1e-5, 1e-6)) << "rank " << r << " step " << step << " param " << i;
      opt->step();
    }
  });
}

TEST(DDPModelCheck, DifferentModelsAreNamedNotHung) {
  std::vector<std::shared_ptr<Mlp>> models{std::make_shared<Mlp>(16), std::make_shared<Mlp>(12)};
  auto errors = test::run_ranks_collect(
      2, [&](const ProcessGroupPtr& group, int r) { nn::DistributedDataParallel<Mlp> ddp(models[r], group); }, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " accepted a different model";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const DistributedError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'net.0.weight' is a parameter float32 [16, 8] on rank 0 but a parameter float32 [12, 8] on rank 1"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("ranks that differ from rank 0: 1"), std::string::npos) << msg;
    }
  }
}

// A backward that throws midway (here: a hook on the first layer's weight, after the later layers'
// gradients were counted) leaves the rank out of step; the next forward says so instead of pairing
// the wrong collectives, and the one after works again.
TEST(DDPErrors, ABackwardThatThrewIsReportedAtTheNextForward) {
  auto models = rank_models<Mlp>(1);
  run_ranks(1, [&](const ProcessGroupPtr& group, int) {
    nn::DistributedDataParallel<Mlp> ddp(models[0], group);
    Tensor first_weight = ddp->parameters()[0];
    const int hook = first_weight.register_hook([](const Tensor&) -> Tensor { throw ValueError("hook failed on purpose"); });
    Tensor x = randn({3, 8});
    EXPECT_THROW(ddp(x).sum().backward(), ValueError);
    first_weight.remove_hook(hook);
    try {
      ddp(x);
      ADD_FAILURE() << "the forward after a failed backward went ahead";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("previous backward pass failed on this rank"), std::string::npos) << e.what();
    }
    ddp(x).sum().backward();
    EXPECT_TRUE(ddp->last_backward_synced());
  });
}

// state_dict keys are the module's own; PyTorch's "module."-prefixed checkpoint loads.
TEST(DDPCheckpoint, StateDictKeysAreTheModules) {
  run_ranks(1, [&](const ProcessGroupPtr& group, int) {
    auto model = make_model<Mlp>(42, kFloat32);
    nn::DistributedDataParallel<Mlp> ddp(model, group);
    auto keys = ddp->state_dict();
    auto own = model->state_dict();
    ASSERT_EQ(keys.size(), own.size());
    for (size_t i = 0; i < own.size(); ++i) EXPECT_EQ(keys[i].key(), own[i].key());
    OrderedDict<std::string, Tensor> prefixed;
    for (const auto& item : make_model<Mlp>(3, kFloat32)->state_dict()) prefixed.insert("module." + item.key(), item.value());
    ddp->load_state_dict(prefixed);
    EXPECT_TRUE(bitwise_equal(model->state_dict()[0].value(), prefixed[0].value()));
  });
}

}  // namespace
}  // namespace dp::distributed
