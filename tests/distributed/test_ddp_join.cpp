// DistributedDataParallel with uneven inputs under Join (dp/distributed/join.h): ranks with 3, 5 and
// 0 batches end with PyTorch 1.13's weights (tests/golden/gen_ddp_join.py: DDP.join with gloo, both
// divide modes), as threads and as real processes; forward_loss under Join equals one process
// training on the rows of the ranks still training; buffers, comm hooks, throw_on_early_termination,
// uneven ranks without Join failing instead of hanging, and misuse errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp::distributed {
namespace {

using test::run_ranks;
using test::run_ranks_collect;
namespace F = nn::functional;

constexpr int kRows = 4;

double x_value(int rank, int batch, int row, int col) { return static_cast<double>((rank * 7 + batch * 5 + row * 3 + col) % 11 - 5) / 4.0; }
double y_value(int rank, int batch, int row) { return static_cast<double>((rank * 3 + batch * 2 + row) % 7 - 3) / 2.0; }
double init_value(int index, int k) { return static_cast<double>((index * 13 + k * 7) % 17 - 8) / 20.0; }

// The generator's model: Sequential(Linear(4, 3), Tanh, Linear(3, 1)) in float64, values by formula.
nn::Sequential make_model() {
  nn::Sequential model(nn::Linear(4, 3), nn::Tanh(), nn::Linear(3, 1));
  model->to(kFloat64);
  NoGradGuard no_grad;
  int index = 0;
  for (Tensor& p : model->parameters()) {
    Tensor flat = p.view({-1});
    double* d = flat.data_ptr<double>();
    for (int64_t k = 0; k < flat.numel(); ++k) d[k] = init_value(index, static_cast<int>(k));
    ++index;
  }
  return model;
}

std::pair<Tensor, Tensor> batch(int rank, int b) {
  std::vector<double> x, y;
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < 4; ++j) x.push_back(x_value(rank, b, i, j));
    y.push_back(y_value(rank, b, i));
  }
  return {tensor(x, {kRows, 4}, kFloat64), tensor(y, {kRows, 1}, kFloat64)};
}

std::vector<double> flat_parameters(nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters())
    for (double v : p.contiguous().to_vector<double>()) out.push_back(v);
  return out;
}

std::vector<double> golden_parameters(const char* key) {
  std::vector<double> out;
  for (const auto& p : dp::test::golden_file("ddp_join.json").at(key))
    for (double v : p) out.push_back(v);
  return out;
}

struct RunOptions {
  std::vector<int> batches{3, 5, 0};
  JoinOptions join;
  bool forward_loss = false;
};

// One rank's training inside a Join; returns its parameters at the end.
std::vector<double> train(const ProcessGroupPtr& group, int rank, const RunOptions& run) {
  nn::Sequential model = make_model();
  nn::DistributedDataParallel ddp(model, group);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  Join join = ddp->join(run.join);
  for (int b = 0; b < run.batches[static_cast<size_t>(rank)]; ++b) {
    auto [x, y] = batch(rank, b);
    opt.zero_grad();
    Tensor loss = run.forward_loss ? ddp->forward_loss(nn::MSELoss(), y, x) : F::mse_loss(ddp(x), y);
    loss.backward();
    opt.step();
  }
  join.finish();
  return flat_parameters(*model);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << what << " parameter element " << i;
}

TEST(DdpJoin, RanksWith3And5And0BatchesEndWithPyTorchsWeights) {
  for (const bool divide : {true, false}) {
    RunOptions run;
    run.join.divide_by_initial_world_size = divide;
    std::vector<std::vector<double>> got(3);
    run_ranks(3, [&](const ProcessGroupPtr& g, int r) { got[static_cast<size_t>(r)] = train(g, r, run); });
    const std::vector<double> want = golden_parameters(divide ? "divide_by_initial_world_size" : "divide_by_active_ranks");
    for (int r = 0; r < 3; ++r)
      expect_near(got[static_cast<size_t>(r)], want, dp::detail::str(divide ? "initial world size" : "active ranks", ", rank ", r));
  }
}

TEST(DdpJoin, RealProcessesEndWithPyTorchsWeights) {
  // Three forked processes meeting in a FileStore (the shared-memory allreduce between them).
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / dp::detail::str("dp_join_", ::getpid());
  std::filesystem::create_directories(dir);
  std::vector<pid_t> children;
  for (int r = 0; r < 3; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 1;
      try {
        auto store = std::make_shared<FileStore>((dir / "store").string(), std::chrono::seconds(20));
        ProcessGroupOptions options;
        options.timeout = std::chrono::seconds(20);
        const std::vector<double> p = train(make_gloo_process_group(store, r, 3, options), r, RunOptions{});
        std::ofstream out(dir / dp::detail::str("rank", r), std::ios::binary);
        out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size() * sizeof(double)));
        code = out.good() ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (int r = 0; r < 3; ++r) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[static_cast<size_t>(r)], &status, 0), children[static_cast<size_t>(r)]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
  }
  const std::vector<double> want = golden_parameters("divide_by_initial_world_size");
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir / dp::detail::str("rank", r), std::ios::binary);
    std::vector<double> got(want.size());
    in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(double)));
    ASSERT_TRUE(in.good()) << "rank " << r << " wrote no parameters";
    expect_near(got, want, dp::detail::str("process rank ", r));
  }
  std::filesystem::remove_all(dir);
}

TEST(DdpJoin, ForwardLossEqualsOneProcessOnTheRowsOfTheRanksStillTraining) {
  // forward_loss averages over the rows the ranks actually had: iteration b is one step on the
  // concatenation of the batches of the ranks with more than b batches, whatever the divide mode.
  const std::vector<int> batches{2, 4, 1};
  nn::Sequential reference = make_model();
  optim::SGD opt(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int b = 0; b < 4; ++b) {
    std::vector<Tensor> xs, ys;
    for (int r = 0; r < 3; ++r)
      if (b < batches[static_cast<size_t>(r)]) {
        auto [x, y] = batch(r, b);
        xs.push_back(x);
        ys.push_back(y);
      }
    opt.zero_grad();
    F::mse_loss(reference->forward(cat(xs, 0)), cat(ys, 0)).backward();
    opt.step();
  }
  const std::vector<double> want = flat_parameters(*reference);
  for (const bool divide : {true, false}) {
    RunOptions run;
    run.batches = batches;
    run.forward_loss = true;
    run.join.divide_by_initial_world_size = divide;
    std::vector<std::vector<double>> got(3);
    run_ranks(3, [&](const ProcessGroupPtr& g, int r) { got[static_cast<size_t>(r)] = train(g, r, run); });
    for (int r = 0; r < 3; ++r) expect_near(got[static_cast<size_t>(r)], want, dp::detail::str("forward_loss, rank ", r));
  }
}

TEST(DdpJoin, BuffersComeFromARankStillTrainingAndEveryRankEndsEqual) {
  // BatchNorm's running statistics: broadcast before each forward from the highest rank still
  // training (rank 0 stops first here), and the last joiner's state everywhere at the end.
  std::vector<std::vector<double>> params(2), stats(2);
  run_ranks(2, [&](const ProcessGroupPtr& g, int r) {
    nn::Sequential model(nn::Linear(4, 3), nn::BatchNorm1d(3), nn::Linear(3, 1));
    model->to(kFloat64);
    nn::DistributedDataParallel ddp(model, g);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05));
    Join join = ddp->join();
    for (int b = 0; b < (r == 0 ? 1 : 3); ++b) {
      auto [x, y] = batch(r, b);
      opt.zero_grad();
      F::mse_loss(ddp(x), y).backward();
      opt.step();
    }
    join.finish();
    params[static_cast<size_t>(r)] = flat_parameters(*model);
    for (const Tensor& buf : model->buffers())
      for (double v : buf.to(kFloat64).contiguous().to_vector<double>()) stats[static_cast<size_t>(r)].push_back(v);
  });
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(stats[0], stats[1]);
  ASSERT_FALSE(stats[1].empty());
  EXPECT_EQ(stats[1].back(), 3.0);  // num_batches_tracked: the last joiner's three batches
}

TEST(DdpJoin, ACommHookIsShadowedToo) {
  std::vector<std::vector<double>> got(3);
  run_ranks(3, [&](const ProcessGroupPtr& g, int r) {
    nn::Sequential model = make_model();
    nn::DistributedDataParallel ddp(model, g);
    ddp->register_comm_hook(comm_hooks::fp16_compress());
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    Join join = ddp->join();
    for (int b = 0; b < std::vector<int>{3, 5, 0}[static_cast<size_t>(r)]; ++b) {
      auto [x, y] = batch(r, b);
      opt.zero_grad();
      F::mse_loss(ddp(x), y).backward();
      opt.step();
    }
    join.finish();
    got[static_cast<size_t>(r)] = flat_parameters(*model);
  });
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
  // fp16 on the wire: close to the float64 run, not equal.
  const std::vector<double> want = golden_parameters("divide_by_initial_world_size");
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[0][i], want[i], 2e-3) << i;
}

// A Joinable of the program's own, after DDP's: the rest of a shadowed step (dp-train's StepShadow).
class OptimizerStepShadow final : public Joinable {
 public:
  OptimizerStepShadow(ProcessGroup& group, std::function<void()> step) : group_(group), step_(std::move(step)) {}
  ProcessGroup& join_process_group() override { return group_; }
  void join_shadow(const JoinRound&) override { step_(); }
  void join_finish(bool) override {}

 private:
  ProcessGroup& group_;
  std::function<void()> step_;
};

// A joined rank receives each shadowed step's reduced gradients as its .grad, bit for bit those of
// the ranks still training, so it can keep its optimizer (momentum) in step with theirs: with and
// without a comm hook (whose used marks travel on their own).
TEST(DdpJoin, AJoinedRankReceivesTheReducedGradientsAndCanKeepItsOptimizerInStep) {
  for (bool hook : {false, true}) {
    SCOPED_TRACE(hook ? "fp16 comm hook" : "no comm hook");
    std::vector<std::vector<double>> last_grads(3), last_params(3);
    run_ranks(3, [&](const ProcessGroupPtr& g, int r) {
      nn::Sequential model = make_model();
      nn::DistributedDataParallel ddp(model, g);
      if (hook) ddp->register_comm_hook(comm_hooks::fp16_compress());
      optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1).momentum(0.9));
      auto grads = [&] {
        std::vector<double> out;
        for (const Tensor& p : model->parameters())
          for (double v : p.grad().contiguous().to_vector<double>()) out.push_back(v);
        return out;
      };
      // After each step, trained or shadowed: the gradients it used and the weights it reached.
      auto record = [&] {
        last_grads[static_cast<size_t>(r)] = grads();
        last_params[static_cast<size_t>(r)] = flat_parameters(*model);
      };
      OptimizerStepShadow shadow(*g, [&] {
        opt.step();
        record();
      });
      Join join({ddp->joinable(), &shadow});
      for (int b = 0; b < std::vector<int>{1, 3, 2}[static_cast<size_t>(r)]; ++b) {
        auto [x, y] = batch(r, b);
        opt.zero_grad();
        F::mse_loss(ddp(x), y).backward();
        opt.step();
        record();
      }
      // Ranks 0 and 2 shadow the steps they miss: their weights agree after the last step, before
      // the final model is taken from the last joiner.
      join.finish();
    });
    ASSERT_FALSE(last_grads[1].empty());
    EXPECT_EQ(last_grads[0], last_grads[1]);
    EXPECT_EQ(last_grads[2], last_grads[1]);
    EXPECT_EQ(last_params[0], last_params[1]);
    EXPECT_EQ(last_params[2], last_params[1]);
  }
}

TEST(DdpJoin, ThrowOnEarlyTerminationThrowsOnEveryRankNamingTheOneThatRanOut) {
  RunOptions run;
  run.batches = {2, 4};
  run.join.throw_on_early_termination = true;
  const auto errors = run_ranks_collect(
      2, [&](const ProcessGroupPtr& g, int r) { train(g, r, run); }, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << "rank " << r << " did not throw";
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const DistributedError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("throw_on_early_termination"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0 exhausted its inputs"), std::string::npos) << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": not a DistributedError: " << e.what();
    }
  }
}

TEST(DdpJoin, WithoutJoinUnevenRanksFailWithANamedErrorInsteadOfHanging) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks_collect(
      2,
      [&](const ProcessGroupPtr& g, int r) {
        nn::Sequential model = make_model();
        nn::DistributedDataParallel ddp(model, g);
        for (int b = 0; b < (r == 0 ? 1 : 2); ++b) {
          auto [x, y] = batch(r, b);
          F::mse_loss(ddp(x), y).backward();
        }
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // alive, not in step
      },
      std::chrono::milliseconds(1500));
  EXPECT_FALSE(errors[0]);
  ASSERT_TRUE(errors[1]) << "rank 1 finished a step rank 0 never joined";
  try {
    std::rethrow_exception(errors[1]);
  } catch (const CollectiveTimeout& e) {
    EXPECT_EQ(e.ranks_behind(), std::vector<int>{0}) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CollectiveTimeout: " << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(DdpJoin, MisuseIsAClearError) {
  auto store = std::make_shared<HashStore>();
  ProcessGroupPtr g = make_gloo_process_group(store, 0, 1);
  nn::Sequential model = make_model();
  nn::DistributedDataParallel ddp(model, g);
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([] { Join j({}); }).find("no Joinable objects"), std::string::npos);
  EXPECT_NE(message([] { Join j({nullptr}); }).find("Joinable 0 is null"), std::string::npos);
  EXPECT_NE(message([&] { Join j({ddp->joinable(), ddp->joinable()}); }).find("given twice"), std::string::npos);
  {
    Join outer = ddp->join();
    EXPECT_NE(message([&] { Join inner = ddp->join(); }).find("already part of another Join"), std::string::npos);
    auto [x, y] = batch(0, 0);
    outer.finish();
    // After finish() the model is no longer in the Join: a later forward is an ordinary one.
    EXPECT_NO_THROW(ddp(x));
  }
  {
    Join j = ddp->join();
    j.finish();
    EXPECT_TRUE(j.finished());
    EXPECT_NE(message([&] { j.notify(*ddp->joinable(), {0, 0, 0}); }).find("has finished"), std::string::npos);
  }
  nn::Sequential hooked = make_model();
  nn::DistributedDataParallel with_hook(hooked, g);
  with_hook->register_comm_hook(comm_hooks::fp16_compress());
  JoinOptions per_active;
  per_active.divide_by_initial_world_size = false;
  {
    Join j = with_hook->join(per_active);
    auto [x, y] = batch(0, 0);
    EXPECT_NE(message([&] { with_hook(x); }).find("cannot be used with a comm hook"), std::string::npos);
  }
}

}  // namespace
}  // namespace dp::distributed
