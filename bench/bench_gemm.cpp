// GFLOP/s of dparallel's matrix products on the GEMM shapes of a GPT-2 small training step
// (12 layers, 768 channels, vocabulary 50257, batch 4 x sequence 64 = 256 tokens), and of a large
// square product, through the ops a model calls: linear (forward), mm (dX = G @ W, dW = G^T @ X),
// bmm (attention's q k^T and att v per head). Three paths side by side:
//
//   float32        OpenBLAS (blas.h's thread policy)
//   bf16-onednn    bfloat16 operands on oneDNN's matmul (AMX / AVX512-BF16), float32 accumulation
//   bf16-float32   bfloat16 operands converted to float32, OpenBLAS, rounded once (the path without
//                  oneDNN: dp::backends::onednn::set_enabled(false))
//
// For every thread count and round, each shape is timed on every path in turn (so all paths sample
// the machine's drift alike): warm-up, then calls timed one by one until --min-seconds; the
// reported value is the median over all rounds' calls. The "step floor" row sums the shapes' times
// weighted by how often a GPT-2 small step runs each (12 per layer shape, 1 for the head, 48
// batched products per attention call): the time a step's GEMMs take at these rates.
//
//   bench_gemm [--threads 1,2] [--rounds 2] [--min-seconds 0.3] [--only qkv,head] [--no-write]
//
// Writes bench/results/gemm.json and the table between the bench_gemm markers in docs/benchmarks.md.
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dp/dp.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace dp;

const char* const kPaths[] = {"float32", "bf16-onednn", "bf16-float32"};

struct GemmShape {
  std::string name;
  const char* op;  // linear, mm, mm_tn (A given transposed), bmm
  int64_t m, k, n;
  int64_t batch;  // bmm's batch; 1 otherwise
  int per_step;   // how many a GPT-2 small (B 4, T 64) training step runs
};

std::vector<GemmShape> gpt2_shapes() {
  const int64_t t = 256, c = 768, v = 50257, l = 12;
  std::vector<GemmShape> s;
  auto lin = [&](const std::string& name, int64_t in, int64_t out, int per) {
    s.push_back({name + " fwd", "linear", t, in, out, 1, per});
    s.push_back({name + " dX", "mm", t, out, in, 1, per});
    s.push_back({name + " dW", "mm_tn", out, t, in, 1, per});
  };
  lin("qkv", c, 3 * c, l);
  lin("attn.proj", c, c, l);
  lin("mlp.fc", c, 4 * c, l);
  lin("mlp.proj", 4 * c, c, l);
  lin("head", c, v, 1);
  // attention per layer: B*H = 48 products of [64, 64] @ [64, 64], 2 forward and 4 backward.
  s.push_back({"attention bmm", "bmm", 64, 64, 64, 48, static_cast<int>(6 * l)});
  s.push_back({"square 2048", "mm", 2048, 2048, 2048, 1, 0});
  return s;
}

double flops(const GemmShape& s) { return 2.0 * s.m * s.k * s.n * s.batch; }

// The call that computes shape `s` in `dtype`, on operands made once.
std::function<void()> make_call(const GemmShape& s, DType dtype) {
  manual_seed(0);
  if (std::string(s.op) == "linear") {
    Tensor x = randn({s.m, s.k}).to(dtype), w = randn({s.n, s.k}).to(dtype);
    return [x, w] { dp::linear(x, w); };
  }
  if (std::string(s.op) == "mm") {
    Tensor a = randn({s.m, s.k}).to(dtype), b = randn({s.k, s.n}).to(dtype);
    return [a, b] { dp::mm(a, b); };
  }
  if (std::string(s.op) == "mm_tn") {  // dW = G^T @ X: G [k, m] read transposed
    Tensor g = randn({s.k, s.m}).to(dtype), x = randn({s.k, s.n}).to(dtype);
    return [g, x] { dp::mm(g.t(), x); };
  }
  Tensor a = randn({s.batch, s.m, s.k}).to(dtype), b = randn({s.batch, s.k, s.n}).to(dtype);
  return [a, b] { dp::bmm(a, b); };
}

std::vector<double> time_calls(const std::function<void()>& call, double min_seconds) {
  call();
  call();
  std::vector<double> t;
  double total = 0;
  while (total < min_seconds || t.size() < 3) {
    t.push_back(bench::time_call<std::milli>(call));
    total += t.back() / 1e3;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int> threads{1, 2};
  int rounds = 2;
  double min_seconds = 0.3;
  bool write = true;
  std::vector<std::string> only;
  for (bench::Args args("bench_gemm", argc, argv); args.next();) {
    if (args.is("--threads")) {
      threads.clear();
      for (const auto& t : bench::split_list(args.value())) threads.push_back(std::stoi(t));
    } else if (args.is("--rounds")) {
      rounds = std::stoi(args.value());
    } else if (args.is("--min-seconds")) {
      min_seconds = std::stod(args.value());
    } else if (args.is("--only")) {
      only = bench::split_list(args.value());
    } else if (args.is("--no-write")) {
      write = false;
    } else if (args.is_help()) {
      std::cout << "bench_gemm [--threads 1,2] [--rounds 2] [--min-seconds 0.3] [--only qkv,head] [--no-write]\n";
      return 0;
    } else {
      args.unknown();
    }
  }
  const fs::path root = fs::path(DP_SOURCE_DIR);
  json report = {{"machine", bench::machine_info(root)}};
  const bool onednn = backends::onednn::is_available();
  report["onednn"] = onednn ? backends::onednn::implementation() : "not available";
  std::vector<GemmShape> all;
  for (const GemmShape& s : gpt2_shapes()) {
    bool keep = only.empty();
    for (const auto& o : only) keep = keep || s.name.find(o) != std::string::npos;
    if (keep) all.push_back(s);
  }
  std::ostringstream md;
  md << bench::measured_on(report["machine"]) << "; oneDNN: " << report["onednn"].get<std::string>() << ". GFLOP/s, median over calls (`bench_gemm`, "
     << rounds << " rounds); load average at start " << report["machine"]["load_average_1min_at_start"].get<std::string>() << ".\n\n";
  for (int nt : threads) {
    set_num_threads(nt);
    std::map<std::string, std::map<std::string, std::vector<double>>> ms;  // shape -> path -> times
    for (int r = 0; r < rounds; ++r) {
      for (const GemmShape& s : all) {
        for (const char* path : kPaths) {
          const bool bf16 = std::string(path) != "float32";
          if (bf16 && std::string(path) == "bf16-onednn" && !onednn) continue;
          backends::onednn::set_enabled(std::string(path) == "bf16-onednn");
          auto call = make_call(s, bf16 ? kBFloat16 : kFloat32);
          for (double t : time_calls(call, min_seconds)) ms[s.name][path].push_back(t);
        }
      }
    }
    backends::onednn::set_enabled(true);
    std::cout << "threads " << nt << "  (GFLOP/s; ms per call)\n";
    md << "**" << nt << " thread" << (nt > 1 ? "s" : "")
       << "** (GFLOP/s)\n\n| shape | op | m x k x n | float32 | bf16 oneDNN | bf16 via float32 |\n|---|---|---|---|---|---|\n";
    std::map<std::string, double> floor_ms;
    json rows = json::array();
    for (const GemmShape& s : all) {
      json row = {{"shape", s.name}, {"op", s.op}, {"m", s.m}, {"k", s.k}, {"n", s.n}, {"batch", s.batch}, {"per_step", s.per_step}};
      std::string dims = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
      if (s.batch > 1) dims = std::to_string(s.batch) + " x " + dims;
      md << "| " << s.name << " | " << s.op << " | " << dims;
      std::cout << "  " << s.name << " " << dims;
      for (const char* path : kPaths) {
        auto it = ms[s.name].find(path);
        if (it == ms[s.name].end()) {
          md << " | –";
          continue;
        }
        const double med = bench::stats(it->second).median;
        const double gf = flops(s) / (med / 1e3) / 1e9;
        row[path] = {{"median_ms", med}, {"gflops", gf}};
        floor_ms[path] += s.per_step * med;
        md << " | " << bench::fmt(gf, 0);
        std::cout << "  " << path << " " << bench::fmt(gf, 0) << " (" << bench::fmt(med, 3) << " ms)";
      }
      md << " |\n";
      std::cout << "\n";
      rows.push_back(row);
    }
    md << "| GPT-2 small step's GEMMs | | ms |";
    std::cout << "  step GEMM floor (ms):";
    for (const char* path : kPaths) {
      md << " " << (floor_ms.count(path) ? bench::fmt(floor_ms[path], 0) : "–") << " |";
      if (floor_ms.count(path)) std::cout << " " << path << " " << bench::fmt(floor_ms[path], 0);
    }
    md << "\n\n";
    std::cout << "\n";
    report["threads_" + std::to_string(nt)] = {{"shapes", rows}, {"step_gemm_ms", floor_ms}};
  }
  if (write && only.empty()) bench::write_results(root, "gemm.json", report, "bench_gemm", md.str());
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
