// Times dparallel's core kernels against PyTorch's, in the same run on the same machine:
// a 1024x1024 float32 GEMM, a 16M-element add, a softmax over [4096, 1024], a sum over dim 0 of
// [4096, 1024], a 16M-element relu, and one LSTM / GRU layer (forward, forward+backward, packed). Each op is timed on our side, then right away on
// PyTorch's (bench/pytorch_kernels.py in a python3 subprocess) with the same thread count and the same protocol: warm-up, then N calls timed one by
// one (N chosen so the N calls take at least
// --min-seconds), reporting median, min and max. --threads 1,2 repeats it all per thread count.
//
// Prints the tables, writes bench/results/kernels.json and replaces the tables between the markers
// in docs/benchmarks.md. scripts/bench.sh builds and runs it; --help lists the options.
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

#include "bench_common.h"
#include "dp/dp.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using bench::fmt;
using bench::quote;
using bench::run_command;
using bench::split_list;

namespace {

struct Options {
  std::vector<int> threads{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  double min_seconds = 0.5;
  int min_reps = 5;
  int warmup = 3;
  std::vector<std::string> only;  // op names; empty = all
  bool torch = true;
  bool write = true;  // kernels.json and docs/benchmarks.md
  std::string python = "/usr/bin/python3";
  // The repository root: this file's grandparent (CMake compiles it by absolute path).
  fs::path root = fs::path(DP_SOURCE_DIR);
};

// One benchmarked op: `make` builds the inputs once and returns the call to time.
struct OpSpec {
  std::string name;
  std::string shape;    // the same string as in pytorch_kernels.py
  double target_ratio;  // PyTorch/ours must be >= this; 0 = no target
  std::string target;   // how the target reads in the table
  std::function<std::function<void()>()> make;
};

const std::string kRnnShape = "T=50, B=32, I=H=256";

// One LSTM (gates = 4) or GRU (3) layer over [50, 32, 256] from zero states, with PyTorch's init;
// `train`: inputs and weights require grad and the call includes backward of output.sum().
// `packed`: the 32 sequences have lengths 50, 49, ..., 19 (a PackedSequence's data and batch_sizes).
std::function<void()> rnn_op(int64_t gates, bool train, bool packed) {
  const int64_t T = 50, B = 32, I = 256, H = 256;
  const double bound = 1.0 / 16.0;
  auto param = [&](dp::IntArrayRef s) { return dp::sub(dp::mul(dp::rand(s), 2 * bound), bound).set_requires_grad(train); };
  dp::Tensor w_ih = param({gates * H, I}), w_hh = param({gates * H, H}), b_ih = param({gates * H}), b_hh = param({gates * H});
  dp::Tensor x, batch_sizes;
  if (packed) {
    std::vector<int64_t> bs(T);
    int64_t rows = 0;
    for (int64_t t = 0; t < T; ++t) rows += bs[t] = std::min<int64_t>(B, T - t);  // lengths 50 .. 19
    x = dp::randn({rows, I});
    batch_sizes = dp::tensor(bs);
  } else {
    x = dp::randn({T, B, I});
  }
  x.set_requires_grad(train);
  dp::Tensor h0 = dp::zeros({B, H}), c0 = dp::zeros({B, H});
  return [=] {
    dp::AutoGradMode mode(train);
    dp::Tensor out = gates == 4 ? std::get<0>(dp::lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, false, batch_sizes))
                                : std::get<0>(dp::gru_layer(x, h0, w_ih, w_hh, b_ih, b_hh, false, batch_sizes));
    if (train) dp::sum(out).backward();
  };
}

std::vector<OpSpec> ops() {
  const int64_t n16m = int64_t(1) << 24;
  return {
      {"mm", "[1024, 1024] @ [1024, 1024]", 1.0 / 1.10, "within 10%",
       [] {
         dp::Tensor a = dp::randn({1024, 1024}), b = dp::randn({1024, 1024});
         return std::function<void()>([a, b] { dp::mm(a, b); });
       }},
      {"add", "[16777216] + [16777216]", 1.0, "as fast",
       [n16m] {
         dp::Tensor a = dp::randn({n16m}), b = dp::randn({n16m});
         return std::function<void()>([a, b] { dp::add(a, b); });
       }},
      {"softmax", "[4096, 1024], dim=-1", 1.0, "as fast",
       [] {
         dp::Tensor a = dp::randn({4096, 1024});
         return std::function<void()>([a] { dp::softmax(a, -1); });
       }},
      {"sum", "[4096, 1024], dim=0", 0.0, "none set",
       [] {
         dp::Tensor a = dp::randn({4096, 1024});
         return std::function<void()>([a] { dp::sum(a, {0}); });
       }},
      {"relu", "[16777216]", 1.0, "as fast",
       [n16m] {
         dp::Tensor a = dp::randn({n16m});
         return std::function<void()>([a] { dp::relu(a); });
       }},
      // One recurrent layer (the fused ops, dp/ops/rnn.h) against torch.nn.LSTM / GRU of one layer.
      // The GRU does 3/4 of the LSTM's GEMM work per step.
      {"lstm_layer", kRnnShape + ", forward", 0.0, "none set", [] { return rnn_op(4, false, false); }},
      {"gru_layer", kRnnShape + ", forward", 0.0, "none set", [] { return rnn_op(3, false, false); }},
      {"lstm_layer_train", kRnnShape + ", forward+backward", 0.0, "none set", [] { return rnn_op(4, true, false); }},
      {"gru_layer_train", kRnnShape + ", forward+backward", 0.0, "none set", [] { return rnn_op(3, true, false); }},
      {"gru_packed_train", "packed, lengths 50..19 (B=32), I=H=256, forward+backward", 0.0, "none set", [] { return rnn_op(3, true, true); }},
  };
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

Timing measure(const std::function<void()>& fn, const Options& o) {
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t0) { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
  for (int i = 0; i < o.warmup; ++i) fn();
  auto t0 = clock::now();
  fn();
  double one = std::max(ms_since(t0), 1e-6);
  Timing t;
  t.reps = std::max(o.min_reps, static_cast<int>(o.min_seconds * 1e3 / one) + 1);
  std::vector<double> times;
  times.reserve(t.reps);
  for (int i = 0; i < t.reps; ++i) {
    t0 = clock::now();
    fn();
    times.push_back(ms_since(t0));
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  t.median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  t.min_ms = times.front();
  t.max_ms = times.back();
  return t;
}

std::string cell(const json& t) {
  if (t.is_null()) return "—";
  return fmt(t["median_ms"].get<double>(), 3) + " [" + fmt(t["min_ms"].get<double>(), 3) + " – " + fmt(t["max_ms"].get<double>(), 3) + "]";
}

json timing_json(const Timing& t) { return {{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"max_ms", t.max_ms}, {"reps", t.reps}}; }

// Runs bench/pytorch_kernels.py for one op with n threads; its JSON object, or null on failure.
json run_pytorch(const Options& o, const std::string& op, int n) {
  // OpenBLAS reads these when the child loads it; pytorch_kernels.py also sets both pools itself.
  const std::string threads = std::to_string(n);
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
  setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  std::ostringstream cmd;
  cmd << quote(o.python) << " " << quote((o.root / "bench" / "pytorch_kernels.py").string()) << " --json --threads " << n << " --warmup " << o.warmup
      << " --min-seconds " << o.min_seconds << " --min-reps " << o.min_reps << " --only " << op;
  int status = 0;
  std::string out = run_command(cmd.str(), &status);
  json py = json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1), nullptr, /*allow_exceptions=*/false);
  if (status != 0 || py.is_discarded() || py["results"].empty()) {
    std::cerr << "bench_kernels: " << cmd.str() << " failed (status " << status << "); output:\n" << out << "\n";
    return nullptr;
  }
  return py;
}

// One op at one thread count: ours, then PyTorch's right after (so both see similar machine load).
json bench_op(const Options& o, const OpSpec& op, int n, json& torch_threads) {
  json r = {{"op", op.name}, {"shape", op.shape}, {"target", op.target}, {"target_ratio", op.target_ratio}, {"ours", nullptr}, {"pytorch", nullptr}};
  try {
    r["ours"] = timing_json(measure(op.make(), o));
  } catch (const dp::Error& e) {
    r["error"] = e.what();
  }
  if (o.torch) {
    json py = run_pytorch(o, op.name, n);
    if (py.is_null()) {
      r["error"] = "the PyTorch side failed";
    } else {
      const json& p = py["results"][0];
      r["pytorch"] = {{"median_ms", p["median_ms"]}, {"min_ms", p["min_ms"]}, {"max_ms", p["max_ms"]}, {"reps", p["reps"]}};
      torch_threads = {
          {"version", py["torch_version"]}, {"cpu_capability", py["cpu_capability"]}, {"torch", py["threads"]}, {"openblas", py["openblas_threads"]}};
    }
  }
  if (!r["ours"].is_null() && !r["pytorch"].is_null()) {
    double q = r["pytorch"]["median_ms"].get<double>() / r["ours"]["median_ms"].get<double>();
    r["ratio"] = q;
    if (op.target_ratio > 0) r["met"] = q >= op.target_ratio;
  }
  std::cerr << "  " << op.name << ": ours " << cell(r["ours"]) << ", PyTorch " << cell(r["pytorch"])
            << (r.contains("error") ? " (" + r["error"].get<std::string>() + ")" : "") << "\n";
  return r;
}

std::string table(const json& results) {
  std::ostringstream s;
  s << "| op | shape | ours (ms) | PyTorch (ms) | ratio | target | met? |\n|---|---|---|---|---|---|---|\n";
  for (const json& r : results) {
    std::string target = r["target"].get<std::string>();
    if (r["target_ratio"].get<double>() > 0) target += " (ratio ≥ " + fmt(r["target_ratio"].get<double>()) + ")";
    std::string met = r.contains("error") ? "error: " + r["error"].get<std::string>()
                      : r.contains("met") ? (r["met"].get<bool>() ? "yes" : "no")
                                          : "—";
    s << "| " << r["op"].get<std::string>() << " | " << r["shape"].get<std::string>() << " | " << cell(r["ours"]) << " | " << cell(r["pytorch"])
      << " | " << (r.contains("ratio") ? fmt(r["ratio"].get<double>()) : "—") << " | " << target << " | " << met << " |\n";
  }
  return s.str();
}

std::string markdown(const json& report) {
  const json& m = report["machine"];
  const json& p = report["protocol"];
  std::ostringstream s;
  s << "Measured " << m["date"].get<std::string>() << " on " << m["cpu_model"].get<std::string>() << " (" << m["cores"]
    << " hardware threads), commit `" << m["git_commit"].get<std::string>().substr(0, 12) << "`"
    << (m["git_dirty"].get<bool>() ? " with local changes" : "") << ", 1-minute load average " << m["load_average_1min_at_start"].get<std::string>()
    << " at the start"
    << (report.contains("pytorch_version") ? ", PyTorch " + report["pytorch_version"].get<std::string>() + " (CPU capability " +
                                                 report["pytorch_cpu_capability"].get<std::string>() + ")"
                                           : "")
    << ".\n";
  s << "Each cell: median [min – max] in ms of N calls timed one by one after " << p["warmup"] << " warm-up calls, N chosen so the N calls take ≥ "
    << p["min_seconds"] << " s (N ≥ " << p["min_reps"] << "). Ratio = PyTorch / ours (> 1: dparallel is faster).\n";
  for (const json& run : report["runs"]) {
    const json& t = run["threads"];
    s << "\n### " << t["requested"] << (t["requested"] == 1 ? " thread" : " threads") << "\n\n";
    s << "Threads as set: dparallel GEMM " << t["dparallel"]["gemm"] << ", other dparallel kernels " << t["dparallel"]["other_kernels"];
    if (!t["pytorch"].is_null()) s << "; PyTorch intra-op " << t["pytorch"]["torch"] << ", its OpenBLAS " << t["pytorch"]["openblas"];
    s << ".\n\n" << table(run["results"]);
  }
  return s.str();
}

void usage() {
  std::cout << "bench_kernels [--threads N[,N...]] [--min-seconds S] [--min-reps N] [--warmup N] [--only mm,add,...]\n"
               "              [--no-torch] [--no-write] [--python PATH] [--root REPO]\n"
               "Times dparallel's kernels and PyTorch's (bench/pytorch_kernels.py), each op on both sides in turn,\n"
               "once per thread count (default: the number of hardware threads); writes bench/results/kernels.json\n"
               "and the tables in docs/benchmarks.md unless --no-write.\n";
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dp::ValueError("bench_kernels: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads.clear();
      for (const std::string& t : split_list(value())) o.threads.push_back(std::stoi(t));
    } else if (a == "--min-seconds")
      o.min_seconds = std::stod(value());
    else if (a == "--min-reps")
      o.min_reps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--only")
      o.only = split_list(value());
    else if (a == "--python")
      o.python = value();
    else if (a == "--root")
      o.root = value();
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--no-write")
      o.write = false;
    else if (a == "--help" || a == "-h") {
      usage();
      std::exit(0);
    } else
      throw dp::ValueError("bench_kernels: unknown option " + a + " (see --help)");
  }
  if (o.threads.empty() || *std::min_element(o.threads.begin(), o.threads.end()) < 1)
    throw dp::ValueError("bench_kernels: --threads must list counts >= 1");
  return o;
}

int run(const Options& o) {
  json report;
  report["machine"] = bench::machine_info(o.root);
  report["protocol"] = {{"warmup", o.warmup},
                        {"min_seconds", o.min_seconds},
                        {"min_reps", o.min_reps},
                        {"statistic", "median"},
                        {"order", "per op: dparallel, then PyTorch in a fresh python3 process"}};
  report["runs"] = json::array();
  bool errors = false;
  for (int n : o.threads) {
    // dp::set_num_threads sets the OpenBLAS threads of GEMMs issued from the host thread, where
    // this benchmark runs; the element-wise, reduction and softmax kernels run in the calling
    // thread (the core has no intra-op thread pool).
    dp::set_num_threads(n);
    json run = {{"threads", {{"requested", n}, {"dparallel", {{"gemm", dp::get_num_threads()}, {"other_kernels", 1}}}, {"pytorch", nullptr}}},
                {"results", json::array()}};
    std::cerr << "threads " << n << ":\n";
    dp::manual_seed(0);
    for (const OpSpec& op : ops()) {
      if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), op.name) == o.only.end()) continue;
      json torch_threads;
      json r = bench_op(o, op, n, torch_threads);
      errors = errors || r.contains("error");
      if (!torch_threads.is_null()) {
        report["pytorch_version"] = torch_threads["version"];
        report["pytorch_cpu_capability"] = torch_threads["cpu_capability"];
        run["threads"]["pytorch"] = {{"torch", torch_threads["torch"]}, {"openblas", torch_threads["openblas"]}};
      }
      run["results"].push_back(std::move(r));
    }
    report["runs"].push_back(std::move(run));
  }

  std::string md = markdown(report);
  std::cout << md << std::flush;
  if (o.write) {
    fs::path json_file = o.root / "bench" / "results" / "kernels.json";
    fs::create_directories(json_file.parent_path());
    std::ofstream(json_file) << report.dump(2) << "\n";
    bench::update_markdown(o.root / "docs" / "benchmarks.md", "bench_kernels", md);
    std::cerr << "wrote " << json_file.string() << " and " << (o.root / "docs" / "benchmarks.md").string() << "\n";
  }
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "bench_kernels: " << e.what() << "\n";
    return 2;
  }
}
