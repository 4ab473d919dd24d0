// Scheduler mechanics beyond the PyTorch value sequences (test_optim_golden): the constructor's
// initial step, last_epoch, state save/resume, argument checks, and the rate reaching the update.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "dp/optim/optim.h"

namespace dp {
namespace {

using optim::CosineAnnealingLR;
using optim::OptimizerParamGroup;
using optim::SGD;
using optim::SGDOptions;
using optim::StepLR;

TEST(LRScheduler, ConstructionIsEpochZeroWithUnchangedRates) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.2));
  StepLR s(opt, 2, 0.5);
  EXPECT_EQ(s.last_epoch(), 0);
  EXPECT_EQ(s.get_last_lr(), std::vector<double>{0.2});
  EXPECT_EQ(s.base_lrs(), std::vector<double>{0.2});
  s.step();
  EXPECT_EQ(s.last_epoch(), 1);
  EXPECT_EQ(opt.get_lr(0), 0.2);
  s.step();
  EXPECT_EQ(s.last_epoch(), 2);
  EXPECT_EQ(opt.get_lr(0), 0.1);
  EXPECT_EQ(s.step_size(), 2);
  EXPECT_EQ(s.gamma(), 0.5);
}

TEST(LRScheduler, TheUpdateUsesTheScheduledRate) {
  Tensor w = zeros({1}).requires_grad_(true);
  SGD opt({w}, SGDOptions(1.0));
  StepLR s(opt, 1, 0.5);
  std::vector<float> seen;
  for (int k = 0; k < 3; ++k) {
    w.set_grad(ones({1}));
    const float before = w.to_vector<float>()[0];
    opt.step();
    seen.push_back(before - w.to_vector<float>()[0]);
    s.step();
  }
  EXPECT_EQ(seen, (std::vector<float>{1.0f, 0.5f, 0.25f}));
}

TEST(LRScheduler, StateResumesIdentically) {
  Tensor a = zeros({2}).requires_grad_(true), b = zeros({2}).requires_grad_(true);
  SGD ref_opt({OptimizerParamGroup({a}), OptimizerParamGroup({b}, SGDOptions(0.01))}, SGDOptions(0.1));
  CosineAnnealingLR ref(ref_opt, 6, 0.001);
  for (int k = 0; k < 9; ++k) ref.step();
  const optim::LRSchedulerState saved = ref.state();
  EXPECT_EQ(saved.last_epoch, 9);
  EXPECT_EQ(saved.step_count, 10);
  EXPECT_EQ(saved.base_lrs, (std::vector<double>{0.1, 0.01}));

  Tensor c = zeros({2}).requires_grad_(true), d = zeros({2}).requires_grad_(true);
  SGD opt({OptimizerParamGroup({c}), OptimizerParamGroup({d}, SGDOptions(0.01))}, SGDOptions(0.1));
  CosineAnnealingLR resumed(opt, 6, 0.001);
  resumed.load_state(saved);
  EXPECT_EQ(resumed.last_epoch(), 9);
  EXPECT_EQ(opt.get_lr(0), ref_opt.get_lr(0));
  for (int k = 0; k < 15; ++k) {
    ref.step();
    resumed.step();
    EXPECT_EQ(resumed.get_last_lr(), ref.get_last_lr()) << "step " << k;
    EXPECT_EQ(resumed.last_epoch(), ref.last_epoch());
  }
  optim::LRSchedulerState bad = saved;
  bad.base_lrs.pop_back();
  EXPECT_THROW(resumed.load_state(bad), ValueError);
}

TEST(LRScheduler, ArgumentChecks) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.1));
  EXPECT_THAT([&] { StepLR(opt, 0); }, ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("step_size must be >= 1, got 0")));
  EXPECT_THAT([&] { CosineAnnealingLR(opt, 0); }, ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("T_max must be >= 1")));
  // A group added after the scheduler was made.
  StepLR s(opt, 3);
  opt.add_param_group(OptimizerParamGroup({zeros({1}).requires_grad_(true)}));
  EXPECT_THAT([&] { s.step(); }, ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("scheduler was made for 1")));
}

}  // namespace
}  // namespace dp
