#pragma once
// The worker side of bench_ddp: one process of one configuration. bench_ddp re-executes itself as
// `bench_ddp --worker '<spec JSON>'` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
// environment for the configurations that form a process group), and talks to it over its stdin
// and stdout, one line each way:
//
//   worker -> {"ready": true, ...}               after building everything and --warmup steps
//   "run N" -> {"times_ms": [...], ...}          one untimed step (re-warms caches after the other
//                                                configurations ran), then N timed steps
//   "quit"  -> exits 0
//
// A step of a training configuration is zero_grad(set_to_none), forward, cross-entropy, backward,
// SGD step (momentum 0.9), loss.item(); its phases are timed too. A step of a communication
// configuration is one allreduce (or one bucket set) and the wait for it. Per step the worker
// reports the wall time (steady clock), the CPU time of the whole process (all threads:
// CLOCK_PROCESS_CPUTIME_ID) and of the thread that runs the steps (the rest is Gloo's and the
// process group's threads, or DataParallel's device workers) and, under DDP, the reducer's
// statistics of that step. The spec's "fp16": true registers the fp16_compress comm hook.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_ddp_gloo.h"
#include "dp/core/device_registry.h"
#include "dp/core/threads.h"
#include "dp/distributed/distributed.h"
#include "dp/dp.h"
#include "dp/nn/modules/conv.h"
#include "dp/nn/modules/loss.h"
#include "dp/nn/modules/pooling.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"

namespace bench_ddp {

using json = nlohmann::json;

// ---- the models (bench_data_parallel's) ----

inline int64_t model_batch(const std::string& model) { return model == "mlp" ? 256 : 128; }

inline dp::nn::Sequential make_model(const std::string& model) {
  using namespace dp;
  if (model == "mlp") return nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
  DP_CHECK(model == "cnn", ValueError, "bench_ddp: unknown model '", model, "' (mlp, cnn)");
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(64 * 7 * 7, 128),
                        nn::ReLU(), nn::Linear(128, 10));
}

// The fixed batch of the whole job (the same on every process: one seed); each process takes its
// rows [begin, end).
inline std::pair<dp::Tensor, dp::Tensor> global_batch(const std::string& model) {
  dp::manual_seed(0);
  const int64_t b = model_batch(model);
  dp::Tensor x = model == "mlp" ? dp::randn({b, 784}) : dp::randn({b, 1, 28, 28});
  dp::Tensor y = dp::randint(0, 10, {b});
  return {x, y};
}

inline int64_t gradient_floats(const std::string& model) {
  int64_t n = 0;
  for (const dp::Tensor& p : make_model(model)->parameters()) n += p.numel();
  return n;
}

// ---- one step ----

struct StepOut {
  double loss = std::nan("");
  bool phases = false;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double forward_cpu_ms = 0, backward_cpu_ms = 0, optimizer_cpu_ms = 0;  // of the stepping thread
  std::optional<dp::distributed::ReducerStats> reducer;
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual StepOut step() = 0;
};

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

inline double cpu_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
// Every thread of the process (Gloo's and the process group's included), and the calling thread.
inline double process_cpu_ms() { return cpu_ms(CLOCK_PROCESS_CPUTIME_ID); }
inline double thread_cpu_ms() { return cpu_ms(CLOCK_THREAD_CPUTIME_ID); }

// zero_grad, forward + loss, backward, optimizer step, each phase timed.
class TrainRunner : public Runner {
 public:
  TrainRunner(std::function<dp::Tensor()> loss, std::vector<dp::Tensor> params,
              std::function<std::optional<dp::distributed::ReducerStats>()> stats = {}, std::function<void()> after = {})
      : loss_(std::move(loss)),
        opt_(std::make_shared<dp::optim::SGD>(std::move(params), dp::optim::SGDOptions(0.01).momentum(0.9))),
        stats_(std::move(stats)),
        after_(std::move(after)) {}

  StepOut step() override {
    StepOut o;
    o.phases = true;
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_ms();
    opt_->zero_grad(true);
    dp::Tensor loss = loss_();
    const auto t1 = Clock::now();
    const double c1 = thread_cpu_ms();
    loss.backward();
    const auto t2 = Clock::now();
    const double c2 = thread_cpu_ms();
    opt_->step();
    o.loss = loss.item<double>();
    if (after_) after_();
    const auto t3 = Clock::now();
    const double c3 = thread_cpu_ms();
    o.forward_ms = ms_since(t0, t1);
    o.backward_ms = ms_since(t1, t2);
    o.optimizer_ms = ms_since(t2, t3);
    o.forward_cpu_ms = c1 - c0;
    o.backward_cpu_ms = c2 - c1;
    o.optimizer_cpu_ms = c3 - c2;
    if (stats_) o.reducer = stats_();
    return o;
  }

 private:
  std::function<dp::Tensor()> loss_;
  std::shared_ptr<dp::optim::SGD> opt_;
  std::function<std::optional<dp::distributed::ReducerStats>()> stats_;
  std::function<void()> after_;  // at the end of the step (timed with the optimizer phase)
};

class FnRunner : public Runner {
 public:
  explicit FnRunner(std::function<void()> fn) : fn_(std::move(fn)) {}
  StepOut step() override {
    fn_();
    return {};
  }

 private:
  std::function<void()> fn_;
};

// The spec's fields: mode (plain | ddp | dp | pg-flat | pg-buckets | gloo-raw), model, rank, world,
// rows [begin, end), devices (dp), bucket_cap_mb, first_bucket_mb, count (floats, communication modes), store_dir
// (gloo-raw), sync (plain: wait for the other processes after every step), fp16 (ddp: the
// fp16_compress comm hook).
inline std::unique_ptr<Runner> make_runner(const json& spec) {
  using namespace dp;
  const std::string mode = spec.at("mode"), model_name = spec.at("model");
  const double cap = spec.value("bucket_cap_mb", 25.0), first_cap = spec.value("first_bucket_mb", 1.0);
  const int rank = spec.value("rank", 0), world = spec.value("world", 1);
  nn::CrossEntropyLoss criterion;

  if (mode == "plain" || mode == "ddp" || mode == "dp") {
    auto [xg, yg] = global_batch(model_name);
    const int64_t begin = spec.at("rows")[0], end = spec.at("rows")[1];
    Tensor x = xg.narrow(0, begin, end - begin).contiguous(), y = yg.narrow(0, begin, end - begin).contiguous();
    manual_seed(1);
    nn::Sequential model = make_model(model_name);
    if (mode == "plain" && spec.value("sync", false)) {
      // The floor in lockstep: no gradients exchanged, but the processes wait for each other after
      // every step (an allreduce of one float), as DDP's ranks do.
      distributed::ProcessGroupPtr group = distributed::init_process_group();
      Tensor token = zeros({1});
      return std::make_unique<TrainRunner>([=]() mutable { return criterion(model(x), y); }, model->parameters(),
                                           std::function<std::optional<distributed::ReducerStats>()>{},
                                           [group, token] { group->allreduce(token)->wait(); });
    }
    if (mode == "plain") {
      return std::make_unique<TrainRunner>([=]() mutable { return criterion(model(x), y); }, model->parameters());
    }
    if (mode == "dp") {
      const int k = spec.value("devices", 2);
      if (cpu_device_count() < k) set_cpu_device_count(k);
      std::vector<Device> devices;
      for (int i = 0; i < k; ++i) devices.push_back(Device::cpu(i));
      model->to(devices[0]);
      nn::DataParallel net(model, devices);
      x = x.to(devices[0]);
      y = y.to(devices[0]);
      return std::make_unique<TrainRunner>([=]() mutable { return criterion(net(x), y); }, net->parameters());
    }
    distributed::ProcessGroupPtr group = distributed::init_process_group();
    DP_CHECK(group->rank() == rank && group->size() == world, ValueError, "bench_ddp worker: the environment says rank ", group->rank(), " of ",
             group->size(), ", the spec ", rank, " of ", world);
    distributed::DistributedDataParallelOptions opts;
    opts.bucket_cap_mb = cap;
    opts.first_bucket_mb = first_cap;
    nn::DistributedDataParallel<nn::SequentialImpl> ddp(model.ptr(), group, opts);
    if (spec.value("fp16", false)) ddp->register_comm_hook(distributed::comm_hooks::fp16_compress());
    // PyTorch's usual loop: the module's output, the criterion's mean over this rank's rows, and
    // the reducer's average over ranks (equal shares, so the same gradient as the global mean).
    return std::make_unique<TrainRunner>([=]() mutable { return criterion(ddp(x), y); }, ddp->parameters(),
                                         [ddp]() -> std::optional<distributed::ReducerStats> { return ddp->reducer_stats(); });
  }

  const int64_t count = spec.at("count");
  if (mode == "pg-flat") {
    distributed::ProcessGroupPtr group = distributed::init_process_group();
    Tensor buffer = ones({count});
    return std::make_unique<FnRunner>([group, buffer] { group->allreduce(buffer, distributed::ReduceOp::Avg)->wait(); });
  }
  if (mode == "pg-buckets") {
    // The DDP reducer's bucket layout for this model and cap (the last bucket also carries one
    // "used" mark per parameter), all-reduced as the reducer does: every bucket issued, then all
    // waited for; only the backward pass is missing.
    distributed::ProcessGroupPtr group = distributed::init_process_group();
    manual_seed(1);
    nn::Sequential model = make_model(model_name);
    std::vector<Tensor> params = model->parameters();
    std::vector<std::vector<size_t>> layout;
    {
      distributed::DistributedDataParallelOptions opts;
      opts.bucket_cap_mb = cap;
      opts.first_bucket_mb = first_cap;
      nn::DistributedDataParallel<nn::SequentialImpl> ddp(model.ptr(), group, opts);
      layout = ddp->bucket_indices();
    }
    std::vector<Tensor> buffers;
    for (size_t b = 0; b < layout.size(); ++b) {
      int64_t n = b + 1 == layout.size() ? static_cast<int64_t>(params.size()) : 0;
      for (size_t i : layout[b]) n += params[i].numel();
      buffers.push_back(ones({n}));
    }
    return std::make_unique<FnRunner>([group, buffers] {
      std::vector<distributed::WorkPtr> works;
      for (const Tensor& b : buffers) works.push_back(group->allreduce(b, distributed::ReduceOp::Avg));
      for (auto& w : works) w->wait();
    });
  }
  if (mode == "gloo-raw") {
#ifdef DP_BENCH_RAW_GLOO
    auto raw = std::make_shared<RawGlooAllreduce>(spec.at("store_dir").get<std::string>(), rank, world, count);
    return std::make_unique<FnRunner>([raw] { raw->run(); });
#else
    throw ValueError("bench_ddp: built without gloo (see bench/CMakeLists.txt), so no gloo-raw");
#endif
  }
  throw ValueError("bench_ddp worker: unknown mode '" + mode + "'");
}

inline void emit(const json& j) { std::cout << j.dump() << "\n" << std::flush; }

inline int worker_main(const std::string& spec_text) {
  try {
    const json spec = json::parse(spec_text);
    dp::set_num_threads(1);
    std::unique_ptr<Runner> runner = make_runner(spec);
    const int warmup = spec.value("warmup", 10);
    for (int i = 0; i < warmup; ++i) runner->step();
    emit({{"ready", true}, {"pid", static_cast<int>(getpid())}});
    for (std::string line; std::getline(std::cin, line);) {
      if (line == "quit") return 0;
      if (line.rfind("run ", 0) != 0) continue;
      const int n = std::stoi(line.substr(4));
      runner->step();
      json out = {{"times_ms", json::array()}, {"cpu_ms", json::array()}, {"main_cpu_ms", json::array()}};
      json fwd = json::array(), bwd = json::array(), opt = json::array(), red = json::array();
      json fwd_cpu = json::array(), bwd_cpu = json::array(), opt_cpu = json::array();
      double loss = std::nan("");
      for (int i = 0; i < n; ++i) {
        const double cpu0 = process_cpu_ms(), main0 = thread_cpu_ms();
        const auto t0 = Clock::now();
        StepOut s = runner->step();
        const auto t1 = Clock::now();
        out["main_cpu_ms"].push_back(thread_cpu_ms() - main0);
        out["cpu_ms"].push_back(process_cpu_ms() - cpu0);
        out["times_ms"].push_back(ms_since(t0, t1));
        if (s.phases) {
          fwd.push_back(s.forward_ms);
          bwd.push_back(s.backward_ms);
          opt.push_back(s.optimizer_ms);
          fwd_cpu.push_back(s.forward_cpu_ms);
          bwd_cpu.push_back(s.backward_cpu_ms);
          opt_cpu.push_back(s.optimizer_cpu_ms);
          loss = s.loss;
        }
        if (s.reducer)
          red.push_back({{"buckets", s.reducer->buckets},
                         {"bytes", s.reducer->bytes},
                         {"backward_ms", s.reducer->backward_ms},
                         {"communication_ms", s.reducer->communication_ms},
                         {"exposed_ms", s.reducer->exposed_ms},
                         {"hidden_fraction", s.reducer->hidden_fraction()}});
      }
      if (!fwd.empty())
        out["phases"] = {{"forward_ms", fwd},         {"backward_ms", bwd},         {"optimizer_ms", opt},
                         {"forward_cpu_ms", fwd_cpu}, {"backward_cpu_ms", bwd_cpu}, {"optimizer_cpu_ms", opt_cpu}};
      if (!red.empty()) out["reducer"] = red;
      if (!std::isnan(loss)) out["loss"] = loss;
      emit(out);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp worker: %s\n", e.what());
    emit({{"error", e.what()}});
    return 3;
  }
}

}  // namespace bench_ddp
