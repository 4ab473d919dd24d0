// DataParallel training throughput on CPU devices: the MLP 784-1024-1024-10 at batch 256 and the CNN
// of bench_training (conv32-pool-conv64-pool-fc128-fc10 on 28x28) at batch 128, cross-entropy, SGD
// momentum 0.9. A step is zero_grad, forward, loss, backward, optimizer step on a fixed batch that
// lives on cpu:0 (device_ids[0], as the tutorial's `input.to(device)`). Configurations:
//   plain      the module itself on cpu:0, called from the main thread, 1 GEMM thread
//   dp1        DataParallel on {cpu:0} (calls the module: no replica, no gather)
//   dpK        DataParallel on {cpu:0, ..., cpu:K-1}, K = 2, 4, 8, 16 up to --devices-max
//   dp2-loss   DataParallel on 2 devices with the loss on the replicas (forward_loss)
//   host-2t    the module on the host "cpu" with 2 GEMM threads (dp::set_num_threads): the other way
//              to use 2 cores, for comparison
// and, in the same run, PyTorch's plain module with 1, 2 (… K) threads (bench/pytorch_data_parallel.py;
// torch.nn.DataParallel does not run on CPU).
//
// Protocol (bench_training's, plus interleaving): every configuration gets its own model, built from
// the same seed, and its own optimizer; each runs --warmup steps, then the timed steps are taken in
// --rounds rounds, each round running every configuration for steps/rounds steps one after the other,
// so a change in machine load hits all configurations alike (host-2t runs alone afterwards: its
// OpenBLAS pool threads keep spinning for a while after each multi-threaded GEMM). Steps are timed one by one; median, min
// and max are reported, and samples/s = batch / median. All configurations run the same number of
// steps on the same data from the same weights, so their final losses must agree (checked: a
// DataParallel that computed something else would show here).
//
//   bench_data_parallel [--models mlp,cnn] [--devices-max 2] [--warmup 10] [--steps N] [--rounds 4]
//                       [--no-torch] [--no-write] [--python /usr/bin/python3] [--root DIR]
//
// Targets: DataParallel on 2 devices >= 1.7x the plain module's samples/s; DataParallel on 1 device
// within 3% of the plain module's time. Writes bench/results/data_parallel.json and the table between
// the bench_data_parallel markers in docs/benchmarks.md. scripts/bench.sh runs it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sched.h>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dp/dp.h"
#include "dp/nn/modules/conv.h"
#include "dp/nn/modules/loss.h"
#include "dp/nn/modules/pooling.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"

namespace {

using json = nlohmann::json;
using namespace dp;

constexpr double kSpeedupTarget = 1.7;    // DataParallel on 2 devices / plain, samples/s
constexpr double kOverheadTarget = 1.03;  // DataParallel on 1 device / plain, time per step

struct Options : bench::TrainingOptions {
  int devices_max = 2;
  int rounds = 4;
  Options() { models = {"mlp", "cnn"}; }
};

struct ModelSpec {
  int64_t batch;
  int default_steps;
  std::function<nn::Sequential()> make;
  std::function<Tensor()> input;
};

std::map<std::string, ModelSpec> model_specs() {
  std::map<std::string, ModelSpec> m;
  m["mlp"] = {256, 40, [] { return nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10)); },
              [] {
                return randn({256, 784});
              }};
  m["cnn"] = {128, 20,
              [] {
                return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                                      nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                                      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
              },
              [] {
                return randn({128, 1, 28, 28});
              }};
  return m;
}

// One configuration: its model, optimizer and step function, and the times it took.
struct Config {
  std::string name;
  std::string description;
  std::vector<Device> devices;  // empty: not DataParallel
  bool separate_phase = false;  // timed alone after the interleaved rounds (see run_model)
  std::function<double()> step;
  std::vector<double> times_ms;
  std::vector<double> cpu_ms;  // CPU time of the whole process (all threads) per step
  double final_loss = 0;
};

std::vector<Device> first_devices(int k) {
  std::vector<Device> d;
  for (int i = 0; i < k; ++i) d.push_back(Device::cpu(i));
  return d;
}

// Builds the configurations of one model. Every model is made right after manual_seed(1), so all of
// them start from the same weights; x and y are the same batch for all.
std::vector<std::unique_ptr<Config>> make_configs(const ModelSpec& spec, const Options& o, const Tensor& x_host, const Tensor& y_host) {
  const Device dev0 = Device::cpu(0);
  const Tensor x = x_host.to(dev0), y = y_host.to(dev0);
  std::vector<std::unique_ptr<Config>> out;
  auto fresh_model = [&](Device where) {
    manual_seed(1);
    nn::Sequential model = spec.make();
    model->to(where);
    return model;
  };
  auto sgd = [](const std::vector<Tensor>& params) { return std::make_shared<optim::SGD>(params, optim::SGDOptions(0.01).momentum(0.9)); };
  nn::CrossEntropyLoss criterion;

  {
    auto c = std::make_unique<Config>();
    c->name = "plain";
    c->description = "plain module on cpu:0, 1 thread";
    nn::Sequential model = fresh_model(dev0);
    auto opt = sgd(model->parameters());
    c->step = [=]() mutable {
      opt->zero_grad(true);
      Tensor loss = criterion(model(x), y);
      loss.backward();
      opt->step();
      return loss.item<double>();
    };
    out.push_back(std::move(c));
  }
  std::vector<int> counts{1};
  for (int k = 2; k <= o.devices_max; k *= 2) counts.push_back(k);
  if (std::find(counts.begin(), counts.end(), o.devices_max) == counts.end()) counts.push_back(o.devices_max);
  for (int k : counts) {
    auto c = std::make_unique<Config>();
    c->name = "dp" + std::to_string(k);
    c->devices = first_devices(k);
    c->description = "DataParallel on " + std::to_string(k) + (k == 1 ? " device" : " devices");
    nn::Sequential model = fresh_model(dev0);
    nn::DataParallel net(model, c->devices);
    auto opt = sgd(net->parameters());
    c->step = [=]() mutable {
      opt->zero_grad(true);
      Tensor loss = criterion(net(x), y);
      loss.backward();
      opt->step();
      return loss.item<double>();
    };
    out.push_back(std::move(c));
  }
  if (o.devices_max >= 2) {
    auto c = std::make_unique<Config>();
    c->name = "dp2-loss";
    c->devices = first_devices(2);
    c->description = "DataParallel on 2 devices, loss on the replicas (forward_loss)";
    nn::Sequential model = fresh_model(dev0);
    nn::DataParallel net(model, c->devices);
    auto opt = sgd(net->parameters());
    c->step = [=]() mutable {
      opt->zero_grad(true);
      Tensor loss = net->forward_loss(criterion, y, x);
      loss.backward();
      opt->step();
      return loss.item<double>();
    };
    out.push_back(std::move(c));
  }
  {
    // dp::set_num_threads is process-wide: this step sets 2 threads for itself and restores 1.
    auto c = std::make_unique<Config>();
    c->name = "host-2t";
    c->description = "plain module on the host, 2 GEMM threads (for comparison; timed after the others)";
    c->separate_phase = true;
    nn::Sequential model = fresh_model(Device::cpu());
    auto opt = sgd(model->parameters());
    const Tensor xh = x_host, yh = y_host;
    c->step = [=]() mutable {
      set_num_threads(2);
      opt->zero_grad(true);
      Tensor loss = criterion(model(xh), yh);
      loss.backward();
      opt->step();
      double v = loss.item<double>();
      set_num_threads(1);
      return v;
    };
    out.push_back(std::move(c));
  }
  return out;
}

// CPU time used by every thread of the process so far. Per step, CPU time / wall time says how many
// cores the step kept busy, and CPU time itself is the work done, which another process's load on the
// machine changes much less than wall time.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// The scheduling policy this process runs under. On a machine shared with other work, running the
// benchmark under a real-time policy (chrt -f 5 ...; threads inherit it, the PyTorch subprocess too)
// keeps other processes from taking the cores mid-step; the report says so when it was done.
std::string scheduling_policy() {
  const int policy = sched_getscheduler(0);
  sched_param param{};
  sched_getparam(0, &param);
  switch (policy) {
    case SCHED_FIFO:
      return "SCHED_FIFO priority " + std::to_string(param.sched_priority);
    case SCHED_RR:
      return "SCHED_RR priority " + std::to_string(param.sched_priority);
    case SCHED_OTHER:
      return "SCHED_OTHER (normal)";
    default:
      return "policy " + std::to_string(policy);
  }
}

json run_pytorch(const std::string& model, const std::vector<int>& threads, int steps, const Options& o) {
  std::string list;
  for (int t : threads) list += (list.empty() ? "" : ",") + std::to_string(t);
  std::string cmd = bench::quote(o.python) + " " + bench::quote((o.root / "bench" / "pytorch_data_parallel.py").string()) + " --json --model " +
                    model + " --threads " + list + " --warmup " + std::to_string(o.warmup) + " --steps " + std::to_string(steps) + " --rounds " +
                    std::to_string(o.rounds);
  int status = 0;
  std::string out = bench::run_command(cmd, &status);
  json py = json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1), nullptr, false);
  if (status != 0 || py.is_discarded() || py["results"].empty()) {
    std::cerr << "bench_data_parallel: " << cmd << " failed (status " << status << "):\n" << out << "\n";
    return nullptr;
  }
  return py;
}

json run_model(const std::string& name, const ModelSpec& spec, const Options& o) {
  const int steps = o.steps > 0 ? o.steps : spec.default_steps;
  const int per_round = std::max(1, (steps + o.rounds - 1) / o.rounds);
  manual_seed(0);
  const Tensor x = spec.input(), y = randint(0, 10, {spec.batch});
  auto configs = make_configs(spec, o, x, y);
  auto timed = [&](Config& c, int n) {
    for (int i = 0; i < n; ++i) {
      const double cpu0 = process_cpu_ms();
      c.times_ms.push_back(bench::time_call<std::milli>(c.step));
      c.cpu_ms.push_back(process_cpu_ms() - cpu0);
    }
  };
  for (auto& c : configs)
    if (!c->separate_phase)
      for (int i = 0; i < o.warmup; ++i) c->step();
  for (int r = 0; r < o.rounds; ++r)
    for (auto& c : configs)
      if (!c->separate_phase) timed(*c, per_round);
  // Multi-threaded OpenBLAS calls leave OpenBLAS's pool threads spinning for a while after they
  // return; interleaved with the others, host-2t would load the other core during their steps. So it
  // runs last, alone.
  for (auto& c : configs)
    if (c->separate_phase) {
      for (int i = 0; i < o.warmup; ++i) c->step();
      timed(*c, per_round * o.rounds);
    }
  for (auto& c : configs) c->final_loss = c->step();

  json result = {{"model", name}, {"batch", spec.batch}, {"steps", per_round * o.rounds}, {"configs", json::array()}};
  double plain_median = 0, plain_loss = 0;
  for (auto& c : configs) {
    const bench::Stats s = bench::stats(c->times_ms);
    const bench::Stats cpu = bench::stats(c->cpu_ms);
    if (c->name == "plain") plain_median = s.median, plain_loss = c->final_loss;
    json devs = json::array();
    for (Device d : c->devices) devs.push_back(d.str());
    json j = {{"name", c->name},
              {"description", c->description},
              {"devices", devs},
              {"median_ms", s.median},
              {"min_ms", s.min},
              {"max_ms", s.max},
              {"samples_per_s", spec.batch / (s.median / 1e3)},
              {"cpu_ms_median", cpu.median},
              {"final_loss", c->final_loss}};
    result["configs"].push_back(j);
  }
  // Same data, weights and step count: every configuration must end on the plain module's loss (up
  // to float rounding accumulated over the steps).
  bool losses_agree = true;
  for (json& j : result["configs"]) {
    j["speedup_vs_plain"] = plain_median / j["median_ms"].get<double>();
    const double d = std::abs(j["final_loss"].get<double>() - plain_loss);
    j["final_loss_matches_plain"] = d <= 1e-3 * std::max(1.0, std::abs(plain_loss));
    losses_agree = losses_agree && j["final_loss_matches_plain"].get<bool>();
  }
  result["final_losses_agree"] = losses_agree;
  if (!losses_agree) std::cerr << "bench_data_parallel: " << name << ": the configurations' final losses differ (see the JSON)\n";

  auto find = [&](const std::string& n) -> const json* {
    for (const json& j : result["configs"])
      if (j["name"] == n) return &j;
    return nullptr;
  };
  json targets = json::array();
  if (const json* dp2 = find("dp2")) {
    const double q = (*dp2)["speedup_vs_plain"].get<double>();
    targets.push_back({{"target", "DataParallel on 2 devices >= 1.7x plain (samples/s)"}, {"value", q}, {"met", q >= kSpeedupTarget}});
  }
  if (const json* dp1 = find("dp1")) {
    const double q = (*dp1)["median_ms"].get<double>() / plain_median;
    targets.push_back({{"target", "DataParallel on 1 device within 3% of plain (time ratio <= 1.03)"}, {"value", q}, {"met", q <= kOverheadTarget}});
  }
  result["targets"] = targets;

  if (o.torch) {
    std::vector<int> threads{1};
    for (const json& j : result["configs"])
      if (j["devices"].size() > 1 && std::find(threads.begin(), threads.end(), int(j["devices"].size())) == threads.end())
        threads.push_back(static_cast<int>(j["devices"].size()));
    json py = run_pytorch(name, threads, per_round * o.rounds, o);
    if (!py.is_null()) {
      result["pytorch_version"] = py["torch"];
      json rows = json::array();
      for (json r : py["results"]) {
        r["samples_per_s"] = spec.batch / (r["median_ms"].get<double>() / 1e3);
        r["speedup_vs_plain"] = plain_median / r["median_ms"].get<double>();
        rows.push_back(r);
      }
      result["pytorch"] = rows;
    }
  }
  return result;
}

std::string cell(const json& r) { return bench::range_cell(r["median_ms"].get<double>(), r["min_ms"].get<double>(), r["max_ms"].get<double>()); }

std::string markdown(const json& report) {
  const json& m = report["machine"];
  std::ostringstream s;
  s << bench::measured_on(m) << ", 1-minute load average " << m["load_average_1min_at_start"].get<std::string>() << " at the start and "
    << report["load_average_1min_at_end"].get<std::string>() << " at the end"
    << (report.contains("pytorch_version") ? ", PyTorch " + report["pytorch_version"].get<std::string>() : "") << ", scheduling "
    << report["scheduling"].get<std::string>() << ".\n"
    << "Cells: median [min – max] ms per training step (zero_grad, forward, loss, backward, SGD step) after " << report["warmup"]
    << " warm-up steps, timed in " << report["rounds"] << " interleaved rounds. Speedup = plain's median / this row's median. "
    << "CPU ms: median CPU time of all the process's threads per step (the work done; CPU / wall = cores kept busy).\n\n";
  for (const json& r : report["results"]) {
    s << "**" << r["model"].get<std::string>() << "**, batch " << r["batch"] << ", " << r["steps"] << " timed steps per row"
      << (r["final_losses_agree"].get<bool>() ? " (all dparallel rows end on the same loss)" : " (**final losses differ between rows**)") << ":\n\n"
      << "| configuration | ms/step | samples/s | speedup | CPU ms/step (all threads) |\n|---|---|---|---|---|\n";
    for (const json& c : r["configs"])
      s << "| " << c["description"].get<std::string>() << " | " << cell(c) << " | " << bench::fmt(c["samples_per_s"].get<double>(), 0) << " | "
        << bench::fmt(c["speedup_vs_plain"].get<double>()) << " | " << bench::fmt(c["cpu_ms_median"].get<double>(), 1) << " |\n";
    if (r.contains("pytorch"))
      for (const json& p : r["pytorch"])
        s << "| PyTorch plain module, " << p["threads"] << (p["threads"] == 1 ? " thread" : " threads") << " | " << cell(p) << " | "
          << bench::fmt(p["samples_per_s"].get<double>(), 0) << " | " << bench::fmt(p["speedup_vs_plain"].get<double>()) << " | "
          << bench::fmt(p["cpu_ms_median"].get<double>(), 1) << " |\n";
    s << "\n| target | measured | met? |\n|---|---|---|\n";
    for (const json& t : r["targets"])
      s << "| " << t["target"].get<std::string>() << " | " << bench::fmt(t["value"].get<double>(), 3) << " | "
        << (t["met"].get<bool>() ? "yes" : "no") << " |\n";
    s << "\n";
  }
  return s.str();
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_data_parallel", argc, argv); args.next();) {
    if (o.read_option(args)) continue;
    if (args.is("--devices-max"))
      o.devices_max = std::stoi(args.value());
    else if (args.is("--rounds"))
      o.rounds = std::stoi(args.value());
    else if (args.is_help()) {
      std::cout << "bench_data_parallel [--models mlp,cnn] [--devices-max 2] [--warmup 10] [--steps N] [--rounds 4]\n"
                   "                    [--no-torch] [--no-write] [--python /usr/bin/python3] [--root DIR]\n"
                   "--devices-max N  DataParallel on 1, 2, 4, ... up to N CPU devices (default 2; use the core count on bigger machines)\n";
      std::exit(0);
    } else
      args.unknown();
  }
  DP_CHECK(o.devices_max >= 1 && o.rounds >= 1 && o.warmup >= 0, ValueError, "bench_data_parallel: --devices-max and --rounds must be >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
  // CPU devices beyond the hardware threads are allowed (they share cores); must precede any worker.
  if (cpu_device_count() < o.devices_max) set_cpu_device_count(o.devices_max);
  set_num_threads(1);
  auto specs = model_specs();
  json report = {{"machine", bench::machine_info(o.root)}, {"warmup", o.warmup},      {"rounds", o.rounds}, {"devices_max", o.devices_max},
                 {"scheduling", scheduling_policy()},      {"results", json::array()}};
  for (const std::string& name : o.models) {
    auto it = specs.find(name);
    DP_CHECK(it != specs.end(), ValueError, "bench_data_parallel: unknown model '", name, "' (mlp, cnn)");
    json r = run_model(name, it->second, o);
    if (r.contains("pytorch_version")) report["pytorch_version"] = r["pytorch_version"];
    for (const json& c : r["configs"])
      std::cerr << name << " " << c["name"].get<std::string>() << ": " << cell(c) << " ms, speedup "
                << bench::fmt(c["speedup_vs_plain"].get<double>()) << "\n";
    report["results"].push_back(r);
  }
  report["load_average_1min_at_end"] = bench::load_average();
  const std::string md = markdown(report);
  std::cout << md;
  if (o.write) bench::write_results(o.root, "data_parallel.json", report, "bench_data_parallel", md);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_data_parallel: %s\n", e.what());
  return 2;
}
