// Training-step time on one CPU device, dparallel against PyTorch in the same run: the seed model
// (Linear(5,1) + Sigmoid, batch 30, BCELoss, SGD), an MLP 784-1024-1024-10 at batch 256
// (cross-entropy, SGD momentum) and a CNN (conv32-conv64-fc128, as bench/pytorch_training.py) at
// batch 128. A step is zero_grad, forward, loss, backward, optimizer step on fixed random batches.
//
// Protocol (bench/pytorch_training.py follows it line by line): build model and data, read the
// resident set size, reset the peak-RSS counter, run the warm-up steps, time the steps one by one,
// report median/min/max (µs) and the peak RSS growth over the pre-training RSS (MiB); ours also
// reports the allocator's peak bytes.
//
// Both sides run at once, in two processes: PyTorch in a python3 subprocess (pytorch_training.py
// --serve) that this program drives over a pipe. The timed steps are cut into --blocks blocks, and
// the blocks alternate, ours then PyTorch's, so both sides sample the same moments of a machine
// whose speed drifts (other builds; other tenants of the host: on a virtual machine one virtual
// CPU can run much slower than the other for seconds at a time). With one thread, both sides of
// block b run on the same CPU, the allowed CPUs taken in turn. Each side's median, min and max are
// over all its timed steps; the ratio is PyTorch's median over ours.
//
// --busy N starts N busy-loop processes for the whole run (both sides), to measure how training
// on the host degrades when other processes hold cores: with --threads equal to the core count,
// every thread of a multi-threaded GEMM competes with a busy loop.
//
//   bench_training [--threads 1] [--busy 0] [--models seed,mlp,cnn] [--blocks 20] [--warmup 10] [--steps N] [--no-pin] [--no-torch] [--no-write]
//
// Writes bench/results/training.json and the table between the bench_training markers in
// docs/benchmarks.md (with --busy: training_busy.json, the bench_training_busy markers).
// scripts/bench.sh runs it.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
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

namespace {

using json = nlohmann::json;
using namespace dp;

struct Options : bench::TrainingOptions {
  int threads = 1;
  int busy = 0;
  int blocks = 20;
  bool pin = true;
  Options() { models = {"seed", "mlp", "cnn"}; }
};

struct Workload {
  double target_ratio;  // PyTorch time / ours must be at least this
  int default_steps;
  std::function<std::function<Tensor()>()> make;  // builds model, data, optimizer; returns one step
};

// One step returns the loss tensor without reading it, as the PyTorch side's step does (reading
// it, .item(), is outside the timed step on both sides).
template <typename Model, typename Loss>
std::function<Tensor()> training_step(Model model, Loss loss_fn, Tensor x, Tensor y, std::shared_ptr<optim::Optimizer> opt) {
  return [=]() mutable {
    opt->zero_grad(true);
    Tensor loss = loss_fn(model(x), y);
    loss.backward();
    opt->step();
    return loss;
  };
}

std::map<std::string, Workload> workloads() {
  std::map<std::string, Workload> w;
  w["seed"] = {30.0, 5000, [] {
                 nn::Sequential model(nn::Linear(5, 1), nn::Sigmoid());
                 Tensor x = randn({30, 5}), y = rand({30, 1}).gt(0.5).to(kFloat32);
                 auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(1e-3));
                 return training_step(model, nn::BCELoss(), x, y, opt);
               }};
  w["mlp"] = {1.1, 100, [] {
                nn::Sequential model(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
                Tensor x = randn({256, 784}), y = randint(0, 10, {256});
                auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
                return training_step(model, nn::CrossEntropyLoss(), x, y, opt);
              }};
  w["cnn"] = {1.0, 50, [] {
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

// The PyTorch side: python3 bench/pytorch_training.py --serve, one JSON request and answer per line.
class TorchServer {
 public:
  explicit TorchServer(const Options& o) {
    int to[2], from[2];
    if (::pipe(to) != 0) return;
    if (::pipe(from) != 0) {
      ::close(to[0]);
      ::close(to[1]);
      return;
    }
    const std::string threads = std::to_string(o.threads), script = (o.root / "bench" / "pytorch_training.py").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      for (int fd : {to[0], to[1], from[0], from[1]}) ::close(fd);
      // PyTorch's GEMMs run in the same OpenBLAS library, whose pool torch.set_num_threads does not reach.
      ::setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", threads.c_str(), 1);
      ::execl(o.python.c_str(), o.python.c_str(), script.c_str(), "--serve", "--threads", threads.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    if (pid_ < 0) {
      ::close(to[1]);
      ::close(from[0]);
      return;
    }
    in_ = to[1];
    out_ = ::fdopen(from[0], "r");
  }
  ~TorchServer() {
    if (in_ >= 0) {
      const std::string quit = "{\"cmd\": \"quit\"}\n";
      (void)!::write(in_, quit.data(), quit.size());
      ::close(in_);
    }
    if (out_) std::fclose(out_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  TorchServer(const TorchServer&) = delete;
  TorchServer& operator=(const TorchServer&) = delete;
  bool ok() const { return out_ != nullptr; }

  // Sends a request; returns the answer, or null (and stops talking to it) if it failed.
  json call(const json& request) {
    if (!ok()) return nullptr;
    const std::string line = request.dump() + "\n";
    std::string answer;
    if (::write(in_, line.data(), line.size()) == static_cast<ssize_t>(line.size())) {
      char buf[65536];
      while (std::fgets(buf, sizeof buf, out_)) {
        answer += buf;
        if (!answer.empty() && answer.back() == '\n') break;
      }
    }
    json r = json::parse(answer, nullptr, false);
    if (r.is_discarded() || !r.is_object() || r.contains("error")) {
      std::cerr << "bench_training: the PyTorch side failed on " << request.dump()
                << (answer.empty() ? " (no answer: is torch importable?)" : ": " + answer) << "\n";
      std::fclose(out_);
      out_ = nullptr;
      return nullptr;
    }
    return r;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  FILE* out_ = nullptr;
};

// N processes that spin until this object dies (killed and reaped then, whatever the path).
class BusyLoops {
 public:
  explicit BusyLoops(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark, however it ends
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// Restricts the calling thread to `cpus`.
bool set_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

json summary(const std::vector<double>& times, const std::vector<double>& block_medians) {
  const bench::Stats s = bench::stats(times);
  return {{"median_us", s.median}, {"min_us", s.min}, {"max_us", s.max}, {"steps", times.size()}, {"block_medians_us", block_medians}};
}

// Times one model on both sides, block by block. `torch` may be null (--no-torch, or it failed).
json run_model(const std::string& name, const Workload& wl, const Options& o, TorchServer* torch, const std::vector<int>& cpus, bool pin) {
  const int steps = o.steps > 0 ? o.steps : wl.default_steps;
  const int blocks = std::min(o.blocks, steps);
  json py_build = torch ? torch->call({{"cmd", "build"}, {"model", name}}) : json(nullptr);
  if (py_build.is_null()) torch = nullptr;

  manual_seed(0);
  std::function<Tensor()> step = wl.make();
  const long rss0 = rss_kib("VmRSS");
  const bool peak_ok = reset_peak_rss();
  reset_peak_memory_stats(Device::cpu());
  const int64_t alloc0 = memory_stats(Device::cpu()).allocated;
  for (int i = 0; i < o.warmup; ++i) step();
  if (torch && torch->call({{"cmd", "steps"}, {"n", o.warmup}, {"timed", false}}).is_null()) torch = nullptr;

  std::vector<double> ours, theirs, ours_blocks, theirs_blocks, ratios;
  json block_cpus = json::array();
  for (int b = 0; b < blocks; ++b) {
    const int n = steps / blocks + (b < steps % blocks ? 1 : 0);
    json request = {{"cmd", "steps"}, {"n", n}, {"timed", true}};
    if (pin) {
      const int cpu = cpus[static_cast<size_t>(b) % cpus.size()];
      set_cpus({cpu});
      request["cpu"] = cpu;
      block_cpus.push_back(cpu);
    }
    std::vector<double> mine;
    for (int i = 0; i < n; ++i) mine.push_back(bench::time_call<std::micro>(step));
    ours.insert(ours.end(), mine.begin(), mine.end());
    ours_blocks.push_back(bench::stats(mine).median);
    if (!torch) continue;
    json answer = torch->call(request);
    if (answer.is_null()) {
      torch = nullptr;
      continue;
    }
    std::vector<double> t = answer["times_us"].get<std::vector<double>>();
    theirs.insert(theirs.end(), t.begin(), t.end());
    theirs_blocks.push_back(bench::stats(t).median);
    ratios.push_back(theirs_blocks.back() / ours_blocks.back());
  }
  if (pin) set_cpus(cpus);

  json r = {{"model", name}, {"target_ratio", wl.target_ratio}, {"ours", summary(ours, ours_blocks)}, {"pytorch", nullptr}};
  r["ours"]["peak_rss_growth_mib"] = peak_ok ? json((rss_kib("VmHWM") - rss0) / 1024.0) : json(nullptr);
  r["ours"]["allocator_peak_growth_mib"] = (memory_stats(Device::cpu()).peak_allocated - alloc0) / 1048576.0;
  r["ours"]["final_loss"] = step().item<double>();
  if (!block_cpus.empty()) r["block_cpus"] = block_cpus;
  json fin = torch ? torch->call({{"cmd", "finish"}}) : json(nullptr);
  if (torch && !fin.is_null() && theirs.size() == ours.size()) {
    r["pytorch"] = summary(theirs, theirs_blocks);
    r["pytorch"]["peak_rss_growth_mib"] = fin["peak_rss_growth_mib"];
    r["pytorch"]["final_loss"] = fin["final_loss"];
    r["pytorch"]["torch"] = py_build["torch"];
    const double q = r["pytorch"]["median_us"].get<double>() / r["ours"]["median_us"].get<double>();
    r["ratio"] = q;
    r["block_ratios"] = ratios;
    r["met"] = q >= wl.target_ratio;
  }
  return r;
}

std::string cell(const json& r) {
  if (r.is_null()) return "—";
  return bench::range_cell(r["median_us"].get<double>(), r["min_us"].get<double>(), r["max_us"].get<double>());
}
std::string mib(const json& v) { return v.is_null() ? "—" : bench::fmt(v.get<double>(), 1); }

std::string markdown(const json& report) {
  const json& m = report["machine"];
  std::ostringstream s;
  s << bench::measured_on(m) << ", load average " << m["load_average_1min_at_start"].get<std::string>() << " at the start, " << report["threads"]
    << " thread(s) on both sides"
    << (report["busy_loops"].get<int>() > 0 ? ", " + std::to_string(report["busy_loops"].get<int>()) + " busy-loop processes running beside both"
                                            : "")
    << ".\n"
    << "Cells: median [min – max] µs per training step (zero_grad, forward, loss, backward, SGD step) over " << report["blocks"]
    << " blocks of timed steps after " << report["warmup"] << " warm-up steps; the blocks alternate ours and PyTorch's (PyTorch in a "
    << "python3 process driven over a pipe)"
    << (report["pinned"].get<bool>() ? ", both sides of a block on the same CPU, the CPUs taken in turn" : "")
    << ". Ratio = PyTorch / ours (medians); the range after it is that of the per-block ratios. Memory: peak RSS growth over the "
    << "RSS before training (MiB).\n\n"
    << "| model | ours (µs) | PyTorch (µs) | ratio [per-block range] | target | met? | peak RSS growth ours / PyTorch (MiB) "
       "|\n|---|---|---|---|---|---|---|\n";
  for (const json& r : report["results"]) {
    std::string range;
    if (r.contains("block_ratios") && !r["block_ratios"].empty()) {
      std::vector<double> q = r["block_ratios"].get<std::vector<double>>();
      range = " [" + bench::fmt(*std::min_element(q.begin(), q.end())) + " – " + bench::fmt(*std::max_element(q.begin(), q.end())) + "]";
    }
    s << "| " << r["model"].get<std::string>() << " | " << cell(r["ours"]) << " | " << cell(r["pytorch"]) << " | "
      << (r.contains("ratio") ? bench::fmt(r["ratio"].get<double>()) + range : "—") << " | ≥ " << bench::fmt(r["target_ratio"].get<double>(), 1)
      << " | " << (r.contains("met") ? (r["met"].get<bool>() ? "yes" : "no") : "—") << " | "
      << mib(r["ours"].is_null() ? json(nullptr) : r["ours"]["peak_rss_growth_mib"]) << " / "
      << mib(r["pytorch"].is_null() ? json(nullptr) : r["pytorch"]["peak_rss_growth_mib"]) << " |\n";
  }
  return s.str();
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_training", argc, argv); args.next();) {
    if (o.read_option(args)) continue;
    if (args.is("--threads"))
      o.threads = std::stoi(args.value());
    else if (args.is("--busy"))
      o.busy = std::stoi(args.value());
    else if (args.is("--blocks"))
      o.blocks = std::stoi(args.value());
    else if (args.is("--no-pin"))
      o.pin = false;
    else if (args.is_help()) {
      std::cout << "bench_training [--threads 1] [--busy 0] [--models seed,mlp,cnn] [--blocks 20] [--warmup 10] [--steps N] [--no-pin] [--no-torch] "
                   "[--no-write]\n"
                   "  Times training steps of dparallel and PyTorch (python3 bench/pytorch_training.py --serve) in alternating\n"
                   "  blocks; with --threads 1 both sides of a block run on the same CPU, the CPUs taken in turn (--no-pin: not).\n"
                   "  --busy N: N busy-loop processes run beside both sides for the whole run.\n"
                   "  Writes bench/results/training.json and the table in docs/benchmarks.md unless --no-write\n"
                   "  (with --busy: training_busy.json and its own table).\n";
      std::exit(0);
    } else
      args.unknown();
  }
  DP_CHECK(o.threads >= 1, ValueError, "bench_training: --threads must be >= 1");
  DP_CHECK(o.blocks >= 1, ValueError, "bench_training: --blocks must be >= 1");
  DP_CHECK(o.busy >= 0 && o.busy <= 64, ValueError, "bench_training: --busy must be in [0, 64]");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
  set_num_threads(o.threads);
  auto all = workloads();
  const std::vector<int> cpus = allowed_cpus();
  const bool pin = o.pin && o.threads == 1 && !cpus.empty();
  json report = {{"machine", bench::machine_info(o.root)},
                 {"threads", o.threads},
                 {"busy_loops", o.busy},
                 {"warmup", o.warmup},
                 {"blocks", o.blocks},
                 {"pinned", pin},
                 {"results", json::array()}};
  BusyLoops busy(o.busy);  // for the whole run, beside both sides
  std::unique_ptr<TorchServer> torch;
  if (o.torch) {
    torch = std::make_unique<TorchServer>(o);
    if (!torch->ok()) torch.reset();
  }
  for (const std::string& name : o.models) {
    auto it = all.find(name);
    DP_CHECK(it != all.end(), ValueError, "bench_training: unknown model '", name, "' (seed, mlp, cnn)");
    json r = run_model(name, it->second, o, torch.get(), cpus, pin);
    if (torch && r["pytorch"].is_null()) torch.reset();  // it failed: no more requests
    if (!r["pytorch"].is_null()) report["pytorch_version"] = r["pytorch"]["torch"];
    std::cerr << name << ": ours " << cell(r["ours"]) << " µs, PyTorch " << cell(r["pytorch"]) << " µs"
              << (r.contains("ratio") ? ", ratio " + bench::fmt(r["ratio"].get<double>()) : "") << "\n";
    report["results"].push_back(r);
  }
  const std::string md = markdown(report);
  std::cout << md;
  if (o.write) {
    if (o.busy > 0)
      bench::write_results(o.root, "training_busy.json", report, "bench_training_busy", md);
    else
      bench::write_results(o.root, "training.json", report, "bench_training", md);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_training: %s\n", e.what());
  return 2;
}
