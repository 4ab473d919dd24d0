// Training-step time on one CPU device, dparallel against PyTorch in the same run: the seed model
// (Linear(5,1) + Sigmoid, batch 30, BCELoss, SGD), an MLP 784-1024-1024-10 at batch 256
// (cross-entropy, SGD momentum) and a CNN (conv32-conv64-fc128, as bench/pytorch_training.py) at
// batch 128. A step is zero_grad, forward, loss, backward, optimizer step on fixed random batches.
//
// Protocol (bench/pytorch_training.py follows it line by line): build model and data, read the
// resident set size, reset the peak-RSS counter, run the warm-up steps, time the steps one by one,
// report median/min/max (µs) and the peak RSS growth over the pre-training RSS (MiB); ours also
// reports the allocator's peak bytes. PyTorch runs in a python3 subprocess right after ours.
//
//   bench_training [--threads 1] [--models seed,mlp,cnn] [--warmup 10] [--steps N] [--no-torch] [--no-write]
//
// Writes bench/results/training.json and the table between the bench_training markers in
// docs/benchmarks.md. scripts/bench.sh runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dp/dp.h"
#include "dp/nn/modules/conv.h"
#include "dp/nn/modules/loss.h"
#include "dp/nn/modules/pooling.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace dp;

struct Options {
  int threads = 1;
  std::vector<std::string> models{"seed", "mlp", "cnn"};
  int warmup = 10;
  int steps = 0;  // 0: per-model default
  bool torch = true;
  bool write = true;
  std::string python = "/usr/bin/python3";
  fs::path root = fs::path(__FILE__).parent_path().parent_path();
};

struct Workload {
  double target_ratio;  // PyTorch time / ours must be at least this
  int default_steps;
  std::function<std::function<double()>()> make;  // builds model, data, optimizer; returns one step
};

template <typename Model, typename Loss>
std::function<double()> training_step(Model model, Loss loss_fn, Tensor x, Tensor y, std::shared_ptr<optim::Optimizer> opt) {
  return [=]() mutable {
    opt->zero_grad(true);
    Tensor loss = loss_fn(model(x), y);
    loss.backward();
    opt->step();
    return loss.item<double>();
  };
}

std::map<std::string, Workload> workloads() {
  std::map<std::string, Workload> w;
  w["seed"] = {30.0, 2000, [] {
                 nn::Sequential model(nn::Linear(5, 1), nn::Sigmoid());
                 Tensor x = randn({30, 5}), y = rand({30, 1}).gt(0.5).to(kFloat32);
                 auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(1e-3));
                 return training_step(model, nn::BCELoss(), x, y, opt);
               }};
  w["mlp"] = {1.1, 40, [] {
                nn::Sequential model(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
                Tensor x = randn({256, 784}), y = randint(0, 10, {256});
                auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
                return training_step(model, nn::CrossEntropyLoss(), x, y, opt);
              }};
  w["cnn"] = {1.0, 20, [] {
                nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                                     nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                                     nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
                Tensor x = randn({128, 1, 28, 28}), y = randint(0, 10, {128});
                auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
                return training_step(model, nn::CrossEntropyLoss(), x, y, opt);
              }};
  return w;
}

long rss_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  return 0;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  return static_cast<bool>(f.flush());
}

json run_ours(const std::string& name, const Workload& wl, const Options& o) {
  manual_seed(0);
  std::function<double()> step = wl.make();
  const int steps = o.steps > 0 ? o.steps : wl.default_steps;
  const long rss0 = rss_kib("VmRSS");
  const bool peak_ok = reset_peak_rss();
  reset_peak_memory_stats(Device::cpu());
  const int64_t alloc0 = memory_stats(Device::cpu()).allocated;
  for (int i = 0; i < o.warmup; ++i) step();
  std::vector<double> times;
  times.reserve(steps);
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < steps; ++i) {
    auto t0 = clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  json r = {{"model", name},
            {"median_us", n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2])},
            {"min_us", times.front()},
            {"max_us", times.back()},
            {"steps", steps},
            {"peak_rss_growth_mib", peak_ok ? json((rss_kib("VmHWM") - rss0) / 1024.0) : json(nullptr)},
            {"allocator_peak_growth_mib", (memory_stats(Device::cpu()).peak_allocated - alloc0) / 1048576.0}};
  r["final_loss"] = step();
  return r;
}

json run_pytorch(const std::string& name, const Options& o) {
  const std::string threads = std::to_string(o.threads);
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
  setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  std::string cmd = bench::quote(o.python) + " " + bench::quote((o.root / "bench" / "pytorch_training.py").string()) + " --json --threads " +
                    threads + " --warmup " + std::to_string(o.warmup) + " --models " + name +
                    (o.steps > 0 ? " --steps " + std::to_string(o.steps) : "");
  int status = 0;
  std::string out = bench::run_command(cmd, &status);
  json py = json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1), nullptr, false);
  if (status != 0 || py.is_discarded() || py["results"].empty()) {
    std::cerr << "bench_training: " << cmd << " failed (status " << status << "):\n" << out << "\n";
    return nullptr;
  }
  json r = py["results"][0];
  r["torch"] = py["torch"];
  return r;
}

std::string cell(const json& r) {
  if (r.is_null()) return "—";
  return bench::fmt(r["median_us"].get<double>(), 1) + " [" + bench::fmt(r["min_us"].get<double>(), 1) + " – " +
         bench::fmt(r["max_us"].get<double>(), 1) + "]";
}
std::string mib(const json& v) { return v.is_null() ? "—" : bench::fmt(v.get<double>(), 1); }

std::string markdown(const json& report) {
  const json& m = report["machine"];
  std::ostringstream s;
  s << "Measured " << m["date"].get<std::string>() << " on " << m["cpu_model"].get<std::string>() << " (" << m["cores"]
    << " hardware threads), commit `" << m["git_commit"].get<std::string>().substr(0, 12) << "`"
    << (m["git_dirty"].get<bool>() ? " with local changes" : "") << ", load average " << m["load_average_1min_at_start"].get<std::string>()
    << " at the start, " << report["threads"] << " thread(s) on both sides.\n"
    << "Cells: median [min – max] µs per training step (zero_grad, forward, loss, backward, SGD step) after "
    << report["warmup"] << " warm-up steps. Ratio = PyTorch / ours. Memory: peak RSS growth over the RSS before training (MiB).\n\n"
    << "| model | ours (µs) | PyTorch (µs) | ratio | target | met? | peak RSS growth ours / PyTorch (MiB) |\n|---|---|---|---|---|---|---|\n";
  for (const json& r : report["results"]) {
    s << "| " << r["model"].get<std::string>() << " | " << cell(r["ours"]) << " | " << cell(r["pytorch"]) << " | "
      << (r.contains("ratio") ? bench::fmt(r["ratio"].get<double>()) : "—") << " | ≥ " << bench::fmt(r["target_ratio"].get<double>(), 1) << " | "
      << (r.contains("met") ? (r["met"].get<bool>() ? "yes" : "no") : "—") << " | "
      << mib(r["ours"].is_null() ? json(nullptr) : r["ours"]["peak_rss_growth_mib"]) << " / "
      << mib(r["pytorch"].is_null() ? json(nullptr) : r["pytorch"]["peak_rss_growth_mib"]) << " |\n";
  }
  return s.str();
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ValueError("bench_training: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--models") o.models = bench::split_list(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--python") o.python = value();
    else if (a == "--root") o.root = value();
    else if (a == "--no-torch") o.torch = false;
    else if (a == "--no-write") o.write = false;
    else if (a == "--help" || a == "-h") {
      std::cout << "bench_training [--threads 1] [--models seed,mlp,cnn] [--warmup 10] [--steps N] [--no-torch] [--no-write]\n";
      std::exit(0);
    } else throw ValueError("bench_training: unknown option " + a + " (see --help)");
  }
  DP_CHECK(o.threads >= 1, ValueError, "bench_training: --threads must be >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
  set_num_threads(o.threads);
  auto all = workloads();
  json report = {{"machine", bench::machine_info(o.root)}, {"threads", o.threads}, {"warmup", o.warmup}, {"results", json::array()}};
  for (const std::string& name : o.models) {
    auto it = all.find(name);
    DP_CHECK(it != all.end(), ValueError, "bench_training: unknown model '", name, "' (seed, mlp, cnn)");
    json r = {{"model", name}, {"target_ratio", it->second.target_ratio}, {"ours", run_ours(name, it->second, o)}, {"pytorch", nullptr}};
    if (o.torch) r["pytorch"] = run_pytorch(name, o);
    if (!r["pytorch"].is_null()) {
      double q = r["pytorch"]["median_us"].get<double>() / r["ours"]["median_us"].get<double>();
      r["ratio"] = q;
      r["met"] = q >= it->second.target_ratio;
      report["pytorch_version"] = r["pytorch"]["torch"];
    }
    std::cerr << name << ": ours " << cell(r["ours"]) << " µs, PyTorch " << cell(r["pytorch"]) << " µs"
              << (r.contains("ratio") ? ", ratio " + bench::fmt(r["ratio"].get<double>()) : "") << "\n";
    report["results"].push_back(r);
  }
  std::string md = markdown(report);
  std::cout << md;
  if (o.write) {
    fs::create_directories(o.root / "bench" / "results");
    std::ofstream(o.root / "bench" / "results" / "training.json") << report.dump(2) << "\n";
    bench::update_markdown(o.root / "docs" / "benchmarks.md", "bench_training", md);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_training: %s\n", e.what());
  return 2;
}
