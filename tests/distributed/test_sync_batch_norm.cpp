// nn::SyncBatchNorm against one BatchNorm over the concatenated batch (our BatchNorm is golden-tested
// against PyTorch): outputs, input/weight/bias gradients and running statistics, over 2 and 3 ranks
// (threads), ragged batches and an empty rank, under DDP and DataParallel; eval mode without
// communication; gradcheck; bad input.
#include <gtest/gtest.h>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/distributed/sync_batch_norm.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
#include "support/gradcheck.h"
#include "support/run_command.h"
#include "support/temp_files.h"

using namespace dp;
using dp::distributed::ProcessGroupPtr;
using dp::distributed::test::run_ranks;

namespace {

void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double tol = 1e-9) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double diff = a.numel() == 0 ? 0.0 : (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what;
}

// One case: ranks' row counts, input shape after [N, C], steps.
struct Case {
  std::vector<int64_t> rows;
  std::vector<int64_t> tail;  // {} (1d [N, C]), {L} (1d [N, C, L]), {H, W} (2d)
};

// Threads (one rank per thread), or only rank `only_rank` of a group made by `make_group` (a real
// process: see ProcessesMatchBatchNorm).
void check_against_batchnorm(const Case& c, int only_rank = -1, const std::function<ProcessGroupPtr()>& make_group = nullptr) {
  const int world = static_cast<int>(c.rows.size());
  const int64_t C = 3;
  const int steps = 3;
  int64_t total = 0;
  std::vector<int64_t> off;
  for (int64_t r : c.rows) {
    off.push_back(total);
    total += r;
  }
  Generator gen;
  gen.manual_seed(29);
  std::vector<int64_t> shape{total, C};
  shape.insert(shape.end(), c.tail.begin(), c.tail.end());
  std::vector<Tensor> xs, gs;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(randn(shape, TensorOptions().dtype(kFloat64), &gen) * 2.0 + 0.5);
    gs.push_back(randn(shape, TensorOptions().dtype(kFloat64), &gen));
  }
  Tensor w0 = randn({C}, TensorOptions().dtype(kFloat64), &gen), b0 = randn({C}, TensorOptions().dtype(kFloat64), &gen);

  // Reference: one BatchNorm over the whole batch.
  auto make_bn = [&]() -> std::shared_ptr<nn::BatchNormImplBase> {
    std::shared_ptr<nn::BatchNormImplBase> bn;
    if (c.tail.size() == 2)
      bn = std::make_shared<nn::BatchNorm2dImpl>(C);
    else
      bn = std::make_shared<nn::BatchNorm1dImpl>(C);
    bn->to(kFloat64);
    NoGradGuard ng;
    bn->weight.copy_(w0);
    bn->bias.copy_(b0);
    return bn;
  };
  auto ref = make_bn();
  std::vector<Tensor> ref_out, ref_gx, ref_gw, ref_gb;
  for (int s = 0; s < steps; ++s) {
    Tensor x = xs[s].clone().set_requires_grad(true);
    ref->weight.set_grad(Tensor());
    ref->bias.set_grad(Tensor());
    Tensor y = ref->forward(x);
    (y * gs[s]).sum().backward();
    ref_out.push_back(y.detach());
    ref_gx.push_back(x.grad());
    ref_gw.push_back(ref->weight.grad().clone());
    ref_gb.push_back(ref->bias.grad().clone());
  }

  std::vector<std::vector<Tensor>> gw(world), gb(world);
  auto rank_body = [&](const ProcessGroupPtr& group, int r) {
    auto sbn = std::static_pointer_cast<nn::SyncBatchNormImpl>(nn::convert_sync_batchnorm(make_bn(), group));
    for (int s = 0; s < steps; ++s) {
      Tensor x = xs[s].narrow(0, off[r], c.rows[r]).clone().set_requires_grad(true);
      sbn->weight.set_grad(Tensor());
      sbn->bias.set_grad(Tensor());
      Tensor y = sbn->forward(x);
      (y * gs[s].narrow(0, off[r], c.rows[r])).sum().backward();
      const std::string where = "rank " + std::to_string(r) + " step " + std::to_string(s);
      expect_close(y.detach(), ref_out[s].narrow(0, off[r], c.rows[r]), "output " + where);
      if (c.rows[r] > 0) expect_close(x.grad(), ref_gx[s].narrow(0, off[r], c.rows[r]), "grad input " + where);
      gw[r].push_back(sbn->weight.grad().defined() ? sbn->weight.grad().clone() : zeros({C}, TensorOptions().dtype(kFloat64)));
      gb[r].push_back(sbn->bias.grad().defined() ? sbn->bias.grad().clone() : zeros({C}, TensorOptions().dtype(kFloat64)));
    }
    expect_close(sbn->running_mean, ref->running_mean, "running_mean rank " + std::to_string(r));
    expect_close(sbn->running_var, ref->running_var, "running_var rank " + std::to_string(r));
    EXPECT_EQ(sbn->num_batches_tracked.item<int64_t>(), steps);
  };
  if (only_rank >= 0) {
    rank_body(make_group(), only_rank);
    return;
  }
  run_ranks(world, rank_body);
  // Weight and bias gradients are local: their sum over ranks (what DDP reduces) is BatchNorm's.
  for (int s = 0; s < steps; ++s) {
    Tensor sw = zeros({C}, TensorOptions().dtype(kFloat64)), sb = zeros({C}, TensorOptions().dtype(kFloat64));
    for (int r = 0; r < world; ++r) {
      sw = sw + gw[r][s];
      sb = sb + gb[r][s];
    }
    expect_close(sw, ref_gw[s], "sum of weight grads step " + std::to_string(s));
    expect_close(sb, ref_gb[s], "sum of bias grads step " + std::to_string(s));
  }
}

}  // namespace

TEST(SyncBatchNorm, TwoRanks2d) { check_against_batchnorm({{4, 4}, {2, 3}}); }
TEST(SyncBatchNorm, ThreeRanksRagged2d) { check_against_batchnorm({{5, 2, 3}, {2, 2}}); }
TEST(SyncBatchNorm, ThreeRanksOneEmpty1d) { check_against_batchnorm({{6, 0, 3}, {}}); }
TEST(SyncBatchNorm, TwoRanksRagged1dWithLength) { check_against_batchnorm({{1, 4}, {5}}); }

TEST(SyncBatchNorm, StateDictKeysEqualBatchNorm) {
  nn::BatchNorm2d bn(4);
  nn::SyncBatchNorm sbn(4);
  EXPECT_EQ(bn->state_dict().keys(), sbn->state_dict().keys());
  EXPECT_EQ(sbn->state_dict().keys(), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
}

TEST(SyncBatchNorm, ConvertReplacesInSequentialAndSharesTensors) {
  nn::Sequential seq(nn::Linear(4, 3), nn::BatchNorm1d(3), nn::ReLU());
  Tensor w = seq->ptr<nn::BatchNorm1dImpl>(1)->weight;
  auto root = nn::convert_sync_batchnorm(seq.ptr(), nullptr);
  EXPECT_EQ(root.get(), seq.ptr().get());
  auto s = seq->ptr<nn::SyncBatchNormImpl>(1);
  EXPECT_TRUE(s->weight.is_same(w));
  // The root itself a BatchNorm: the new root is returned.
  auto bn = std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(5).momentum(std::nullopt).eps(1e-3));
  bn->eval();
  auto r2 = std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(nn::convert_sync_batchnorm(bn, nullptr));
  ASSERT_NE(r2, nullptr);
  EXPECT_FALSE(r2->options.momentum().has_value());
  EXPECT_EQ(r2->options.eps(), 1e-3);
  EXPECT_FALSE(r2->is_training());
  EXPECT_TRUE(r2->running_var.is_same(bn->running_var));
  // The Sequential calls the new layer: in eval it runs without a group.
  seq->eval();
  EXPECT_EQ(seq->forward(ones({2, 4})).sizes(), (Shape{2, 3}));
}

TEST(SyncBatchNorm, EvalModeRunsNoCollective) {
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    nn::SyncBatchNorm sbn(nn::SyncBatchNormOptions(3).process_group(group));
    sbn->eval();
    const uint64_t before = group->sequence();
    Tensor y = sbn(randn({r + 2, 3}));  // different sizes: a collective would not pair up
    EXPECT_EQ(group->sequence(), before);
    EXPECT_EQ(y.sizes(), (Shape{r + 2, 3}));
  });
}

TEST(SyncBatchNorm, WorldSizeOneIsBatchNorm) {
  run_ranks(1, [&](const ProcessGroupPtr& group, int) {
    nn::SyncBatchNorm sbn(nn::SyncBatchNormOptions(3).process_group(group));
    nn::BatchNorm1d bn(3);
    Tensor x = randn({5, 3});
    expect_close(sbn(x), bn(x), "world size 1", 1e-6);
    expect_close(sbn->running_var, bn->running_var, "running_var", 1e-6);
    EXPECT_EQ(group->sequence(), 0u);
  });
}

TEST(SyncBatchNorm, DataParallelMatchesBatchNorm) {
  set_cpu_device_count(3);
  for (int ndev : {2, 3}) {
    std::vector<Device> devices;
    for (int i = 0; i < ndev; ++i) devices.push_back(Device("cpu:" + std::to_string(i)));
    Generator gen;
    gen.manual_seed(7);
    auto opts = TensorOptions().dtype(kFloat64);
    auto model = std::make_shared<nn::SequentialImpl>(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU());
    model->to(kFloat64);
    auto reference = nn::clone(model);
    nn::convert_sync_batchnorm(model, nullptr);
    model->to(devices[0]);
    nn::DataParallel net(model, devices);
    for (int step = 0; step < 3; ++step) {
      Tensor x = randn({7, 2, 4, 4}, opts, &gen), g = randn({7, 4, 4, 4}, opts, &gen);
      for (auto& p : model->parameters()) p.set_grad(Tensor());
      for (auto& p : reference->parameters()) p.set_grad(Tensor());
      Tensor y = net(x.to(devices[0]));
      (y * g.to(devices[0])).sum().backward();
      Tensor yr = reference->forward(x);
      (yr * g).sum().backward();
      expect_close(y.to(Device("cpu")), yr, "DataParallel output, devices " + std::to_string(ndev));
      const auto pm = model->named_parameters(), pr = reference->named_parameters();
      for (size_t i = 0; i < pm.size(); ++i)
        expect_close(pm[i].value().grad().to(Device("cpu")), pr[i].value().grad(), "grad of " + pm[i].key() + ", devices " + std::to_string(ndev));
    }
    const auto bm = model->named_buffers(), br = reference->named_buffers();
    for (size_t i = 0; i < bm.size(); ++i) expect_close(bm[i].value().to(Device("cpu")), br[i].value(), "buffer " + bm[i].key());
  }
}

TEST(SyncBatchNorm, GradcheckThroughDataParallel) {
  auto sbn = std::make_shared<nn::SyncBatchNormImpl>(3);
  sbn->to(kFloat64);
  {
    NoGradGuard ng;
    sbn->weight.copy_(tensor({0.5, -1.5, 2.0}, kFloat64));
    sbn->bias.copy_(tensor({0.1, 0.2, -0.3}, kFloat64));
  }
  sbn->to(Device("cpu:0"));
  nn::DataParallel net(sbn, std::vector<Device>{Device("cpu:0"), Device("cpu:1")});
  Tensor x = randn({5, 3, 2}, TensorOptions().dtype(kFloat64)).to(Device("cpu:0")).set_requires_grad(true);
  EXPECT_TRUE(dp::test::gradcheck([&](const std::vector<Tensor>& in) { return net(in[0]); }, {x}));
}

TEST(SyncBatchNorm, UnderDDPMatchesBatchNorm) {
  const int world = 2;
  const int64_t per = 4;
  Generator gen;
  gen.manual_seed(11);
  auto opts = TensorOptions().dtype(kFloat64);
  std::vector<Tensor> xs, ts;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(randn({per * world, 2, 5, 5}, opts, &gen));
    ts.push_back(randn({per * world, 4, 5, 5}, opts, &gen));
  }
  auto make = [] {
    manual_seed(3);
    auto m = std::make_shared<nn::SequentialImpl>(nn::Conv2d(2, 4, 3), nn::BatchNorm2d(4), nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(4, 4, 1)));
    m->to(kFloat64);
    return m;
  };
  auto reference = make();
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1));
  for (int s = 0; s < 3; ++s) {
    ref_opt.zero_grad();
    Tensor y = reference->forward(xs[s]);
    ((y - ts[s].narrow(2, 0, 3).narrow(3, 0, 3)).pow(2)).mean().backward();
    ref_opt.step();
  }
  std::vector<std::shared_ptr<nn::SequentialImpl>> models(world);
  for (int r = 0; r < world; ++r) models[r] = make();
  run_ranks(world, [&](const ProcessGroupPtr& group, int r) {
    nn::convert_sync_batchnorm(models[r], group);
    nn::DistributedDataParallel<nn::SequentialImpl> ddp(models[r], group);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1));
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      Tensor y = ddp(xs[s].narrow(0, r * per, per));
      ((y - ts[s].narrow(0, r * per, per).narrow(2, 0, 3).narrow(3, 0, 3)).pow(2)).mean().backward();
      opt.step();
    }
  });
  for (int r = 0; r < world; ++r) {
    const auto pm = models[r]->named_parameters(), pr = reference->named_parameters();
    for (size_t i = 0; i < pm.size(); ++i) expect_close(pm[i].value(), pr[i].value(), "rank " + std::to_string(r) + " " + pm[i].key());
    const auto bm = models[r]->named_buffers(), br = reference->named_buffers();
    for (size_t i = 0; i < bm.size(); ++i) expect_close(bm[i].value(), br[i].value(), "rank " + std::to_string(r) + " buffer " + bm[i].key());
  }
}

TEST(SyncBatchNorm, BadInput) {
  nn::SyncBatchNorm sbn(3);
  try {
    sbn(randn({4, 3}));
    ADD_FAILURE() << "no error";
  } catch (const distributed::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("SyncBatchNorm needs a process group or DataParallel"), std::string::npos) << e.what();
  }
  sbn->eval();
  EXPECT_EQ(sbn(randn({4, 3})).sizes(), (Shape{4, 3}));  // eval: no group needed
  EXPECT_THROW(sbn(randn({4})), ValueError);
  run_ranks(2, [&](const ProcessGroupPtr& group, int) {
    nn::SyncBatchNorm s2(nn::SyncBatchNormOptions(3).process_group(group));
    EXPECT_THROW(s2(randn({4, 5})), ShapeError);
  });
  // A BatchNorm held by a member of a user class cannot be re-pointed.
  struct Net : nn::Module {
    Net() { bn = register_module("bn", nn::BatchNorm1d(2)); }
    nn::BatchNorm1d bn{nullptr};
  };
  auto net = std::make_shared<Net>();
  try {
    nn::convert_sync_batchnorm(net, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("convert_sync_batchnorm"), std::string::npos) << e.what();
  }
}

TEST(SyncBatchNorm, SubgroupOfRanks) {
  // Ranks 0 and 2 of 3 form their own group (over a prefix of the store); rank 1 trains alone.
  Generator gen;
  gen.manual_seed(5);
  Tensor x = randn({9, 2}, TensorOptions().dtype(kFloat64), &gen);
  const std::vector<int64_t> off{0, 4, 6}, rows{4, 2, 3};
  run_ranks(3, [&](const ProcessGroupPtr& world, int r) {
    nn::BatchNorm1d ref(2);
    ref->to(kFloat64);
    Tensor mine = x.narrow(0, off[r], rows[r]);
    if (r == 1) {
      nn::SyncBatchNorm sbn(nn::SyncBatchNormOptions(2).process_group(nullptr));
      sbn->to(kFloat64);
      sbn->eval();  // alone and without a group: eval only
      EXPECT_EQ(sbn(mine).sizes(), mine.sizes());
      return;
    }
    auto sub = distributed::make_gloo_process_group(std::make_shared<distributed::PrefixStore>("sub02", world->store()), r == 0 ? 0 : 1, 2);
    nn::SyncBatchNorm sbn(nn::SyncBatchNormOptions(2).process_group(sub));
    sbn->to(kFloat64);
    Tensor both = cat({x.narrow(0, 0, 4), x.narrow(0, 6, 3)}, 0);
    Tensor expected = ref(both).narrow(0, r == 0 ? 0 : 4, rows[r]);
    expect_close(sbn(mine), expected, "subgroup rank " + std::to_string(r));
    expect_close(sbn->running_var, ref->running_var, "subgroup running_var");
    EXPECT_EQ(world->sequence(), 0u);  // the world group was not used
  });
}

// Real processes: this program runs itself once per rank (SyncBatchNormWorker.Rank with the
// DP_SBN_* environment), the ranks meeting in a FileStore; each checks its rank against BatchNorm.
const std::vector<Case> kProcessCases{{{5, 0, 3}, {2, 2}}, {{4, 7}, {}}};

TEST(SyncBatchNormWorker, Rank) {
  const char* rank = std::getenv("DP_SBN_RANK");
  if (!rank) GTEST_SKIP() << "a worker of SyncBatchNorm.ProcessesMatchBatchNorm, run by it";
  const int r = std::atoi(rank), world = std::atoi(std::getenv("DP_SBN_WORLD")), which = std::atoi(std::getenv("DP_SBN_CASE"));
  const std::string store = std::getenv("DP_SBN_STORE");
  check_against_batchnorm(kProcessCases.at(static_cast<size_t>(which)), r, [&] {
    distributed::ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(20);
    return distributed::make_gloo_process_group(std::make_shared<distributed::FileStore>(store), r, world, o);
  });
}

TEST(SyncBatchNorm, ProcessesMatchBatchNorm) {
  for (size_t which = 0; which < kProcessCases.size(); ++which) {
    const int world = static_cast<int>(kProcessCases[which].rows.size());
    dp::test::TempDir dir;
    std::ostringstream cmd;
    cmd << "(";
    for (int r = 0; r < world; ++r)
      cmd << "DP_SBN_RANK=" << r << " DP_SBN_WORLD=" << world << " DP_SBN_CASE=" << which << " DP_SBN_STORE=" << dir.file("store")
          << " timeout 60 /proc/" << ::getpid() << "/exe --gtest_filter=SyncBatchNormWorker.Rank > " << dir.file("out" + std::to_string(r))
          << " 2>&1 & ";
    cmd << "wait)";
    dp::test::run_command(cmd.str());
    for (int r = 0; r < world; ++r) {
      const std::string out = dp::test::read_bytes(dir.file("out" + std::to_string(r)));
      EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << "case " << which << " rank " << r << " of " << world << ":\n" << out;
    }
  }
}
