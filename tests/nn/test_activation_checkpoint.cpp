// Activation checkpointing (dp/nn/utils/checkpoint.h): gradients with checkpoint() and
// checkpoint_sequential() equal those without (dropout included: the random state is replayed, and
// without preserve_rng_state it is not); multiple outputs, inputs that need no gradient, non-tensor
// arguments, nested checkpoints, autograd::grad through a checkpoint; each parameter's
// AccumulateGrad runs once per pass and callbacks queued inside the recomputed segment run at the
// end of the outer pass; under DataParallel (3 CPU devices) and DistributedDataParallel (2 and 3
// thread ranks) the gradients equal the single-process ones, a parameter used inside and outside a
// checkpoint included, while a real reentrant backward still gets DDP's error naming the parameter;
// GPT with checkpoint_activations gives the same gradients with a lower peak of host memory.
#include <gtest/gtest.h>
#include <atomic>
#include <cstring>
#include <string>
#include <tuple>
#include "distributed/ddp_test_support.h"
#include "dp/autograd/autograd.h"
#include "dp/autograd/callback.h"
#include "dp/core/allocator.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
#include "dp/models/gpt.h"
#include "dp/nn/nn.h"
#include "dp/nn/utils/checkpoint.h"
#include "dp/parallel/data_parallel.h"

namespace dp {
namespace {

bool close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.sizes() == b.sizes() && allclose(a.cpu(), b.cpu(), tol, tol);
}
bool bitwise(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}
std::vector<Tensor> grads(const nn::Module& m) {
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return g;
}
void zero(const nn::Module& m) {
  for (Tensor p : m.parameters()) p.set_grad(Tensor());
}
void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined()) << what << ": gradient " << i << " missing";
    EXPECT_TRUE(bitwise(a[i], b[i]) || close(a[i], b[i])) << what << ": gradient " << i << " differs";
  }
}

nn::Sequential six_layers(double dropout = 0.0) {
  nn::Sequential s;
  s->push_back(nn::Linear(6, 8));
  s->push_back(nn::Tanh());
  s->push_back(nn::Dropout(dropout));
  s->push_back(nn::Linear(8, 8));
  s->push_back(nn::GELU());
  s->push_back(nn::Linear(8, 3));
  return s;
}

TEST(ActivationCheckpoint, SameGradientsAsWithout) {
  manual_seed(1);
  nn::Sequential net = six_layers();
  Tensor x = randn({5, 6}).requires_grad_(true);
  Tensor y = net(x);
  y.pow(2).sum().backward();
  std::vector<Tensor> ref = grads(*net);
  Tensor ref_x = x.grad().clone();
  zero(*net);
  x.set_grad(Tensor());

  Tensor yc = utils::checkpoint([&](const Tensor& t) { return net(t); }, x);
  EXPECT_TRUE(bitwise(yc, y));
  ASSERT_TRUE(yc.grad_fn() != nullptr);
  EXPECT_EQ(yc.grad_fn()->name(), "CheckpointFunctionBackward");
  yc.pow(2).sum().backward();
  expect_same(grads(*net), ref, "checkpoint");
  EXPECT_TRUE(bitwise(x.grad(), ref_x) || close(x.grad(), ref_x));
}

TEST(ActivationCheckpoint, DropoutMasksReplayedOnlyWithPreservedRngState) {
  nn::Sequential net = six_layers(0.5);
  Tensor x = randn({16, 6});
  auto run = [&](int mode) {  // 0: no checkpoint, 1: checkpoint, 2: checkpoint without preserve_rng_state
    zero(*net);
    manual_seed(123);
    Tensor y;
    if (mode == 0)
      y = net(x);
    else
      y = utils::checkpoint(
          utils::CheckpointOptions().preserve_rng_state(mode == 1), [&](const Tensor& t) { return net(t); }, x);
    y.pow(2).sum().backward();
    return grads(*net);
  };
  std::vector<Tensor> ref = run(0), with = run(1), without = run(2);
  expect_same(with, ref, "preserve_rng_state");
  // The first Linear's weight gradient depends on the dropout mask after it.
  EXPECT_FALSE(close(without[0], ref[0])) << "without preserve_rng_state the recomputation should draw other masks";
  // Replaying leaves the generator where the forward left it: the next draw is the same either way.
  manual_seed(5);
  Tensor y = utils::checkpoint([&](const Tensor& t) { return net(t); }, x);
  Tensor after_forward = rand({4});
  manual_seed(5);
  y = utils::checkpoint([&](const Tensor& t) { return net(t); }, x);
  y.sum().backward();
  EXPECT_TRUE(bitwise(rand({4}), after_forward)) << "the recomputation must not advance the generator";
}

TEST(ActivationCheckpoint, MultipleOutputsVectorAndTuple) {
  manual_seed(2);
  nn::Linear a(4, 3), b(4, 2);
  Tensor x = randn({3, 4}).requires_grad_(true);
  auto loss_of = [](const Tensor& u, const Tensor& v) { return u.pow(2).sum() + (v * 3).sum(); };
  loss_of(a(x), b(x)).backward();
  std::vector<Tensor> ref{a->weight.grad().clone(), b->weight.grad().clone(), x.grad().clone()};

  for (int form = 0; form < 2; ++form) {
    a->weight.set_grad(Tensor());
    b->weight.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor u, v;
    if (form == 0) {
      std::vector<Tensor> out = utils::checkpoint([&](const Tensor& t) { return std::vector<Tensor>{a(t), b(t)}; }, x);
      ASSERT_EQ(out.size(), 2u);
      u = out[0];
      v = out[1];
    } else {
      std::tie(u, v) = utils::checkpoint([&](const Tensor& t) { return std::make_tuple(a(t), b(t)); }, x);
    }
    EXPECT_EQ(u.grad_fn().get(), v.grad_fn().get());
    loss_of(u, v).backward();
    expect_same({a->weight.grad(), b->weight.grad(), x.grad()}, ref, form == 0 ? "vector outputs" : "tuple outputs");
  }
  // Only one output used: the other gets no gradient and b's weight none either.
  a->weight.set_grad(Tensor());
  b->weight.set_grad(Tensor());
  auto [u, v] = utils::checkpoint([&](const Tensor& t) { return std::make_tuple(a(t), b(t)); }, x);
  u.sum().backward();
  EXPECT_TRUE(a->weight.grad().defined());
  EXPECT_FALSE(b->weight.grad().defined());
}

TEST(ActivationCheckpoint, InputsWithoutGradAndNonTensorArguments) {
  manual_seed(3);
  nn::Linear lin(4, 4);
  Tensor x = randn({2, 4});                         // no grad
  Tensor s = randn({2, 4}).requires_grad_(true);    // grad
  Tensor idx = tensor(std::vector<int64_t>{1, 0});  // integer tensor input
  auto fn = [&](const Tensor& a, double scale, const Tensor& b, const Tensor& i, const std::string& tag) {
    EXPECT_EQ(tag, "tag");
    return (lin(a) * scale + b).index_select(0, i).tanh();
  };
  fn(x, 0.5, s, idx, "tag").sum().backward();
  std::vector<Tensor> ref{lin->weight.grad().clone(), lin->bias.grad().clone(), s.grad().clone()};
  zero(*lin);
  s.set_grad(Tensor());
  Tensor y = utils::checkpoint(fn, x, 0.5, s, idx, std::string("tag"));
  y.sum().backward();
  expect_same({lin->weight.grad(), lin->bias.grad(), s.grad()}, ref, "mixed inputs");
  EXPECT_FALSE(x.grad().defined());

  // No input needs a gradient: the parameters still get theirs (found in the segment's graph).
  zero(*lin);
  Tensor y2 = utils::checkpoint([&](const Tensor& a) { return lin(a).pow(2); }, x);
  ASSERT_TRUE(y2.requires_grad());
  y2.sum().backward();
  lin(x).pow(2).sum().backward();  // accumulates the reference on top: twice the checkpointed one
  Tensor twice = lin->weight.grad().clone();
  zero(*lin);
  lin(x).pow(2).sum().backward();
  EXPECT_TRUE(close(twice, lin->weight.grad() * 2));

  // Nothing needs a gradient at all: the output has no history.
  {
    NoGradGuard no_grad;
    Tensor y3 = utils::checkpoint([&](const Tensor& a) { return lin(a); }, x);
    EXPECT_FALSE(y3.requires_grad());
  }
  Tensor y4 = utils::checkpoint([](const Tensor& a) { return a * 2; }, x);
  EXPECT_FALSE(y4.requires_grad());
  EXPECT_TRUE(y4.grad_fn() == nullptr);
}

TEST(ActivationCheckpoint, NestedCheckpoints) {
  manual_seed(4);
  nn::Sequential net = six_layers(0.3);
  Tensor x = randn({4, 6}).requires_grad_(true);
  manual_seed(9);
  net(x).pow(2).sum().backward();
  std::vector<Tensor> ref = grads(*net);
  ref.push_back(x.grad().clone());
  zero(*net);
  x.set_grad(Tensor());
  manual_seed(9);
  Tensor y = utils::checkpoint(
      [&](const Tensor& t) {
        Tensor h = utils::checkpoint([&](const Tensor& u) { return net->forward_range(u, 0, 3); }, t);
        return utils::checkpoint([&](const Tensor& u) { return net->forward_range(u, 3, 6); }, h);
      },
      x);
  y.pow(2).sum().backward();
  std::vector<Tensor> got = grads(*net);
  got.push_back(x.grad());
  expect_same(got, ref, "nested");
}

TEST(ActivationCheckpoint, CheckpointSequentialOneTwoThreeSegments) {
  manual_seed(5);
  nn::Sequential net = six_layers(0.25);
  Tensor x = randn({7, 6}).requires_grad_(true);
  manual_seed(11);
  net(x).sum().backward();
  std::vector<Tensor> ref = grads(*net);
  ref.push_back(x.grad().clone());
  for (int64_t segments : {1, 2, 3}) {
    zero(*net);
    x.set_grad(Tensor());
    manual_seed(11);
    Tensor y = utils::checkpoint_sequential(net, segments, x);
    // 1 segment runs plainly; with more, the output comes from the last (plain) segment.
    EXPECT_TRUE(y.grad_fn() != nullptr);
    y.sum().backward();
    std::vector<Tensor> got = grads(*net);
    got.push_back(x.grad());
    expect_same(got, ref, ("segments " + std::to_string(segments)).c_str());
  }
  try {
    utils::checkpoint_sequential(net, 0, x);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint_sequential: segments must be between 1 and the number of modules (6), got 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(utils::checkpoint_sequential(net, 7, x), ValueError);
}

TEST(ActivationCheckpoint, AutogradGradThroughCheckpointAndDoubleUse) {
  manual_seed(6);
  nn::Linear lin(3, 3);
  Tensor x = randn({2, 3});
  // The weight is used inside the checkpoint and outside it (as a tied weight would be).
  auto loss_of = [&](bool ckpt) {
    Tensor h = ckpt ? utils::checkpoint([&](const Tensor& t) { return lin(t).tanh(); }, x) : lin(x).tanh();
    return (h.matmul(lin->weight)).pow(2).sum();
  };
  std::vector<Tensor> ref = autograd::grad({loss_of(false)}, {lin->weight, lin->bias});
  std::vector<Tensor> got = autograd::grad({loss_of(true)}, {lin->weight, lin->bias});
  expect_same(got, ref, "autograd::grad");
  EXPECT_FALSE(lin->weight.grad().defined()) << "grad() must not write .grad";

  // backward(): the weight's AccumulateGrad (and so its post-accumulate hook) runs once per pass,
  // with the sum of both uses.
  std::atomic<int> calls{0};
  int id = lin->weight.register_post_accumulate_grad_hook([&](Tensor&) { ++calls; });
  loss_of(true).backward();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(close(lin->weight.grad(), ref[0]));
  lin->weight.remove_hook(id);
}

TEST(ActivationCheckpoint, CallbackQueuedInsideTheSegmentRunsAtTheEndOfTheOuterPass) {
  nn::Linear first(3, 3), second(3, 3);
  Tensor x = randn({2, 3});
  bool both_at_callback = false, ran = false;
  Tensor y = utils::checkpoint(
      [&](const Tensor& t) {
        Tensor h = second(t);
        if (h.requires_grad())
          h.register_hook([&](const Tensor& g) {
            autograd::queue_callback([&] {
              ran = true;
              both_at_callback = first->weight.grad().defined() && second->weight.grad().defined();
            });
            return g;
          });
        return h;
      },
      first(x));
  y.sum().backward();
  EXPECT_TRUE(ran);
  EXPECT_TRUE(both_at_callback) << "the callback ran before the outer pass had accumulated every leaf";
}

TEST(ActivationCheckpoint, InputModifiedInPlaceAndNondeterministicFunctionAreErrors) {
  nn::Linear lin(3, 3);
  Tensor x = randn({2, 3}).requires_grad_(true);
  Tensor h = x * 1;
  Tensor y = utils::checkpoint([&](const Tensor& t) { return lin(t); }, h);
  h.add_(1);
  try {
    y.sum().backward();
    ADD_FAILURE() << "no error";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint: tensor input 0 was modified by an in-place operation"), std::string::npos) << e.what();
  }
  // The second run uses another parameter than the first.
  nn::Linear other(3, 3);
  int runs = 0;
  Tensor z = utils::checkpoint([&](const Tensor& t) { return ++runs == 1 ? lin(t) : other(t); }, x);
  try {
    z.sum().backward();
    ADD_FAILURE() << "no error";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("the recomputation in backward reached a tensor"), std::string::npos) << e.what();
  }
}

// The example of docs/distributed.md's "Activation checkpointing" section, as written there.
TEST(ActivationCheckpoint, DocsExample) {
  dp::manual_seed(0);
  dp::nn::Sequential net(dp::nn::Linear(16, 64), dp::nn::GELU(), dp::nn::Dropout(0.1), dp::nn::Linear(64, 64), dp::nn::GELU(), dp::nn::Linear(64, 4));
  dp::Tensor x = dp::randn({8, 16});
  dp::Tensor h = dp::utils::checkpoint([&](const dp::Tensor& t, double scale) { return net->forward_range(t, 0, 3) * scale; }, x, 2.0);
  dp::Tensor y = net->forward_range(h, 3, 6);
  y.pow(2).mean().backward();
  dp::Tensor z = dp::utils::checkpoint_sequential(net, 3, x);
  z.pow(2).mean().backward();
  EXPECT_GT(net->ptr<dp::nn::LinearImpl>(0)->weight.grad().abs().sum().item<double>(), 0.0);
}

// ---- DataParallel and DistributedDataParallel ----

// Linear -> checkpointed (Linear, Dropout, Tanh) -> Linear whose weight is also used outside the
// checkpoint (tied), so that parameter's gradient arrives from both.
struct CkptModel : nn::Module {
  nn::Linear in{nullptr}, mid{nullptr}, out{nullptr};
  nn::Dropout drop{nullptr};
  bool ckpt = true;
  CkptModel() {
    in = register_module("in", nn::Linear(5, 6));
    mid = register_module("mid", nn::Linear(6, 6));
    out = register_module("out", nn::Linear(6, 4));
    drop = register_module("drop", nn::Dropout(0.0));
  }
  Tensor segment(const Tensor& h) { return drop(mid(h)).tanh() + h.matmul(mid->weight.t()) * 0.5; }
  Tensor forward(const Tensor& x) {
    Tensor h = in(x).relu();
    h = ckpt ? utils::checkpoint([this](const Tensor& t) { return segment(t); }, h) : segment(h);
    return out(h) + h.matmul(mid->weight).narrow(1, 0, 4);
  }
};

TEST(ActivationCheckpoint, DataParallelThreeCpuDevicesEqualsSingleDevice) {
  set_cpu_device_count(3);
  manual_seed(7);
  auto model = std::make_shared<CkptModel>();
  auto reference = std::make_shared<CkptModel>();
  reference->ckpt = false;
  {
    NoGradGuard no_grad;
    auto p = model->parameters(), q = reference->parameters();
    for (size_t i = 0; i < p.size(); ++i) q[i].copy_(p[i]);
  }
  Tensor x = randn({9, 5});
  Tensor t = randn({9, 4});
  (reference->forward(x) - t).pow(2).sum().backward();
  std::vector<Tensor> ref = grads(*reference);
  model->to("cpu:0");
  nn::DataParallel<CkptModel> net(model, {"cpu:0", "cpu:1", "cpu:2"});
  for (int pass = 0; pass < 2; ++pass) {  // twice: the second pass accumulates on the first
    Tensor y = net(x);
    (y.cpu() - t).pow(2).sum().backward();
  }
  std::vector<Tensor> got = grads(*model);
  for (Tensor& g : ref) g = g * 2;
  expect_same(got, ref, "DataParallel");
}

void ddp_equivalence(int world) {
  SCOPED_TRACE(::testing::Message() << world << " ranks");
  const int64_t per_rank = 3, total = per_rank * world;
  manual_seed(8);
  Tensor x = randn({total, 5});
  Tensor t = randn({total, 4});
  manual_seed(42);
  auto reference = std::make_shared<CkptModel>();
  reference->ckpt = false;
  (reference->forward(x) - t).pow(2).sum().div(static_cast<double>(world)).backward();
  std::vector<Tensor> ref = grads(*reference);
  std::vector<std::shared_ptr<CkptModel>> models;
  for (int r = 0; r < world; ++r) {
    manual_seed(r == 0 ? 42 : 100 + r);  // DDP copies rank 0's weights
    models.push_back(std::make_shared<CkptModel>());
  }
  std::vector<std::vector<Tensor>> got(world);
  distributed::test::run_ranks(world, [&](const distributed::ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<CkptModel> ddp(models[r], group);
    std::atomic<int> hook_calls{0};
    int id = models[r]->mid->weight.register_post_accumulate_grad_hook([&](Tensor&) { ++hook_calls; });
    Tensor xr = x.narrow(0, r * per_rank, per_rank), tr = t.narrow(0, r * per_rank, per_rank);
    (ddp(xr) - tr).pow(2).sum().backward();
    EXPECT_EQ(hook_calls.load(), 1) << "mid.weight is used three times; its gradient must arrive once";
    models[r]->mid->weight.remove_hook(id);
    EXPECT_TRUE(ddp->last_backward_synced());
    got[r] = grads(*models[r]);
  });
  for (int r = 0; r < world; ++r) expect_same(got[r], ref, ("DDP rank " + std::to_string(r)).c_str());
}

TEST(ActivationCheckpoint, DistributedDataParallelTwoAndThreeRanksEqualSingleProcess) {
  ddp_equivalence(2);
  ddp_equivalence(3);
}

// A reentrant backward (a node whose backward runs backward() on a graph of its own that reaches a
// parameter) accumulates that parameter twice in one pass: DDP's error naming it must still come.
TEST(ActivationCheckpoint, RealReentrantBackwardStillGetsDdpsError) {
  std::vector<std::shared_ptr<CkptModel>> models;
  for (int r = 0; r < 2; ++r) {
    manual_seed(42);
    models.push_back(std::make_shared<CkptModel>());
  }
  std::vector<std::string> messages(2);
  distributed::test::run_ranks(2, [&](const distributed::ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<CkptModel> ddp(models[r], group);
    Tensor y = ddp(randn({2, 5}));
    Tensor w = models[r]->in->weight;
    Tensor z = y * 1;
    Tensor reentrant = z.detach().clone();
    autograd::record("ReentrantBackward", {z}, {reentrant}, [w](autograd::variable_list&& g) {
      AutoGradMode grad_on(true);
      (w * 2).sum().backward();  // a nested pass that accumulates in.weight
      return autograd::variable_list{g[0]};
    });
    try {
      reentrant.sum().backward();
      ADD_FAILURE() << "no error";
    } catch (const AutogradError& e) {
      messages[r] = e.what();
    }
  });
  for (const std::string& m : messages)
    EXPECT_NE(m.find("DistributedDataParallel: parameter 'in.weight' got its gradient twice in one backward pass"), std::string::npos) << m;
}

// ---- GPT ----

models::GPTConfig small_gpt(bool ckpt, double dropout) {
  return models::GPTConfig().vocab_size(32).block_size(16).n_layer(3).n_head(2).n_embd(32).dropout(dropout).checkpoint_activations(ckpt);
}

TEST(ActivationCheckpoint, GptBlocksCheckpointedSameGradientsLowerPeak) {
  manual_seed(10);
  Tensor idx = randint(0, 32, {4, 16});
  Tensor targets = randint(0, 32, {4, 16});
  for (double dropout : {0.0, 0.1}) {
    SCOPED_TRACE(::testing::Message() << "dropout " << dropout);
    std::vector<Tensor> g[2];
    int64_t peak[2];
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      manual_seed(20);
      models::GPT model(small_gpt(ckpt == 1, dropout));
      manual_seed(30);
      reset_peak_memory_stats(Device::cpu());
      const int64_t before = memory_stats(Device::cpu()).allocated;
      Tensor loss = models::lm_loss(model(idx), targets);
      loss.backward();
      peak[ckpt] = memory_stats(Device::cpu()).peak_allocated - before;
      g[ckpt] = grads(*model);
    }
    expect_same(g[1], g[0], "GPT checkpoint_activations");
    // The blocks' activations are most of this model's forward memory.
    EXPECT_LT(peak[1], peak[0] * 3 / 4) << "peak bytes with checkpointing " << peak[1] << ", without " << peak[0];
  }
  // Evaluation and no-grad forwards do not checkpoint (nothing to keep).
  models::GPT model(small_gpt(true, 0.0));
  model->eval();
  EXPECT_NE(model(idx).grad_fn()->name(), "CheckpointFunctionBackward");
}

}  // namespace
}  // namespace dp
