// Scheduler mechanics beyond the PyTorch value sequences of test_optim_golden: the constructor's
// initial step, last_epoch, state save/resume, argument checks, and the rate reaching the update;
// and against PyTorch 1.13 (tests/golden/gen_lr_scheduler.py): MultiStepLR, ExponentialLR and
// LinearLR's sequences, every scheduler's state_dict at a point mid-run, and resuming from a
// checkpoint written by dp::save(optimizer, scheduler, path) into a new optimizer and scheduler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "support/golden.h"
#include "support/temp_files.h"

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

// ---------------------------------------------------------------- against PyTorch

using test::golden_file;
using test::json;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const json& scheduler_case(const std::string& name) {
  for (const json& c : golden_file("lr_scheduler.json")["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

// Two groups at the case's rates (or `lr` for both), as the generator's optimizer.
std::unique_ptr<SGD> make_optimizer(const json& c, std::optional<double> lr = std::nullopt) {
  Tensor a = zeros({2}).requires_grad_(true), b = zeros({2}).requires_grad_(true);
  return std::make_unique<SGD>(std::vector<OptimizerParamGroup>{OptimizerParamGroup({a}, SGDOptions(lr.value_or(c["group_lrs"][0].get<double>()))),
                                                                OptimizerParamGroup({b}, SGDOptions(lr.value_or(c["group_lrs"][1].get<double>())))},
                               SGDOptions(1.0));
}

std::unique_ptr<optim::LRScheduler> make_scheduler(optim::Optimizer& opt, const json& c) {
  const json& a = c["args"];
  auto num = [&](const char* key, double fallback) { return a.contains(key) ? a[key].get<double>() : fallback; };
  const std::string type = c["scheduler"];
  if (type == "MultiStepLR") return std::make_unique<optim::MultiStepLR>(opt, a["milestones"].get<std::vector<int64_t>>(), num("gamma", 0.1));
  if (type == "ExponentialLR") return std::make_unique<optim::ExponentialLR>(opt, a["gamma"].get<double>());
  if (type == "LinearLR")
    return std::make_unique<optim::LinearLR>(opt, num("start_factor", 1.0 / 3), num("end_factor", 1.0),
                                             a.contains("total_iters") ? a["total_iters"].get<int64_t>() : 5);
  if (type == "StepLR") return std::make_unique<StepLR>(opt, a["step_size"].get<int64_t>(), num("gamma", 0.1));
  return std::make_unique<CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(), num("eta_min", 0.0));
}

void expect_rates(const optim::LRScheduler& s, const optim::Optimizer& opt, const json& want, const std::string& where) {
  ASSERT_EQ(s.get_last_lr().size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(s.get_last_lr()[g], want[g].get<double>()) << where << " group " << g;  // bit for bit
    EXPECT_EQ(opt.get_lr(g), want[g].get<double>()) << where << " group " << g;
  }
}

class SchedulerPyTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerPyTorch, SequenceStateDictAndResume) {
  const json& c = scheduler_case(GetParam());
  auto opt = make_optimizer(c);
  auto s = make_scheduler(*opt, c);
  EXPECT_EQ(s->name(), c["scheduler"].get<std::string>());
  const json& lrs = c["lrs"];
  const int64_t resume_at = c["resume_at"].get<int64_t>();
  test::TempDir dir;
  const std::string path = dir.file("optim.safetensors");
  for (size_t step = 0; step < lrs.size(); ++step) {
    if (step > 0) {
      opt->step();
      s->step();
    }
    EXPECT_EQ(s->last_epoch(), static_cast<int64_t>(step));
    expect_rates(*s, *opt, lrs[step], "epoch " + std::to_string(step));
    if (static_cast<int64_t>(step) != resume_at) continue;
    // PyTorch's state_dict at this point.
    const optim::LRSchedulerState st = s->state_dict();
    const json& want = c["state"];
    EXPECT_EQ(st.last_epoch, want["last_epoch"].get<int64_t>());
    EXPECT_EQ(st.step_count, want["step_count"].get<int64_t>());
    EXPECT_EQ(st.base_lrs, want["base_lrs"].get<std::vector<double>>());
    EXPECT_EQ(st.last_lrs, want["last_lrs"].get<std::vector<double>>());
    EXPECT_EQ(st.scheduler, c["scheduler"].get<std::string>());
    EXPECT_EQ(st.settings, (want["settings"].get<std::map<std::string, std::vector<double>>>()));
    dp::save(*opt, *s, path);
  }

  // A new process: a fresh optimizer (every rate 1.0) and scheduler, both loaded from the file.
  auto opt2 = make_optimizer(c, 1.0);
  auto s2 = make_scheduler(*opt2, c);
  dp::load(*opt2, *s2, path);
  EXPECT_EQ(s2->last_epoch(), resume_at);
  expect_rates(*s2, *opt2, lrs[resume_at], "after loading");
  const json& resumed = c["resumed_lrs"];
  for (size_t k = 0; k < resumed.size(); ++k) {
    opt2->step();
    s2->step();
    expect_rates(*s2, *opt2, resumed[k], "resumed step " + std::to_string(k));
  }
  EXPECT_EQ(s2->base_lrs(), s->base_lrs());
}

std::vector<std::string> pytorch_cases() {
  std::vector<std::string> names;
  for (const json& c : golden_file("lr_scheduler.json")["cases"]) names.push_back(c["name"]);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Golden, SchedulerPyTorch, ::testing::ValuesIn(pytorch_cases()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

// A training run interrupted mid-way and resumed from one checkpoint (model saved separately)
// ends with exactly the parameters of the uninterrupted run: momentum buffers, step counts and the
// rates all continue.
TEST(LRScheduler, ResumedTrainingEqualsUninterrupted) {
  auto run = [](int total, int stop_at, const std::string& path, bool resume) {
    manual_seed(3);
    Tensor w = randn({4, 3}).requires_grad_(true);
    Tensor x = randn({8, 4}), y = randn({8, 3});
    SGD opt({w}, SGDOptions(0.1).momentum(0.9));
    optim::LinearLR warmup(opt, 0.2, 1.0, 4);
    int start = 0;
    if (resume) {
      NoGradGuard no_grad;
      w.copy_(dp::load_file(path + ".w").tensors["w"]);
      dp::load(opt, warmup, path);
      start = stop_at;
    }
    std::vector<double> rates;
    for (int k = start; k < total; ++k) {
      opt.zero_grad();
      ((x.matmul(w) - y).pow(2)).mean().backward();
      opt.step();
      warmup.step();
      rates.push_back(opt.get_lr(0));
      if (!resume && k + 1 == stop_at) {
        dp::save(opt, warmup, path);
        OrderedDict<std::string, Tensor> weights;
        weights.insert("w", w.detach());
        dp::save(weights, path + ".w");
      }
    }
    return std::make_pair(w.detach().clone(), rates);
  };
  test::TempDir dir;
  const std::string path = dir.file("optim.safetensors");
  auto [w_full, rates_full] = run(10, 3, path, false);
  auto [w_resumed, rates_resumed] = run(10, 3, path, true);
  EXPECT_TRUE(equal(w_full, w_resumed));
  EXPECT_EQ(rates_resumed, std::vector<double>(rates_full.begin() + 3, rates_full.end()));
}

TEST(LRScheduler, LoadingAdoptsTheSavedSettingsAsPyTorch) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD a_opt({w}, SGDOptions(0.1));
  StepLR a(a_opt, 3, 0.5);
  for (int k = 0; k < 4; ++k) a.step();
  SGD b_opt({w}, SGDOptions(0.1));
  StepLR b(b_opt, 10);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.step_size(), 3);
  EXPECT_EQ(b.gamma(), 0.5);
  for (int k = 0; k < 8; ++k) {
    a.step();
    b.step();
    EXPECT_EQ(a.get_last_lr(), b.get_last_lr());
  }
  // A state without a scheduler name (only the four common fields) keeps b's settings.
  optim::LRSchedulerState bare;
  bare.last_epoch = 5;
  bare.step_count = 6;
  bare.base_lrs = {0.1};
  bare.last_lrs = {0.05};
  StepLR c(b_opt, 7, 0.25);
  c.load_state_dict(bare);
  EXPECT_EQ(c.step_size(), 7);
  EXPECT_EQ(c.last_epoch(), 5);
  EXPECT_EQ(b_opt.get_lr(0), 0.05);
}

TEST(LRScheduler, StateDictErrorsChangeNothing) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.1));
  StepLR step(opt, 3);
  step.step();
  optim::ExponentialLR other_opt_sched(opt, 0.5);
  const optim::LRSchedulerState exp_state = other_opt_sched.state_dict();
  const optim::LRSchedulerState before = step.state_dict();
  EXPECT_THAT([&] { step.load_state_dict(exp_state); },
              ThrowsMessage<ValueError>(HasSubstr("StepLR.load_state_dict: the state was saved by a ExponentialLR, not a StepLR")));
  optim::LRSchedulerState bad = before;
  bad.settings.erase("gamma");
  EXPECT_THAT([&] { step.load_state_dict(bad); }, ThrowsMessage<ValueError>(HasSubstr("the state has no 'gamma' setting")));
  bad = before;
  bad.settings["step_size"] = {2.5};
  EXPECT_THAT([&] { step.load_state_dict(bad); }, ThrowsMessage<ValueError>(HasSubstr("setting 'step_size' must be an integer >= 1")));
  bad = before;
  bad.last_lrs = {std::nan("")};
  EXPECT_THAT([&] { step.load_state_dict(bad); }, ThrowsMessage<ValueError>(HasSubstr("non-finite rate")));
  optim::LinearLR lin(opt, 0.5);
  optim::LRSchedulerState lbad = lin.state_dict();
  lbad.settings["start_factor"] = {0.0};
  EXPECT_THAT([&] { lin.load_state_dict(lbad); }, ThrowsMessage<ValueError>(HasSubstr("Starting multiplicative factor")));
  const optim::LRSchedulerState after = step.state_dict();
  EXPECT_EQ(after.last_epoch, before.last_epoch);
  EXPECT_EQ(after.settings, before.settings);
  EXPECT_EQ(step.step_size(), 3);
}

TEST(LRScheduler, StateJsonRoundTripAndHostileInput) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({OptimizerParamGroup({w}), OptimizerParamGroup({zeros({1}).requires_grad_(true)}, SGDOptions(0.03))}, SGDOptions(0.1));
  optim::MultiStepLR s(opt, {5, 2, 5}, 0.3);
  for (int k = 0; k < 6; ++k) s.step();
  const optim::LRSchedulerState st = s.state_dict();
  const optim::LRSchedulerState back = optim::lr_scheduler_state_from_json(optim::lr_scheduler_state_to_json(st));
  EXPECT_EQ(back.last_epoch, st.last_epoch);
  EXPECT_EQ(back.step_count, st.step_count);
  EXPECT_EQ(back.base_lrs, st.base_lrs);
  EXPECT_EQ(back.last_lrs, st.last_lrs);  // exact: the JSON numbers round-trip
  EXPECT_EQ(back.scheduler, "MultiStepLR");
  EXPECT_EQ(back.settings, st.settings);
  EXPECT_EQ(st.settings.at("milestones"), (std::vector<double>{2, 5, 5}));

  auto bad = [](const std::string& text, const std::string& part) {
    EXPECT_THAT([&] { optim::lr_scheduler_state_from_json(text); }, ThrowsMessage<ValueError>(HasSubstr(part))) << text;
  };
  bad("[1]", "lr_scheduler: the state must be a JSON object, got a list of 1 item(s)");
  bad("{\"step_count\":1,\"base_lrs\":[],\"last_lrs\":[]}", "the state has no 'last_epoch' field");
  bad("{\"last_epoch\":1.5,\"step_count\":1,\"base_lrs\":[],\"last_lrs\":[]}", "lr_scheduler.last_epoch must be an integer");
  bad("{\"last_epoch\":1,\"step_count\":1,\"base_lrs\":[0.1,\"x\"],\"last_lrs\":[]}", "lr_scheduler.base_lrs[1] must be a number");
  bad("{\"last_epoch\":1,\"step_count\":1,\"base_lrs\":[],\"last_lrs\":[],\"scheduler\":\"StepLR\"}", "no 'settings' field");
  bad("{\"last_epoch\":1,\"step_count\":1,\"base_lrs\":[],\"last_lrs\":[],\"scheduler\":\"StepLR\",\"settings\":{\"gamma\":0.5}}",
      "lr_scheduler.settings.gamma must be a list of numbers");
  bad(std::string(200, '[') + std::string(200, ']'), "lr_scheduler:");
  bad("{\"last_epoch\":", "lr_scheduler:");
}

TEST(LRScheduler, CheckpointErrorsNameTheFileAndChangeNothing) {
  test::TempDir dir;
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.1).momentum(0.9));
  StepLR s(opt, 2, 0.5);
  w.set_grad(ones({2}));
  opt.step();
  s.step();
  s.step();  // lr 0.05
  dp::save(opt, dir.file("optimizer_only.safetensors"));
  dp::save(opt, s, dir.file("both.safetensors"));

  Tensor w2 = zeros({2}).requires_grad_(true);
  SGD opt2({w2}, SGDOptions(0.7));
  StepLR s2(opt2, 2, 0.5);
  EXPECT_THAT([&] { dp::load(opt2, s2, dir.file("optimizer_only.safetensors")); },
              ThrowsMessage<ValueError>(HasSubstr("holds no learning-rate scheduler state")));
  optim::ExponentialLR e2(opt2, 0.9);
  EXPECT_THAT([&] { dp::load(opt2, e2, dir.file("both.safetensors")); },
              ThrowsMessage<ValueError>(AllOf(HasSubstr("saved by a StepLR, not a ExponentialLR"), HasSubstr("both.safetensors"))));
  // Nothing changed: not the optimizer's rate nor its state, not the schedulers.
  EXPECT_EQ(opt2.get_lr(0), 0.7);
  EXPECT_TRUE(opt2.state().empty());
  EXPECT_EQ(s2.last_epoch(), 0);
  // The plain loader reads a file with a scheduler entry too.
  dp::load(opt2, dir.file("both.safetensors"));
  EXPECT_EQ(opt2.get_lr(0), 0.05);
  EXPECT_EQ(opt2.state().size(), 1u);
  dp::load(opt2, s2, dir.file("both.safetensors"));
  EXPECT_EQ(s2.last_epoch(), 2);
  EXPECT_EQ(s2.get_last_lr(), std::vector<double>{0.05});
}

TEST(LRScheduler, NewSchedulersArgumentChecks) {
  Tensor w = zeros({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.1));
  EXPECT_THAT([&] { optim::LinearLR(opt, 0.0); },
              ThrowsMessage<ValueError>(HasSubstr("Starting multiplicative factor expected to be greater than 0")));
  EXPECT_THAT([&] { optim::LinearLR(opt, 1.5); }, ThrowsMessage<ValueError>(HasSubstr("Starting multiplicative factor")));
  EXPECT_THAT([&] { optim::LinearLR(opt, 0.5, 1.2); },
              ThrowsMessage<ValueError>(HasSubstr("Ending multiplicative factor expected to be between 0 and 1")));
  EXPECT_EQ(opt.get_lr(0), 0.1);  // a rejected LinearLR did not touch the rate
  optim::LinearLR warm(opt, 0.5, 1.0, 2);
  EXPECT_EQ(opt.get_lr(0), 0.05);  // PyTorch: the start factor applies at construction
  optim::MultiStepLR m(opt, {4, 1, 4});
  EXPECT_EQ(m.milestones(), (std::vector<int64_t>{1, 4, 4}));
}

}  // namespace
}  // namespace dp
