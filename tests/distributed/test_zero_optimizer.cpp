// ZeroRedundancyOptimizer: PyTorch's greedy partition; weights after 20 SGD (momentum) / Adam /
// AdamW steps under DDP with ZeRO (two param groups, a StepLR schedule) bitwise equal to DDP with the
// unsharded optimizer and close to the single-process run, on 2 and 3 ranks, for the broadcast and
// all-gather syncs, waited at the step or overlapped with the next forward; add_param_group;
// consolidated and sharded checkpoints saved on 2 ranks loaded on 3 ranks and on 1 (unsharded),
// training continuing as an uninterrupted run; an interrupted sharded save leaving the previous
// checkpoint loadable; optimizer-state bytes per rank falling as 1/world (threads, and real
// processes with the allocator's peak); bad input on every rank with a clear message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/core/allocator.h"
#include "dp/core/serialize.h"
#include "dp/distributed/distributed.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "support/forked_child.h"
#include "support/temp_files.h"

namespace dp::distributed {
namespace {

using optim::OptimizerParamGroup;
using test::run_ranks;
using test::run_ranks_collect;
using ::testing::HasSubstr;

constexpr int64_t kRows = 12;

// The host generator is shared by the rank threads: seeding and drawing the initial weights is one
// critical section, else another rank's manual_seed lands in the middle of this rank's draws.
std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}

nn::Sequential make_model() {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(42);
  return nn::Sequential(nn::Linear(10, 32), nn::Tanh(), nn::Linear(32, 16), nn::ReLU(), nn::Linear(16, 3));
}

std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({kRows, 10}, {}, &gen);
  Tensor y = randint(0, 3, {kRows}, kInt64, &gen);
  return {x, y};
}

enum class Kind { SgdMomentum, Adam, AdamW };
const char* kind_name(Kind k) { return k == Kind::SgdMomentum ? "SGD" : k == Kind::Adam ? "Adam" : "AdamW"; }

// Two groups: the weights with the defaults, the biases with their own learning rate.
struct Recipe {
  OptimizerFactory factory;
  std::vector<OptimizerParamGroup> groups;
};

Recipe recipe(Kind kind, const nn::Module& model) {
  std::vector<Tensor> weights, biases;
  for (const auto& item : model.named_parameters()) (item.key().find("bias") != std::string::npos ? biases : weights).push_back(item.value());
  Recipe r;
  switch (kind) {
    case Kind::SgdMomentum:
      r.factory = optimizer_factory<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
      r.groups = {OptimizerParamGroup(weights), OptimizerParamGroup(biases, optim::SGDOptions(0.1))};
      break;
    case Kind::Adam:
      r.factory = optimizer_factory<optim::Adam>(optim::AdamOptions(1e-2));
      r.groups = {OptimizerParamGroup(weights), OptimizerParamGroup(biases, optim::AdamOptions(5e-3))};
      break;
    case Kind::AdamW:
      r.factory = optimizer_factory<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(0.05));
      r.groups = {OptimizerParamGroup(weights), OptimizerParamGroup(biases, optim::AdamWOptions(5e-3))};
      break;
  }
  return r;
}

enum class Mode { BroadcastSync, BroadcastOverlap, AllGatherOverlap };
const char* mode_name(Mode m) {
  return m == Mode::BroadcastSync ? "BroadcastSync" : m == Mode::BroadcastOverlap ? "BroadcastOverlap" : "AllGatherOverlap";
}

// The single process: the whole batch per step.
OrderedDict<std::string, Tensor> single_process(Kind kind, int steps) {
  nn::Sequential model = make_model();
  Recipe r = recipe(kind, *model);
  auto opt = r.factory(r.groups);
  optim::StepLR sched(*opt, 5, 0.5);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    opt->zero_grad();
    cross_entropy(model(x), y).backward();
    opt->step();
    sched.step();
  }
  return model->state_dict();
}

Tensor rows_of(const Tensor& t, int rank, int world) {
  const int64_t begin = kRows * rank / world, end = kRows * (rank + 1) / world;
  return t.narrow(0, begin, end - begin);
}

// DDP on `world` threads, with ZeRO (zero = true) or the unsharded optimizer; each rank's weights.
std::vector<OrderedDict<std::string, Tensor>> ddp_run(Kind kind, int world, bool zero, Mode mode, int steps) {
  std::vector<OrderedDict<std::string, Tensor>> out(static_cast<size_t>(world));
  run_ranks(world, [&](const ProcessGroupPtr& pg, int rank) {
    nn::Sequential model = make_model();
    nn::DistributedDataParallel ddp(model, pg);
    Recipe r = recipe(kind, *model);
    std::unique_ptr<optim::Optimizer> opt;
    ZeroRedundancyOptimizer* z = nullptr;
    if (zero) {
      ZeroRedundancyOptimizerOptions o;
      o.sync = mode == Mode::AllGatherOverlap ? ParamSync::AllGather : ParamSync::Broadcast;
      if (mode != Mode::BroadcastSync) o.bucket_cap_mb = 1.0 / 1024;  // 1 KiB: several buckets
      auto zp = std::make_unique<ZeroRedundancyOptimizer>(r.groups, r.factory, pg, o);
      z = zp.get();
      if (mode != Mode::BroadcastSync) z->overlap_with(*model);
      opt = std::move(zp);
    } else {
      opt = r.factory(r.groups);
    }
    optim::StepLR sched(*opt, 5, 0.5);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s);
      opt->zero_grad();
      ddp->forward_loss(nn::CrossEntropyLoss(), rows_of(y, rank, world), rows_of(x, rank, world)).backward();
      opt->step();
      sched.step();
    }
    if (z) z->wait_for_params();
    out[static_cast<size_t>(rank)] = model->state_dict();
  });
  return out;
}

void expect_equal_states(const OrderedDict<std::string, Tensor>& got, const OrderedDict<std::string, Tensor>& want, bool bitwise,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& item : want) {
    ASSERT_TRUE(got.contains(item.key())) << what << ": " << item.key();
    const Tensor& a = got[item.key()];
    if (bitwise)
      EXPECT_TRUE(equal(a, item.value())) << what << ": " << item.key() << " differs";
    else
      EXPECT_TRUE(allclose(a, item.value(), 1e-4, 1e-6)) << what << ": " << item.key() << " differs";
  }
}

// ---------------------------------------------------------------- partition

TEST(ZeroPartition, GreedyBySizeAsPyTorch) {
  // Sizes 320, 32, 512, 16, 48, 3 (the model's parameters in order). PyTorch's rule, by hand: sorted
  // 512(2) 320(0) 48(4) 32(1) 16(3) 3(5); each to the rank with the fewest elements so far.
  //   2 ranks: 512->0; 320->1; then rank 1 stays smaller: 48, 32, 16, 3 -> 1.
  //   3 ranks: 512->0; 320->1; 48->2; 32->2 (80); 16->2 (96); 3->2.
  const std::map<int, std::vector<std::vector<int64_t>>> want{{1, {{2, 0, 4, 1, 3, 5}}}, {2, {{2}, {0, 4, 1, 3, 5}}}, {3, {{2}, {0}, {4, 1, 3, 5}}}};
  for (const auto& [world, expected] : want) {
    run_ranks(world, [&, world = world, expected = expected](const ProcessGroupPtr& pg, int rank) {
      nn::Sequential model = make_model();
      ZeroRedundancyOptimizer z(model->parameters(), optim::SGDOptions(0.1), pg);
      EXPECT_EQ(z.partition(), expected) << world << " ranks";
      EXPECT_EQ(z.inner_name(), "SGD");
      ASSERT_NE(z.local_optimizer(), nullptr);
      EXPECT_EQ(z.local_optimizer()->size(), expected[static_cast<size_t>(rank)].size());
      for (size_t r = 0; r < expected.size(); ++r)
        for (int64_t i : expected[r]) EXPECT_EQ(z.owner(i), static_cast<int>(r));
    });
  }
}

TEST(ZeroPartition, MoreRanksThanParametersLeavesAnEmptyShard) {
  run_ranks(3, [](const ProcessGroupPtr& pg, int rank) {
    Tensor a = ones({4}).requires_grad_(true), b = ones({2}).requires_grad_(true);
    ZeroRedundancyOptimizer z(std::vector<Tensor>{a, b}, optim::SGDOptions(0.5), pg);
    EXPECT_EQ(z.local_optimizer() == nullptr, rank == 2);
    (a.sum() + b.sum()).backward();
    z.step();  // rank 2 steps nothing and receives both
    EXPECT_TRUE(allclose(a, full({4}, 0.5f)));
    EXPECT_TRUE(allclose(b, full({2}, 0.5f)));
  });
}

// ---------------------------------------------------------------- equivalence

struct Case {
  Kind kind;
  int world;
  Mode mode;
};

class ZeroEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroEquivalence, TwentyStepsEqualUnshardedDDPAndSingleProcess) {
  const Case c = GetParam();
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<OrderedDict<std::string, Tensor>>> ddp_cache;
  static std::map<int, OrderedDict<std::string, Tensor>> single_cache;
  std::vector<OrderedDict<std::string, Tensor>> plain;
  OrderedDict<std::string, Tensor> single;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_pair(static_cast<int>(c.kind), c.world);
    if (!ddp_cache.count(key)) ddp_cache[key] = ddp_run(c.kind, c.world, false, Mode::BroadcastSync, 20);
    if (!single_cache.count(static_cast<int>(c.kind))) single_cache[static_cast<int>(c.kind)] = single_process(c.kind, 20);
    plain = ddp_cache[key];
    single = single_cache[static_cast<int>(c.kind)];
  }
  const auto zero = ddp_run(c.kind, c.world, true, c.mode, 20);
  for (int r = 0; r < c.world; ++r) {
    expect_equal_states(zero[static_cast<size_t>(r)], plain[static_cast<size_t>(r)], /*bitwise=*/true,
                        "ZeRO vs DDP with the unsharded optimizer, rank " + std::to_string(r));
    expect_equal_states(zero[static_cast<size_t>(r)], single, /*bitwise=*/false, "ZeRO vs the single process, rank " + std::to_string(r));
  }
  // The weights moved (the comparison is not of untouched models).
  EXPECT_FALSE(allclose(zero[0]["0.weight"], make_model()->state_dict()["0.weight"], 1e-3, 1e-3));
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Kind k : {Kind::SgdMomentum, Kind::Adam, Kind::AdamW})
    for (int w : {2, 3})
      for (Mode m : {Mode::BroadcastSync, Mode::BroadcastOverlap, Mode::AllGatherOverlap}) out.push_back({k, w, m});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, ZeroEquivalence, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(kind_name(info.param.kind)) + "_" + std::to_string(info.param.world) + "ranks_" + mode_name(info.param.mode);
});

TEST(ZeroEquivalence, AddParamGroupMidTraining) {
  // Weights first; after 5 steps the biases join as a second group (lr 0.1): the old group keeps its
  // owners, and the weights equal the unsharded optimizer's on 3 ranks.
  auto run = [](bool zero) {
    std::vector<OrderedDict<std::string, Tensor>> out(3);
    run_ranks(3, [&](const ProcessGroupPtr& pg, int rank) {
      nn::Sequential model = make_model();
      nn::DistributedDataParallel ddp(model, pg);
      std::vector<Tensor> weights, biases;
      for (const auto& item : model->named_parameters()) (item.key().find("bias") != std::string::npos ? biases : weights).push_back(item.value());
      std::unique_ptr<optim::Optimizer> opt;
      if (zero)
        opt = std::make_unique<ZeroRedundancyOptimizer>(weights, optim::SGDOptions(0.05).momentum(0.9), pg);
      else
        opt = std::make_unique<optim::SGD>(weights, optim::SGDOptions(0.05).momentum(0.9));
      std::vector<std::vector<int64_t>> before;
      if (zero) before = static_cast<ZeroRedundancyOptimizer&>(*opt).partition();
      for (int s = 0; s < 10; ++s) {
        if (s == 5) opt->add_param_group(OptimizerParamGroup(biases, optim::SGDOptions(0.1)));
        auto [x, y] = batch(s);
        opt->zero_grad();
        ddp->forward_loss(nn::CrossEntropyLoss(), rows_of(y, rank, 3), rows_of(x, rank, 3)).backward();
        opt->step();
      }
      if (zero) {
        const auto& after = static_cast<ZeroRedundancyOptimizer&>(*opt).partition();
        for (size_t r = 0; r < before.size(); ++r)
          for (size_t k = 0; k < before[r].size(); ++k) EXPECT_EQ(after[r][k], before[r][k]) << "the old group's owners changed";
        EXPECT_EQ(opt->param_groups().size(), 2u);
      }
      out[static_cast<size_t>(rank)] = model->state_dict();
    });
    return out;
  };
  const auto zero = run(true), plain = run(false);
  for (int r = 0; r < 3; ++r) expect_equal_states(zero[static_cast<size_t>(r)], plain[static_cast<size_t>(r)], true, "rank " + std::to_string(r));
}

// `a` is called (its hooks run); `b`'s forward is called directly, skipping hooks: the first step
// after overlap_with finds b's hook silent and waits for b's parameters before each forward instead.
struct Mixed : nn::Module {
  nn::Linear a{nullptr}, b{nullptr};
  Mixed() {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(42);
    a = register_module("a", nn::Linear(10, 32));
    b = register_module("b", nn::Linear(32, 3));
  }
  Tensor forward(const Tensor& x) { return b->forward(tanh(a(x))); }
};

TEST(ZeroEquivalence, OverlapWithAModuleUsedWithoutItsHooks) {
  auto run = [](bool zero) {
    std::vector<OrderedDict<std::string, Tensor>> out(2);
    run_ranks(2, [&](const ProcessGroupPtr& pg, int rank) {
      auto model = std::make_shared<Mixed>();
      nn::DistributedDataParallel ddp(model, pg);
      std::unique_ptr<optim::Optimizer> opt;
      if (zero) {
        ZeroRedundancyOptimizerOptions o;
        o.bucket_cap_mb = 1.0 / 1024;
        auto z = std::make_unique<ZeroRedundancyOptimizer>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9), pg, o);
        z->overlap_with(*model);
        opt = std::move(z);
      } else {
        opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
      }
      for (int s = 0; s < 8; ++s) {
        auto [x, y] = batch(s);
        opt->zero_grad();
        ddp->forward_loss(nn::CrossEntropyLoss(), rows_of(y, rank, 2), rows_of(x, rank, 2)).backward();
        opt->step();
      }
      if (zero) static_cast<ZeroRedundancyOptimizer&>(*opt).wait_for_params();
      out[static_cast<size_t>(rank)] = model->state_dict();
    });
    return out;
  };
  const auto zero = run(true), plain = run(false);
  for (int r = 0; r < 2; ++r) expect_equal_states(zero[static_cast<size_t>(r)], plain[static_cast<size_t>(r)], true, "rank " + std::to_string(r));
}

// ---------------------------------------------------------------- checkpoints

enum class Ckpt { Consolidated, Sharded };

// 10 steps on 2 ranks, then a checkpoint (model + optimizer); 10 more on 3 ranks (ZeRO) and on 1
// (unsharded) from it; both equal to 20 uninterrupted steps.
void checkpoint_round_trip(Ckpt how) {
  const Kind kind = Kind::Adam;
  dp::test::TempDir dir;
  const std::string model_path = (dir.path / "model.safetensors").string();
  const std::string optim_path = (dir.path / "optim.safetensors").string();
  const std::string prefix = (dir.path / "optim").string();
  auto train = [&](nn::Sequential& model, nn::DistributedDataParallel<nn::SequentialImpl>* ddp, optim::Optimizer& opt, int rank, int world, int from,
                   int to) {
    for (int s = from; s < to; ++s) {
      auto [x, y] = batch(s);
      opt.zero_grad();
      if (ddp)
        (*ddp)->forward_loss(nn::CrossEntropyLoss(), rows_of(y, rank, world), rows_of(x, rank, world)).backward();
      else
        cross_entropy(model(x), y).backward();
      opt.step();
    }
  };
  // The unsharded reference: 10 steps, its state, then 10 more.
  nn::Sequential ref = make_model();
  Recipe rr = recipe(kind, *ref);
  auto ref_opt = rr.factory(rr.groups);
  train(ref, nullptr, *ref_opt, 0, 1, 0, 10);
  optim::OptimizerState ref_state = ref_opt->state_dict();
  OrderedDict<std::string, Tensor> ref_state_copy;
  for (const auto& item : ref_state.tensors) ref_state_copy.insert(item.key(), item.value().clone());
  train(ref, nullptr, *ref_opt, 0, 1, 10, 20);
  const auto want = ref->state_dict();

  run_ranks(2, [&](const ProcessGroupPtr& pg, int rank) {
    nn::Sequential model = make_model();
    nn::DistributedDataParallel ddp(model, pg);
    Recipe r = recipe(kind, *model);
    ZeroRedundancyOptimizer z(r.groups, r.factory, pg);
    train(model, &ddp, z, rank, 2, 0, 10);
    if (how == Ckpt::Consolidated) {
      z.consolidate_state_dict(0);
      if (rank == 0) {
        // The full state in Adam's own format, equal to the unsharded optimizer's.
        const optim::OptimizerState full = z.state_dict();
        EXPECT_EQ(full.metadata.at("optimizer"), "Adam");
        EXPECT_EQ(full.metadata.at("param_groups"), ref_state.metadata.at("param_groups"));
        ASSERT_EQ(full.tensors.size(), ref_state_copy.size());
        size_t i = 0;
        for (const auto& item : ref_state_copy) {
          EXPECT_EQ(full.tensors[i].key(), item.key());
          EXPECT_TRUE(allclose(full.tensors[i].value(), item.value(), 1e-4, 1e-7)) << item.key();
          ++i;
        }
        dp::save(z, optim_path);
        dp::save(*model, model_path);
      }
    } else {
      z.save_sharded(prefix);
      if (rank == 0) dp::save(*model, model_path);
    }
    pg->barrier()->wait();
  });
  if (how == Ckpt::Sharded) {
    int shards = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path))
      if (e.path().filename().string().find(".shard-") != std::string::npos) ++shards;
    EXPECT_EQ(shards, 2);
    EXPECT_TRUE(std::filesystem::exists(prefix + ".index.json"));
  }

  // 3 ranks, ZeRO.
  std::vector<OrderedDict<std::string, Tensor>> got(3);
  run_ranks(3, [&](const ProcessGroupPtr& pg, int rank) {
    nn::Sequential model = make_model();
    dp::load(*model, model_path);
    nn::DistributedDataParallel ddp(model, pg);
    Recipe r = recipe(kind, *model);
    ZeroRedundancyOptimizer z(r.groups, r.factory, pg);
    if (how == Ckpt::Consolidated)
      dp::load(z, optim_path);
    else
      z.load_sharded(prefix);
    EXPECT_GT(z.local_state_bytes(), 0);
    train(model, &ddp, z, rank, 3, 10, 20);
    got[static_cast<size_t>(rank)] = model->state_dict();
  });
  for (int r = 0; r < 3; ++r) expect_equal_states(got[static_cast<size_t>(r)], want, false, "3 ranks from the checkpoint, rank " + std::to_string(r));

  // 1 process, the unsharded optimizer.
  nn::Sequential model = make_model();
  dp::load(*model, model_path);
  Recipe r = recipe(kind, *model);
  auto opt = r.factory(r.groups);
  if (how == Ckpt::Consolidated)
    dp::load(*opt, optim_path);
  else
    opt->load_state_dict(load_zero_shards(prefix));
  train(model, nullptr, *opt, 0, 1, 10, 20);
  expect_equal_states(model->state_dict(), want, false, "1 process, unsharded, from the checkpoint");
}

TEST(ZeroCheckpoint, ConsolidatedFromTwoRanksLoadsOnThreeAndOne) { checkpoint_round_trip(Ckpt::Consolidated); }
TEST(ZeroCheckpoint, ShardedFromTwoRanksLoadsOnThreeAndOne) { checkpoint_round_trip(Ckpt::Sharded); }

TEST(ZeroCheckpoint, InterruptedShardedSaveLeavesThePreviousCheckpoint) {
  dp::test::TempDir dir;
  const std::string prefix = (dir.path / "optim").string();
  run_ranks(2, [&](const ProcessGroupPtr& pg, int rank) {
    nn::Sequential model = make_model();
    nn::DistributedDataParallel ddp(model, pg);
    ZeroRedundancyOptimizer z(model->parameters(), optim::AdamOptions(1e-2), pg);
    auto step = [&](int s) {
      auto [x, y] = batch(s);
      z.zero_grad();
      ddp->forward_loss(nn::CrossEntropyLoss(), rows_of(y, rank, 2), rows_of(x, rank, 2)).backward();
      z.step();
    };
    step(0);
    z.save_sharded(prefix);
    const optim::OptimizerState first = load_zero_shards(prefix);
    step(1);
    // Rank 1's disk fills up halfway through its shard: every rank fails, naming rank 1.
    if (rank == 1) dp::detail::set_save_fault({/*after_bytes=*/64});
    try {
      z.save_sharded(prefix);
      ADD_FAILURE() << "rank " << rank << ": save_sharded did not fail";
    } catch (const IOError& e) {
      EXPECT_THAT(e.what(), HasSubstr("save_sharded: rank 1 of 2"));
    }
    if (rank == 1) dp::detail::clear_save_fault();
    // The index still names the first save, whose shards are intact.
    const optim::OptimizerState again = load_zero_shards(prefix);
    ASSERT_EQ(again.tensors.size(), first.tensors.size());
    for (size_t i = 0; i < first.tensors.size(); ++i) EXPECT_TRUE(equal(again.tensors[i].value(), first.tensors[i].value()));
    pg->barrier()->wait();
    // A later save succeeds and removes the first save's shards.
    z.save_sharded(prefix);
    pg->barrier()->wait();
    if (rank == 0) {
      int shards = 0;
      for (const auto& e : std::filesystem::directory_iterator(dir.path))
        if (e.path().filename().string().find(".shard-") != std::string::npos) ++shards;
      EXPECT_LE(shards, 4);  // this save's 2 (+ at most the failed save's orphans, never more)
    }
  });
}

// ---------------------------------------------------------------- memory

nn::Sequential wide_model(int64_t width, int layers) {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(7);
  nn::Sequential m;
  for (int i = 0; i < layers; ++i) m->push_back(nn::Linear(width, width));
  return m;
}

int64_t state_bytes(const optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (const auto& item : opt.state_dict().tensors) bytes += static_cast<int64_t>(item.value().nbytes());
  return bytes;
}

TEST(ZeroMemory, StateBytesPerRankFallAsOneOverWorld) {
  // 6 Linear(64, 64) layers under Adam: exp_avg and exp_avg_sq per parameter (and an 8-byte step).
  nn::Sequential ref = wide_model(64, 6);
  optim::Adam plain(ref->parameters(), optim::AdamOptions(1e-3));
  for (Tensor p : ref->parameters()) p.set_grad(ones_like(p));
  plain.step();
  const int64_t total = state_bytes(plain);
  for (int world : {1, 2, 3}) {
    std::vector<int64_t> bytes(static_cast<size_t>(world));
    run_ranks(world, [&](const ProcessGroupPtr& pg, int rank) {
      nn::Sequential model = wide_model(64, 6);
      ZeroRedundancyOptimizer z(model->parameters(), optim::AdamOptions(1e-3), pg);
      for (Tensor p : model->parameters()) p.set_grad(ones_like(p));
      z.step();
      bytes[static_cast<size_t>(rank)] = z.local_state_bytes();
    });
    int64_t sum = 0;
    for (int r = 0; r < world; ++r) {
      sum += bytes[static_cast<size_t>(r)];
      EXPECT_LE(static_cast<double>(bytes[static_cast<size_t>(r)]), 1.02 * static_cast<double>(total) / world) << world << " ranks, rank " << r;
      std::printf("[ memory ] Adam state, 6 x Linear(64, 64), %d rank(s): rank %d holds %lld bytes (unsharded: %lld)\n", world, r,
                  static_cast<long long>(bytes[static_cast<size_t>(r)]), static_cast<long long>(total));
    }
    EXPECT_EQ(sum, total) << world << " ranks: the shards together hold exactly the unsharded state";
  }
}

// Real processes (fork, FileStore): 2 ranks of DDP + Adam over 4 x Linear(256, 256), ZeRO (broadcast,
// then all-gather) and the unsharded optimizer; each reports the inner state's bytes, the host
// allocator's peak growth during the steps and the time of a step. The final weights of all three
// runs are bitwise equal.
TEST(ZeroMemory, TwoProcessesStateBytesAndAllocatorPeak) {
  dp::test::TempDir dir;
  constexpr int kWorld = 2, kSteps = 5;
  std::vector<std::unique_ptr<dp::test::ForkedChild>> children;
  for (int r = 0; r < kWorld; ++r)
    children.push_back(std::make_unique<dp::test::ForkedChild>([&, r] {
      auto store = std::make_shared<FileStore>((dir.path / "store").string());
      auto pg = make_gloo_process_group(store, r, kWorld);
      std::ofstream report(dir.path / ("report" + std::to_string(r)));
      for (int phase = 0; phase < 3; ++phase) {
        nn::Sequential model = wide_model(256, 4);
        nn::DistributedDataParallel ddp(model, pg);
        const int64_t base = memory_stats(Device::cpu()).allocated;
        reset_peak_memory_stats(Device::cpu());
        std::unique_ptr<optim::Optimizer> opt;
        ZeroRedundancyOptimizerOptions o;
        o.sync = phase == 1 ? ParamSync::AllGather : ParamSync::Broadcast;
        if (phase < 2)
          opt = std::make_unique<ZeroRedundancyOptimizer>(model->parameters(), optim::AdamOptions(1e-3), pg, o);
        else
          opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3));
        double step_ms = 0;
        for (int s = 0; s < kSteps; ++s) {
          Generator gen(500 + static_cast<uint64_t>(s));
          Tensor x = randn({kRows, 256}, {}, &gen);
          opt->zero_grad();
          ddp->forward_loss(nn::MSELoss(), rows_of(x, r, kWorld), rows_of(x, r, kWorld)).backward();
          const auto t0 = std::chrono::steady_clock::now();
          opt->step();
          if (s > 0) step_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
        const int64_t peak = memory_stats(Device::cpu()).peak_allocated - base;
        const int64_t bytes = phase < 2 ? static_cast<ZeroRedundancyOptimizer&>(*opt).local_state_bytes() : state_bytes(*opt);
        report << phase << " " << bytes << " " << peak << " " << step_ms / (kSteps - 1) << "\n";
        dp::save(model->state_dict(), (dir.path / ("w" + std::to_string(r) + "_" + std::to_string(phase))).string());
      }
      return 0;
    }));
  for (auto& c : children) ASSERT_EQ(c->wait(std::chrono::seconds(120)), 0);
  std::map<int, std::vector<std::vector<double>>> rows;  // phase -> per rank {bytes, peak, ms}
  for (int r = 0; r < kWorld; ++r) {
    std::ifstream in(dir.path / ("report" + std::to_string(r)));
    int phase;
    double bytes, peak, ms;
    while (in >> phase >> bytes >> peak >> ms) rows[phase].push_back({bytes, peak, ms});
  }
  ASSERT_EQ(rows.size(), 3u);
  const double unsharded = rows[2][0][0];
  const char* names[] = {"ZeRO (broadcast)", "ZeRO (all-gather)", "unsharded Adam"};
  for (int phase = 0; phase < 3; ++phase)
    for (int r = 0; r < kWorld; ++r) {
      const auto& v = rows[phase][static_cast<size_t>(r)];
      std::printf(
          "[ memory ] 2 processes, 4 x Linear(256, 256), Adam, %s, rank %d: state %.0f bytes, allocator peak growth %.0f bytes, step %.2f ms\n",
          names[phase], r, v[0], v[1], v[2]);
      if (phase < 2) {
        EXPECT_NEAR(v[0], unsharded / kWorld, 0.02 * unsharded) << names[phase] << " rank " << r;
      }
      // The broadcast writes into the parameters; the all-gather's flat per-rank buffers hold a
      // copy of the parameters, which here eats what sharding the state saved.
      if (phase == 0) {
        EXPECT_LT(v[1], rows[2][static_cast<size_t>(r)][1] - 0.4 * unsharded)
            << "the peak of " << names[phase] << " is not below the unsharded optimizer's";
      }
    }
  for (int r = 0; r < kWorld; ++r) {
    const auto base = dp::load((dir.path / ("w" + std::to_string(r) + "_2")).string());
    for (int phase = 0; phase < 2; ++phase) {
      const auto got = dp::load((dir.path / ("w" + std::to_string(r) + "_" + std::to_string(phase))).string());
      expect_equal_states(got, base, true, std::string(names[phase]) + " vs unsharded, rank " + std::to_string(r));
    }
  }
}

// ---------------------------------------------------------------- the example of docs/distributed.md

TEST(ZeroDocs, ExampleRuns) {
  dp::test::TempDir dir;
  const std::string d = dir.path.string() + "/";
  std::vector<OrderedDict<std::string, Tensor>> weights(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int) {
    // The body of the example, with its files in a temporary directory.
    const int rank = group->rank(), world = group->size();
    dp::manual_seed(0);
    dp::nn::Sequential model(dp::nn::Linear(10, 32), dp::nn::Tanh(), dp::nn::Linear(32, 3));
    dp::nn::DistributedDataParallel ddp(model, group);
    dp::optim::ZeroRedundancyOptimizer opt(model->parameters(), dp::optim::AdamOptions(1e-2), group);
    dp::optim::StepLR schedule(opt, /*step_size=*/5, /*gamma=*/0.5);
    for (int step = 0; step < 20; ++step) {
      dp::Generator gen(1000 + step);
      dp::Tensor x = dp::randn({12, 10}, {}, &gen), y = dp::randint(0, 3, {12}, dp::kInt64, &gen);
      const int64_t rows = 12 / world;
      opt.zero_grad();
      ddp->forward_loss(dp::nn::CrossEntropyLoss(), y.narrow(0, rank * rows, rows), x.narrow(0, rank * rows, rows)).backward();
      opt.step();
      schedule.step();
    }
    opt.consolidate_state_dict(0);
    if (rank == 0) dp::save(opt, d + "optim.safetensors");
    opt.save_sharded(d + "optim");
    dp::distributed::save_checkpoint(*group, model->state_dict(), d + "model.safetensors");
    weights[static_cast<size_t>(rank)] = model->state_dict();
    EXPECT_DOUBLE_EQ(opt.get_lr(0), 1e-2 * 0.0625);  // 20 steps of StepLR(5, 0.5): 0.5^4
  });
  expect_equal_states(weights[1], weights[0], true, "the two ranks' weights");
  // Both checkpoints hold the whole state and load into an unsharded Adam.
  dp::manual_seed(0);
  dp::nn::Sequential model(dp::nn::Linear(10, 32), dp::nn::Tanh(), dp::nn::Linear(32, 3));
  optim::Adam a(model->parameters(), optim::AdamOptions(1e-2)), b(model->parameters(), optim::AdamOptions(1e-2));
  dp::load(a, d + "optim.safetensors");
  b.load_state_dict(load_zero_shards(d + "optim"));
  EXPECT_EQ(a.state().size(), 4u);
  EXPECT_EQ(a.state_dict().tensors.size(), b.state_dict().tensors.size());
  EXPECT_EQ(state_hash(a.state_dict().tensors), state_hash(b.state_dict().tensors));
  EXPECT_DOUBLE_EQ(a.get_lr(0), 1e-2 * 0.0625);
}

// ---------------------------------------------------------------- bad input

template <typename E, typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << part;
  } catch (const E& e) {
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

TEST(ZeroErrors, ParameterInTwoGroupsAndNotOnThisProcessDevices) {
  run_ranks(1, [](const ProcessGroupPtr& pg, int) {
    Tensor a = ones({2}).requires_grad_(true), b = ones({3}).requires_grad_(true);
    expect_error<ValueError>(
        [&] {
          ZeroRedundancyOptimizer({OptimizerParamGroup({a}), OptimizerParamGroup({b, a})}, optim::SGDOptions(0.1), pg);
        },
        "appears more than once");
    // A tensor labelled with a CPU device this process does not have (host memory, never read).
    static float host[2];
    const Device missing = Device::cpu(cpu_device_count());
    auto storage = std::make_shared<StorageImpl>(host, sizeof(host), missing, [](void*) {});
    Tensor elsewhere(std::make_shared<TensorImpl>(storage, Shape{2}, Shape{1}, 0, kFloat32));
    elsewhere.requires_grad_(true);
    expect_error<DeviceError>(
        [&] {
          ZeroRedundancyOptimizer(std::vector<Tensor>{a, elsewhere}, optim::AdamOptions(), pg);
        },
        "not a device of this process");
    expect_error<ValueError>([&] { ZeroRedundancyOptimizer(std::vector<Tensor>{a}, OptimizerFactory(), pg); }, "the optimizer factory is empty");
    expect_error<ValueError>([&] { ZeroRedundancyOptimizer(std::vector<Tensor>{a}, optim::SGDOptions(0.1), nullptr); }, "process group is null");
    expect_error<ValueError>([&] { ZeroRedundancyOptimizer(std::vector<Tensor>{}, optim::SGDOptions(0.1), pg); }, "empty parameter list");
    ZeroRedundancyOptimizer z(std::vector<Tensor>{a}, optim::SGDOptions(0.1), pg);
    expect_error<ValueError>([&] { z.add_param_group(OptimizerParamGroup({b, a})); }, "appears more than once");
    EXPECT_EQ(z.param_groups().size(), 1u);
  });
}

TEST(ZeroErrors, MismatchedParameterListsAcrossRanks) {
  const auto errors = run_ranks_collect(2, [](const ProcessGroupPtr& pg, int rank) {
    std::vector<Tensor> params{ones({4, 3}).requires_grad_(true), ones({3}).requires_grad_(true)};
    if (rank == 1) params[1] = ones({5}).requires_grad_(true);
    ZeroRedundancyOptimizer z(params, optim::SGDOptions(0.1), pg);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << "rank " << r << " did not fail";
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("the ranks passed different parameter lists (ranks 1 differ from rank 0"));
      EXPECT_THAT(e.what(), HasSubstr("rank 0: 1 groups, 2 parameters, 15 elements"));
      EXPECT_THAT(e.what(), HasSubstr("rank 1: 1 groups, 2 parameters, 17 elements"));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

TEST(ZeroErrors, StateDictBeforeConsolidateOnTheWrongRankAndStale) {
  run_ranks(2, [](const ProcessGroupPtr& pg, int rank) {
    Tensor a = ones({4}).requires_grad_(true), b = ones({2}).requires_grad_(true);
    ZeroRedundancyOptimizer z(std::vector<Tensor>{a, b}, optim::SGDOptions(0.1).momentum(0.9), pg);
    expect_error<ValueError>([&] { z.state_dict(); }, "has not been consolidated; call consolidate_state_dict(" + std::to_string(rank) + ")");
    expect_error<ValueError>([&] { z.consolidate_state_dict(2); }, "rank 2 is not a rank of the group");
    (a.sum() + b.sum()).backward();
    z.step();
    z.consolidate_state_dict(0);
    if (rank == 0) {
      EXPECT_EQ(z.state_dict().tensors.size(), 2u);  // both momentum buffers
    } else {
      expect_error<ValueError>([&] { z.state_dict(); }, "consolidated on rank 0, not on this rank (1)");
    }
    z.step();
    if (rank == 0) expect_error<ValueError>([&] { z.state_dict(); }, "stale: step() ran 1 time(s) since consolidate_state_dict(0)");
  });
}

TEST(ZeroErrors, BadStatesFailOnEveryRank) {
  dp::test::TempDir dir;
  run_ranks(2, [&](const ProcessGroupPtr& pg, int rank) {
    Tensor a = ones({4}).requires_grad_(true), b = ones({2}).requires_grad_(true);
    ZeroRedundancyOptimizer z(std::vector<Tensor>{a, b}, optim::AdamOptions(1e-2), pg);
    ASSERT_EQ(z.owner(1), 1);  // b (2 elements) goes to rank 1
    // Another optimizer's state.
    optim::SGD sgd(std::vector<Tensor>{a.detach().clone().requires_grad_(true), b.detach().clone().requires_grad_(true)}, optim::SGDOptions(0.1));
    expect_error<ValueError>([&] { z.load_state_dict(sgd.state_dict()); }, "the state was saved by SGD, not Adam");
    // A tensor of the wrong shape: every rank checks every shape.
    std::vector<Tensor> copies{a.detach().clone().requires_grad_(true), b.detach().clone().requires_grad_(true)};
    optim::Adam adam(copies, optim::AdamOptions(1e-2));
    for (Tensor p : copies) p.set_grad(ones_like(p));
    adam.step();
    optim::OptimizerState bad = adam.state_dict();
    bad.tensors.insert_or_assign("state.1.exp_avg", zeros({3}));
    expect_error<ShapeError>([&] { z.load_state_dict(bad); }, "state.1.exp_avg has shape [3] but its parameter has shape [2]");
    // An entry only the owner's Adam rejects: rank 0 fails too, naming rank 1.
    optim::OptimizerState odd = adam.state_dict();
    odd.tensors.insert("state.1.bogus", zeros({2}));
    try {
      z.load_state_dict(odd);
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("ZeroRedundancyOptimizer.load_state_dict: rank 1 of 2: "));
      EXPECT_THAT(e.what(), HasSubstr("bogus"));
    }
    EXPECT_EQ(z.local_state_bytes(), 0);  // nothing was loaded anywhere
    // A sharded checkpoint that is not there.
    const std::string missing = (dir.path / "none").string();
    expect_error<IOError>([&] { z.load_sharded(missing); }, "load_sharded: rank 0 of 2: load_sharded: cannot open");
    // A sharded checkpoint of other parameters.
    if (rank == 0) {
      auto solo = std::make_shared<HashStore>();
      auto one = make_gloo_process_group(solo, 0, 1);
      Tensor c = ones({7}).requires_grad_(true);
      ZeroRedundancyOptimizer other(std::vector<Tensor>{c}, optim::AdamOptions(1e-2), one);
      other.save_sharded((dir.path / "other").string());
    }
    pg->barrier()->wait();
    expect_error<ValueError>([&] { z.load_sharded((dir.path / "other").string()); }, "was saved for other parameters");
  });
}

}  // namespace
}  // namespace dp::distributed
