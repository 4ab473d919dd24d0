// Times the convolutions, poolings and the whole forward+backward of the CNN of the training
// benchmark against PyTorch, single-threaded, in the same run on the same machine:
//
//   conv(1->32, 3x3, pad 1) + ReLU + maxpool 2, conv(32->64, 3x3, pad 1) + ReLU + maxpool 2,
//   fc(64*7*7 -> 128) + ReLU, fc(128 -> 10); batch 128 of 28x28 inputs.
//
// Rows: each conv's forward and forward+backward (conv1's input does not require grad, as a first
// layer's does not), conv2's again in bfloat16, each maxpool's forward+backward, and the whole network's forward+backward
// (upstream gradient fixed; no loss or optimizer, the same on both sides). Parameter gradients
// are reset to none before each run on both sides, so no accumulation is timed.
//
// Protocol (identical on both sides): build the inputs once, 3 warm-up runs, then time runs one
// by one until at least --min-seconds have passed (and at least --min-reps runs); report the
// median and the minimum wall-clock time and the median thread CPU time, in milliseconds (the
// CPU time is the steadier number on a machine shared with other work). Each case runs on our side and right after on PyTorch's
// (the script kTorchScript below, in a fresh /usr/bin/python3 process, torch.set_num_threads(1));
// ours runs with dp::set_num_threads(1).
//
// Prints a table and writes bench/results/conv.json.
//   bench_conv [--min-seconds S] [--min-reps N] [--no-torch] [--no-write] [--only name,name]
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dp/dp.h"
#include "dp/ops/conv.h"
#include "dp/ops/pooling.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The PyTorch side: the same cases (by name), the same protocol; prints one JSON object.
const char* kTorchScript = R"PY(
import json, statistics, sys, time
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
min_seconds, min_reps, only = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",") if sys.argv[3] else []
N = 128

def leaf(*s):
    return torch.randn(*s).requires_grad_(True)

def conv_case(ci, co, h, input_grad, backward, dtype=torch.float32):
    x = torch.randn(N, ci, h, h).to(dtype).requires_grad_(input_grad)
    w, b = leaf(co, ci, 3, 3).detach().to(dtype).requires_grad_(True), leaf(co).detach().to(dtype).requires_grad_(True)
    g = torch.randn(N, co, h, h).to(dtype)
    params = [x, w, b] if input_grad else [w, b]
    def run():
        for p in params: p.grad = None
        if not backward:
            with torch.no_grad():
                F.conv2d(x, w, b, padding=1)
            return
        F.conv2d(x, w, b, padding=1).backward(g)
    return run

def pool_case(c, h):
    x = leaf(N, c, h, h)
    g = torch.randn(N, c, h // 2, h // 2)
    def run():
        x.grad = None
        F.max_pool2d(x, 2).backward(g)
    return run

def net_case():
    x = torch.randn(N, 1, 28, 28)
    w1, b1, w2, b2 = leaf(32, 1, 3, 3), leaf(32), leaf(64, 32, 3, 3), leaf(64)
    w3, b3, w4, b4 = leaf(128, 64 * 49), leaf(128), leaf(10, 128), leaf(10)
    ps = [w1, b1, w2, b2, w3, b3, w4, b4]
    g = torch.randn(N, 10)
    def run():
        for p in ps: p.grad = None
        h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1)), 2)
        h = F.relu(F.linear(h.flatten(1), w3, b3))
        F.linear(h, w4, b4).backward(g)
    return run

cases = {
    "conv1 fwd": lambda: conv_case(1, 32, 28, False, False),
    "conv1 fwd+bwd": lambda: conv_case(1, 32, 28, False, True),
    "conv2 fwd": lambda: conv_case(32, 64, 14, True, False),
    "conv2 fwd+bwd": lambda: conv_case(32, 64, 14, True, True),
    "conv2 fwd bf16": lambda: conv_case(32, 64, 14, True, False, torch.bfloat16),
    "conv2 fwd+bwd bf16": lambda: conv_case(32, 64, 14, True, True, torch.bfloat16),
    "maxpool1 fwd+bwd": lambda: pool_case(32, 28),
    "maxpool2 fwd+bwd": lambda: pool_case(64, 14),
    "cnn fwd+bwd": net_case,
}
out = {"version": torch.__version__, "threads": torch.get_num_threads(), "results": {}}
for name, make in cases.items():
    if only and name not in only: continue
    run = make()
    for _ in range(3): run()
    times, cpu, start = [], [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t, c = time.perf_counter(), time.thread_time()
        run()
        cpu.append((time.thread_time() - c) * 1e3); times.append((time.perf_counter() - t) * 1e3)
    out["results"][name] = {"median_ms": statistics.median(times), "min_ms": min(times), "cpu_median_ms": statistics.median(cpu),
                            "reps": len(times)}
print(json.dumps(out))
)PY";

struct Options {
  double min_seconds = 2.0;
  int min_reps = 10;
  bool torch = true;
  bool write = true;
  std::vector<std::string> only;
  fs::path root = fs::path(DP_SOURCE_DIR);
};

struct Timing {
  double median_ms = 0, min_ms = 0, cpu_median_ms = 0;
  int reps = 0;
};

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Timing measure(const std::function<void()>& run, const Options& o) {
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> t, cpu;
  const auto start = std::chrono::steady_clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  while (static_cast<int>(t.size()) < o.min_reps || secs(start, std::chrono::steady_clock::now()) < o.min_seconds) {
    const auto a = std::chrono::steady_clock::now();
    const double c = thread_cpu_seconds();
    run();
    cpu.push_back((thread_cpu_seconds() - c) * 1e3);
    t.push_back(secs(a, std::chrono::steady_clock::now()) * 1e3);
  }
  return {median(t), *std::min_element(t.begin(), t.end()), median(cpu), static_cast<int>(t.size())};
}

constexpr int64_t N = 128;

dp::Tensor leaf(dp::IntArrayRef s) { return dp::randn(s).requires_grad_(true); }

void reset(std::vector<dp::Tensor>& ps) {
  for (dp::Tensor& p : ps) p.set_grad(dp::Tensor());
}

std::function<void()> conv_case(int64_t ci, int64_t co, int64_t h, bool input_grad, bool backward, dp::DType dt = dp::kFloat32) {
  dp::Tensor x = dp::randn({N, ci, h, h}).to(dt).requires_grad_(input_grad);
  dp::Tensor w = dp::randn({co, ci, 3, 3}).to(dt).requires_grad_(true), b = dp::randn({co}).to(dt).requires_grad_(true);
  dp::Tensor g = dp::randn({N, co, h, h}).to(dt);
  std::vector<dp::Tensor> ps = input_grad ? std::vector<dp::Tensor>{x, w, b} : std::vector<dp::Tensor>{w, b};
  return [=]() mutable {
    reset(ps);
    if (!backward) {
      dp::NoGradGuard no_grad;
      dp::conv2d(x, w, b, {1}, {1});
      return;
    }
    dp::conv2d(x, w, b, {1}, {1}).backward(g);
  };
}

std::function<void()> pool_case(int64_t c, int64_t h) {
  dp::Tensor x = leaf({N, c, h, h});
  dp::Tensor g = dp::randn({N, c, h / 2, h / 2});
  return [=]() mutable {
    x.set_grad(dp::Tensor());
    dp::max_pool2d(x, {2}).backward(g);
  };
}

std::function<void()> net_case() {
  dp::Tensor x = dp::randn({N, 1, 28, 28});
  std::vector<dp::Tensor> ps{leaf({32, 1, 3, 3}),  leaf({32}),  leaf({64, 32, 3, 3}), leaf({64}),
                             leaf({128, 64 * 49}), leaf({128}), leaf({10, 128}),      leaf({10})};
  dp::Tensor g = dp::randn({N, 10});
  return [=]() mutable {
    reset(ps);
    dp::Tensor h = dp::max_pool2d(dp::relu(dp::conv2d(x, ps[0], ps[1], {1}, {1})), {2});
    h = dp::max_pool2d(dp::relu(dp::conv2d(h, ps[2], ps[3], {1}, {1})), {2});
    h = dp::relu(dp::linear(h.flatten(1), ps[4], ps[5]));
    dp::linear(h, ps[6], ps[7]).backward(g);
  };
}

struct Case {
  std::string name;
  std::string what;
  std::function<std::function<void()>()> make;
};

std::vector<Case> cases() {
  return {
      {"conv1 fwd", "[128,1,28,28] * [32,1,3,3], pad 1", [] { return conv_case(1, 32, 28, false, false); }},
      {"conv1 fwd+bwd", "grads: weight, bias", [] { return conv_case(1, 32, 28, false, true); }},
      {"conv2 fwd", "[128,32,14,14] * [64,32,3,3], pad 1", [] { return conv_case(32, 64, 14, true, false); }},
      {"conv2 fwd+bwd", "grads: input, weight, bias", [] { return conv_case(32, 64, 14, true, true); }},
      // bfloat16 on the CPU: widened to float32 once, float32 GEMMs, rounded once (PyTorch 1.13
      // runs its bfloat16 convolution through oneDNN).
      {"conv2 fwd bf16", "conv2 in bfloat16", [] { return conv_case(32, 64, 14, true, false, dp::kBFloat16); }},
      {"conv2 fwd+bwd bf16", "conv2 in bfloat16, same grads", [] { return conv_case(32, 64, 14, true, true, dp::kBFloat16); }},
      {"maxpool1 fwd+bwd", "[128,32,28,28], k 2", [] { return pool_case(32, 28); }},
      {"maxpool2 fwd+bwd", "[128,64,14,14], k 2", [] { return pool_case(64, 14); }},
      {"cnn fwd+bwd", "conv/relu/pool x2, fc/relu, fc", net_case},
  };
}

std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t k;
    while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), k);
    pclose(p);
  }
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string fmt(double v, int prec = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a;
  f >> a;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--min-seconds")
      o.min_seconds = std::stod(next());
    else if (a == "--min-reps")
      o.min_reps = std::stoi(next());
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--no-write")
      o.write = false;
    else if (a == "--only") {
      std::stringstream ss(next());
      for (std::string s; std::getline(ss, s, ',');) o.only.push_back(s);
    } else {
      std::cerr << "usage: bench_conv [--min-seconds S] [--min-reps N] [--no-torch] [--no-write] [--only name,name]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  dp::set_num_threads(1);
  dp::manual_seed(0);
  const std::string load_at_start = load_average();
  // Per case: ours, then PyTorch's (a python3 process timing only that case), so that both sides
  // of a row see the same machine load.
  json ours = json::object(), torch = json::object();
  std::string torch_version = "not run";
  std::vector<Case> todo;
  for (const Case& c : cases())
    if (o.only.empty() || std::find(o.only.begin(), o.only.end(), c.name) != o.only.end()) todo.push_back(c);
  for (const Case& c : todo) {
    Timing t = measure(c.make(), o);
    ours[c.name] = {{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"cpu_median_ms", t.cpu_median_ms}, {"reps", t.reps}};
    std::cerr << "dparallel " << c.name << ": " << fmt(t.median_ms) << " ms";
    if (o.torch) {
      std::string out = run_command("/usr/bin/python3 -c " + quote(kTorchScript) + " " + fmt(o.min_seconds, 3) + " " + std::to_string(o.min_reps) +
                                    " " + quote(c.name));
      try {
        json j = json::parse(out);
        torch[c.name] = j.at("results").at(c.name);
        torch_version = j.at("version").get<std::string>() + " (" + std::to_string(j.at("threads").get<int>()) + " thread)";
        std::cerr << ", PyTorch " << fmt(torch[c.name]["median_ms"].get<double>()) << " ms";
      } catch (const std::exception& e) {
        std::cerr << "\nPyTorch side failed (" << e.what() << "): " << out;
      }
    }
    std::cerr << "\n";
  }

  std::printf("\nconv/pool benchmark, batch %lld, 1 thread, median (min) of >= %d runs / %.1f s; PyTorch %s\n", static_cast<long long>(N), o.min_reps,
              o.min_seconds, torch_version.c_str());
  std::printf("%-18s %-38s %16s %16s %8s %10s %10s %8s\n", "case", "shape", "dparallel ms", "PyTorch ms", "speedup", "dp cpu ms", "pt cpu ms",
              "speedup");
  json rows = json::array();
  for (const Case& c : todo) {
    const json& u = ours[c.name];
    std::string ours_s = fmt(u["median_ms"].get<double>()) + " (" + fmt(u["min_ms"].get<double>()) + ")";
    std::string torch_s = "-", ratio_s = "-", tcpu_s = "-", cratio_s = "-";
    json row = {{"case", c.name}, {"shape", c.what}, {"ours", u}};
    if (torch.contains(c.name)) {
      const json& p = torch[c.name];
      torch_s = fmt(p["median_ms"].get<double>()) + " (" + fmt(p["min_ms"].get<double>()) + ")";
      const double ratio = p["median_ms"].get<double>() / u["median_ms"].get<double>();
      ratio_s = fmt(ratio) + "x";
      row["pytorch"] = p;
      row["speedup_median"] = ratio;
      row["speedup_min"] = p["min_ms"].get<double>() / u["min_ms"].get<double>();
      const double cratio = p["cpu_median_ms"].get<double>() / u["cpu_median_ms"].get<double>();
      row["speedup_cpu_median"] = cratio;
      tcpu_s = fmt(p["cpu_median_ms"].get<double>());
      cratio_s = fmt(cratio) + "x";
    }
    rows.push_back(row);
    std::printf("%-18s %-38s %16s %16s %8s %10s %10s %8s\n", c.name.c_str(), c.what.c_str(), ours_s.c_str(), torch_s.c_str(), ratio_s.c_str(),
                fmt(u["cpu_median_ms"].get<double>()).c_str(), tcpu_s.c_str(), cratio_s.c_str());
  }
  std::printf(
      "ms = wall-clock median (min); cpu ms = median thread CPU time, less disturbed by other load on the machine.\n"
      "speedup = PyTorch / dparallel (> 1: dparallel is faster)\n");

  if (o.write) {
    json doc = {{"machine",
                 {{"cores", std::thread::hardware_concurrency()},
                  {"date", utc_now()},
                  {"load_average_1min_at_start", load_at_start},
                  {"compiler", __VERSION__}}},
                {"protocol",
                 {{"threads", 1},
                  {"warmup", 3},
                  {"min_reps", o.min_reps},
                  {"min_seconds", o.min_seconds},
                  {"statistic", "median (and min) wall-clock; median thread CPU time"},
                  {"order", "per case: dparallel, then PyTorch in a fresh python3 process"}}},
                {"batch", N},
                {"pytorch_version", torch_version},
                {"results", rows}};
    fs::create_directories(o.root / "bench" / "results");
    std::ofstream(o.root / "bench" / "results" / "conv.json") << doc.dump(2) << "\n";
    std::printf("wrote %s\n", (o.root / "bench" / "results" / "conv.json").c_str());
  }
  return 0;
}
