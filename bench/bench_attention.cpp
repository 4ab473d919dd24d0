// Times scaled_dot_product_attention, forward and forward+backward, against PyTorch's best on the
// CPU in version 1.13 (no SDPA there: the materialising softmax(q k^T * s + mask) v), in the same
// run on the same machine: ours fused (the flash kernel), ours exact (the materialising path made
// of ops) and PyTorch (bench/pytorch_attention.py in a python3 subprocess), per thread count.
//
// Cases: B = 4, H = 12, d = 64 at L = S = 1024 and at L = S = 64, each plain and causal.
// Protocol on both sides: a few warm-up calls, then N calls timed one by one (N so that they take
// at least --min-seconds, N >= --min-reps); median, min and max. "fwd" runs without autograd;
// "fwd+bwd" runs the forward with autograd and then the gradients of q, k and v for a fixed
// incoming gradient (autograd::grad / torch.autograd.grad). GFLOP/s counts 4 B H L S d for the
// forward (halved when causal) and 3.5 times that for forward+backward (FlashAttention's
// benchmark convention: the backward's five GEMMs with recomputation), for every implementation.
// Peak memory: what one call adds at its peak, ours from the host allocator's statistics, PyTorch's
// from the resident size of a fresh process (pytorch_attention.py --memory).
//
// Prints the tables, writes bench/results/attention.json and the tables between the
// bench_attention markers of docs/sequence-models.md (--no-write: neither). --help lists the options.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
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

namespace {

struct Options {
  std::vector<int> threads{1, 2};
  double min_seconds = 1.0;
  int min_reps = 3;
  int warmup = 2;
  std::vector<std::string> only;  // case names; empty = all
  bool torch = true;
  bool write = true;
  std::string python = "/usr/bin/python3";
  fs::path root = fs::path(DP_SOURCE_DIR);
};

struct Case {
  std::string name;
  int64_t B, H, L, S, d;
  bool causal;
};

// Kept in step with CASES in pytorch_attention.py.
std::vector<Case> cases() {
  return {{"T1024", 4, 12, 1024, 1024, 64, false},
          {"T1024-causal", 4, 12, 1024, 1024, 64, true},
          {"T64", 4, 12, 64, 64, 64, false},
          {"T64-causal", 4, 12, 64, 64, 64, true}};
}

const std::vector<std::string> kModes = {"fwd", "fwd+bwd"};

double gflop(const Case& c, const std::string& mode) {
  const double fwd = 4.0 * c.B * c.H * c.L * c.S * c.d * (c.causal ? 0.5 : 1.0);
  return (mode == "fwd" ? fwd : 3.5 * fwd) * 1e-9;
}

// One call of ours, by the given backend.
std::function<void()> our_step(const Case& c, const std::string& mode, dp::SDPBackend backend) {
  const bool grad = mode != "fwd";
  dp::Tensor q = dp::randn({c.B, c.H, c.L, c.d}).requires_grad_(grad), k = dp::randn({c.B, c.H, c.S, c.d}).requires_grad_(grad);
  dp::Tensor v = dp::randn({c.B, c.H, c.S, c.d}).requires_grad_(grad), g = dp::randn({c.B, c.H, c.L, c.d});
  const bool causal = c.causal;
  return [=] {
    dp::SDPAKernelGuard guard(backend);
    if (!grad) {
      dp::NoGradGuard no_grad;
      dp::scaled_dot_product_attention(q, k, v, dp::Tensor(), 0.0, causal);
      return;
    }
    dp::Tensor out = dp::scaled_dot_product_attention(q, k, v, dp::Tensor(), 0.0, causal);
    dp::autograd::grad({out}, {q, k, v}, {g});
  };
}

json measure(const std::function<void()>& fn, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) fn();
  const double one = std::max(bench::time_call<std::milli>(fn), 1e-6);
  const int reps = std::max(o.min_reps, static_cast<int>(o.min_seconds * 1e3 / one) + 1);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(bench::time_call<std::milli>(fn));
  const bench::Stats s = bench::stats(times);
  return {{"median_ms", s.median}, {"min_ms", s.min}, {"max_ms", s.max}, {"reps", reps}};
}

// What one call adds to the host allocator's live bytes at its peak.
int64_t our_peak_extra(const std::function<void()>& fn) {
  const dp::Device host = dp::Device::cpu();
  dp::reset_peak_memory_stats(host);
  const int64_t base = dp::memory_stats(host).allocated;
  fn();
  return dp::memory_stats(host).peak_allocated - base;
}

json run_python(const Options& o, const std::string& args) {
  std::ostringstream cmd;
  cmd << quote(o.python) << " " << quote((o.root / "bench" / "pytorch_attention.py").string()) << " " << args;
  int status = 0;
  const std::string out = run_command(cmd.str(), &status);
  const size_t nl = out.rfind('\n');
  json j = json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, /*allow_exceptions=*/false);
  if (status != 0 || j.is_discarded()) {
    std::cerr << "bench_attention: " << cmd.str() << " failed (status " << status << "); output:\n" << out << "\n";
    return nullptr;
  }
  return j;
}

std::string only_arg(const Options& o) {
  std::string s;
  for (const std::string& n : o.only) s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "" : " --only " + s;
}

// PyTorch's timings for every case at n threads: {case + "/" + mode: timing}.
json pytorch_timings(const Options& o, int n, json& meta) {
  const std::string t = std::to_string(n);
  setenv("OPENBLAS_NUM_THREADS", t.c_str(), 1);
  setenv("OMP_NUM_THREADS", t.c_str(), 1);
  std::ostringstream args;
  args << "--json --threads " << n << " --warmup " << o.warmup << " --min-seconds " << o.min_seconds << " --min-reps " << o.min_reps << only_arg(o);
  json py = run_python(o, args.str());
  json by_key = json::object();
  if (py.is_null()) return by_key;
  meta = {{"version", py["torch_version"]}, {"threads", py["threads"]}, {"openblas_threads", py["openblas_threads"]}};
  for (const json& r : py["results"])
    by_key[r["case"].get<std::string>() + "/" + r["mode"].get<std::string>()] = {
        {"median_ms", r["median_ms"]}, {"min_ms", r["min_ms"]}, {"max_ms", r["max_ms"]}, {"reps", r["reps"]}};
  return by_key;
}

std::string cell(const json& t) {
  if (t.is_null()) return "—";
  return bench::range_cell(t["median_ms"].get<double>(), t["min_ms"].get<double>(), t["max_ms"].get<double>());
}

std::string mb(const json& bytes) { return bytes.is_null() ? "—" : fmt(bytes.get<double>() / (1024.0 * 1024.0), 1); }

std::string table(const json& rows) {
  std::ostringstream s;
  s << "| case | pass | implementation | ms: median [min – max] | GFLOP/s | peak extra memory (MiB) | time vs PyTorch |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const json& r : rows) {
    s << "| " << r["case"].get<std::string>() << " | " << r["mode"].get<std::string>() << " | " << r["impl"].get<std::string>() << " | "
      << cell(r["timing"]) << " | " << (r.contains("gflops") ? fmt(r["gflops"].get<double>(), 1) : "—") << " | " << mb(r["peak_extra_bytes"]) << " | "
      << (r.contains("speedup_vs_pytorch") ? fmt(r["speedup_vs_pytorch"].get<double>()) + "×" : "—") << " |\n";
  }
  return s.str();
}

std::string markdown(const json& report) {
  std::ostringstream s;
  s << bench::measured_on(report["machine"]) << ", 1-minute load average " << report["machine"]["load_average_1min_at_start"].get<std::string>()
    << " at the start" << (report.contains("pytorch_version") ? ", PyTorch " + report["pytorch_version"].get<std::string>() : "") << ".\n"
    << "B = 4, H = 12, d = 64, float32. PyTorch: softmax(q k^T * s + mask) v (1.13 has no SDPA). Ours fused: the flash kernel; ours "
       "exact: the materialising path. GFLOP/s: 4·B·H·L·S·d forward (halved when causal), 3.5× that forward+backward. Peak extra "
       "memory: ours from the allocator's statistics, PyTorch's from a fresh process's resident size. Time vs PyTorch > 1: faster.\n";
  for (const json& run : report["runs"]) {
    s << "\n### " << run["threads"] << (run["threads"] == 1 ? " thread" : " threads") << "\n\n" << table(run["rows"]);
  }
  return s.str();
}

void usage() {
  std::cout << "bench_attention [--threads N[,N...]] [--min-seconds S] [--min-reps N] [--warmup N] [--only T1024,T64,...]\n"
               "                [--no-torch] [--no-write] [--python PATH] [--root REPO]\n"
               "Times scaled_dot_product_attention (fused and exact) and PyTorch 1.13's materialising attention\n"
               "(bench/pytorch_attention.py), forward and forward+backward, per thread count (default 1,2).\n";
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_attention", argc, argv); args.next();) {
    if (args.is("--threads")) {
      o.threads.clear();
      for (const std::string& t : bench::split_list(args.value())) o.threads.push_back(std::stoi(t));
    } else if (args.is("--min-seconds")) {
      o.min_seconds = std::stod(args.value());
    } else if (args.is("--min-reps")) {
      o.min_reps = std::stoi(args.value());
    } else if (args.is("--warmup")) {
      o.warmup = std::stoi(args.value());
    } else if (args.is("--only")) {
      o.only = bench::split_list(args.value());
    } else if (args.is("--python")) {
      o.python = args.value();
    } else if (args.is("--root")) {
      o.root = args.value();
    } else if (args.is("--no-torch")) {
      o.torch = false;
    } else if (args.is("--no-write")) {
      o.write = false;
    } else if (args.is_help()) {
      usage();
      std::exit(0);
    } else {
      args.unknown();
    }
  }
  if (o.threads.empty() || *std::min_element(o.threads.begin(), o.threads.end()) < 1)
    throw dp::ValueError("bench_attention: --threads must list counts >= 1");
  return o;
}

int run(const Options& o) {
  json report;
  report["machine"] = bench::machine_info(o.root);
  report["protocol"] = {{"warmup", o.warmup}, {"min_seconds", o.min_seconds}, {"min_reps", o.min_reps}, {"statistic", "median"}};
  report["runs"] = json::array();
  std::vector<Case> selected;
  for (const Case& c : cases())
    if (o.only.empty() || std::find(o.only.begin(), o.only.end(), c.name) != o.only.end()) selected.push_back(c);

  // PyTorch's peak memory does not depend on the thread count: measured once per case and mode.
  json torch_memory = json::object();
  if (o.torch) {
    for (const Case& c : selected)
      for (const std::string& mode : kModes) {
        json m = run_python(o, "--threads 1 --memory " + c.name + " " + quote(mode));
        torch_memory[c.name + "/" + mode] = m.is_null() ? json() : m["peak_extra_bytes"];
      }
  }
  for (int n : o.threads) {
    dp::set_num_threads(n);
    std::cerr << "threads " << n << ":\n";
    json rows = json::array();
    dp::manual_seed(0);
    for (const Case& c : selected) {
      for (const std::string& mode : kModes) {
        for (auto [impl, backend] :
             {std::pair<const char*, dp::SDPBackend>{"ours fused", dp::SDPBackend::flash_attention}, {"ours exact", dp::SDPBackend::math}}) {
          const std::function<void()> step = our_step(c, mode, backend);
          json row = {{"case", c.name}, {"mode", mode}, {"impl", impl}};
          row["peak_extra_bytes"] = our_peak_extra(step);
          row["timing"] = measure(step, o);
          rows.push_back(row);
          std::cerr << "  " << c.name << " " << mode << " " << impl << ": " << cell(row["timing"]) << " ms\n";
        }
      }
    }
    json meta;
    const json torch = o.torch ? pytorch_timings(o, n, meta) : json::object();
    if (!meta.is_null()) report["pytorch_version"] = meta["version"];
    json all = json::array();
    for (const Case& c : selected) {
      for (const std::string& mode : kModes) {
        const std::string key = c.name + "/" + mode;
        const json* pt = torch.contains(key) ? &torch[key] : nullptr;
        for (json row : rows) {
          if (row["case"] != c.name || row["mode"] != mode) continue;
          row["gflops"] = gflop(c, mode) / (row["timing"]["median_ms"].get<double>() * 1e-3);
          if (pt) row["speedup_vs_pytorch"] = (*pt)["median_ms"].get<double>() / row["timing"]["median_ms"].get<double>();
          all.push_back(row);
        }
        if (pt) {
          json row = {{"case", c.name}, {"mode", mode}, {"impl", "PyTorch 1.13 materialising"}, {"timing", *pt}};
          row["gflops"] = gflop(c, mode) / ((*pt)["median_ms"].get<double>() * 1e-3);
          row["peak_extra_bytes"] = torch_memory.contains(key) ? torch_memory[key] : json();
          all.push_back(row);
        }
      }
    }
    report["runs"].push_back({{"threads", n}, {"pytorch", meta}, {"rows", all}});
  }
  const std::string md = markdown(report);
  std::cout << md << std::flush;
  if (o.write) {
    fs::create_directories(o.root / "bench" / "results");
    std::ofstream(o.root / "bench" / "results" / "attention.json") << report.dump(2) << "\n";
    bench::update_markdown(o.root / "docs" / "sequence-models.md", "bench_attention", md);
    std::cerr << "wrote bench/results/attention.json and the table in docs/sequence-models.md\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dp::reexec_for_blas_kernels(argv);  // OpenBLAS's kernels for this CPU (PyTorch's child inherits it)
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "bench_attention: " << e.what() << "\n";
    return 2;
  }
}
