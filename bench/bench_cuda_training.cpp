// Training-step time on one GPU, dparallel against PyTorch (CUDA) in the same run:
//   seed  Linear(5,1) + Sigmoid, batch 30, BCELoss, SGD: eager, and the step captured as a CUDA graph
//   mlp   784-1024-1024-10 at batch 4096, cross-entropy, SGD momentum 0.9
//   cnn   conv32-pool-conv64-pool-fc128-fc10 at batch 512, cross-entropy, SGD momentum 0.9
// each in float32 and bfloat16 (model and input converted), TF32 off on both sides; and the MLP's
// GEMMs (forward and both backward products at batch 4096) through dp::matmul against torch.matmul
// (cuBLAS) on the same shapes, as TFLOP/s.
//
// Protocol (bench/pytorch_cuda.py follows it): --warmup steps, then --repeats times: synchronize,
// clock, --steps steps, synchronize, clock; the time per step of a repeat is its wall time over the
// steps; median, min and max over the repeats. The PyTorch side runs after ours, in a python3
// subprocess (the GPU's python, which holds PyTorch with CUDA). A configuration our side cannot run
// (an op or dtype without a CUDA path) is reported with the error it raised, not left out.
//
//   bench_cuda_training [--models seed,mlp,cnn] [--dtypes float32,bfloat16] [--warmup 10] [--steps N]
//                       [--repeats 7] [--no-torch] [--no-write] [--python python3] [--root DIR]
//
// Targets: seed >= 20x PyTorch eager (with graph capture), MLP >= 1.2x, CNN >= 1.0x; the
// MLP's GEMMs >= 70% of the cuBLAS rate. Without a visible GPU it says so and writes nothing.
// Writes bench/results/cuda_training.json and the bench_cuda_training table in docs/benchmarks.md.
#include <chrono>
#include <cstdio>
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
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#include "dp/cuda/graph.h"
#include "dp/cuda/matmul.h"
#endif

namespace {

using json = nlohmann::json;
using namespace dp;

struct Options : bench::TrainingOptions {
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  int repeats = 7;
  bool gemm = true;
  Options() {
    models = {"seed", "mlp", "cnn"};
    python = "python3";
  }
};

const std::map<std::string, double> kTargets = {{"seed", 20.0}, {"mlp", 1.2}, {"cnn", 1.0}};
constexpr double kGemmTarget = 0.70;

#if DP_HAVE_CUDA
DType dtype_named(const std::string& s) {
  if (s == "float32") return kFloat32;
  if (s == "bfloat16") return kBFloat16;
  throw ValueError("bench_cuda_training: unknown dtype '" + s + "' (float32, bfloat16)");
}

void sync() { cuda::synchronize(0); }

// Times `step` per the protocol; microseconds per step.
json time_steps(const std::function<void()>& step, int warmup, int steps, int repeats) {
  for (int i = 0; i < warmup; ++i) step();
  sync();
  std::vector<double> per_step;
  for (int r = 0; r < repeats; ++r) {
    sync();
    const double us = bench::time_call<std::micro>([&] {
      for (int i = 0; i < steps; ++i) step();
      sync();
    });
    per_step.push_back(us / steps);
  }
  const bench::Stats s = bench::stats(per_step);
  return {{"median_us", s.median}, {"min_us", s.min}, {"max_us", s.max}, {"repeats", repeats}, {"steps_per_repeat", steps}};
}

struct Built {
  std::function<Tensor()> step;
  int64_t batch;
};

template <typename Model, typename Loss>
Built make_step(Model model, Loss loss_fn, Tensor x, Tensor y, double lr, double momentum) {
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(lr).momentum(momentum));
  const int64_t batch = x.size(0);
  return {[=]() mutable {
            opt->zero_grad(false);
            Tensor loss = loss_fn(model(x), y);
            loss.backward();
            opt->step();
            return loss;
          },
          batch};
}

Built build(const std::string& name, DType dt) {
  manual_seed(0);
  const Device gpu = Device::cuda(0);
  auto on_gpu = [&](auto model) {
    model->to(gpu, dt);
    return model;
  };
  if (name == "seed") {
    auto model = on_gpu(nn::Sequential(nn::Linear(5, 1), nn::Sigmoid()));
    Tensor x = randn({30, 5}).to(gpu, dt), y = rand({30, 1}).gt(0.5).to(gpu, dt);
    return make_step(model, nn::BCELoss(), x, y, 1e-3, 0.0);
  }
  if (name == "mlp") {
    auto model = on_gpu(nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10)));
    Tensor x = randn({4096, 784}).to(gpu, dt), y = randint(0, 10, {4096}).to(gpu);
    return make_step(model, nn::CrossEntropyLoss(), x, y, 0.01, 0.9);
  }
  if (name == "cnn") {
    auto model = on_gpu(nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                                       nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                                       nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10)));
    Tensor x = randn({512, 1, 28, 28}).to(gpu, dt), y = randint(0, 10, {512}).to(gpu);
    return make_step(model, nn::CrossEntropyLoss(), x, y, 0.01, 0.9);
  }
  throw ValueError("bench_cuda_training: unknown model '" + name + "' (seed, mlp, cnn)");
}

// Our side of one (model, dtype): eager steps, and for the seed model the graph-captured step.
json run_ours(const std::string& name, const std::string& dtype, const Options& o) {
  const int steps = o.steps > 0 ? o.steps : (name == "seed" ? 2000 : 50);
  json r = {{"model", name}, {"dtype", dtype}};
  try {
    Built b = build(name, dtype_named(dtype));
    r["batch"] = b.batch;
    r["eager"] = time_steps([&] { b.step(); }, o.warmup, steps, o.repeats);
    r["final_loss"] = b.step().to(kFloat32).item<double>();
  } catch (const std::exception& e) {
    r["error"] = e.what();
  }
  if (name == "seed" && !r.contains("error")) {
    // A fresh model, its step captured once (after 3 eager warm-up steps) and replayed.
    try {
      Built b = build(name, dtype_named(dtype));
      std::function<void()> replay = cuda::make_graphed_step([&] { b.step(); }, 3);
      r["graph"] = time_steps(replay, o.warmup, steps, o.repeats);
    } catch (const std::exception& e) {
      r["graph_error"] = e.what();
    }
  }
  return r;
}

// dp::matmul on the MLP's GEMM shapes, as pytorch_cuda.py --mode gemm.
json run_gemm(const Options& o) {
  json rows = json::array();
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{4096, 784, 1024}, {4096, 1024, 1024}, {4096, 1024, 10}}) {
    const std::vector<std::pair<std::string, std::array<int64_t, 3>>> shapes = {{"fwd", {m, k, n}}, {"grad_in", {m, n, k}}, {"grad_w", {n, m, k}}};
    for (const auto& [label, s] : shapes) {
      for (const std::string& dtype : o.dtypes) {
        json row = {{"gemm", label}, {"m", s[0]}, {"k", s[1]}, {"n", s[2]}, {"dtype", dtype}};
        try {
          const DType dt = dtype_named(dtype);
          Tensor a = randn({s[0], s[1]}).to(Device::cuda(0), dt), b = randn({s[1], s[2]}).to(Device::cuda(0), dt);
          json t = time_steps([&] { (void)matmul(a, b); }, 10, 100, o.repeats);
          t["tflops"] = 2.0 * double(s[0]) * double(s[1]) * double(s[2]) / (t["median_us"].get<double>() * 1e-6) / 1e12;
          row["ours"] = t;
        } catch (const std::exception& e) {
          row["error"] = e.what();
        }
        rows.push_back(row);
      }
    }
  }
  return rows;
}
#endif

json run_torch(const Options& o, const std::string& mode) {
  std::string cmd = o.python + " " + bench::quote((o.root / "bench" / "pytorch_cuda.py").string()) + " --mode " + mode + " --dtypes " +
                    bench::quote([&] {
                      std::string s;
                      for (const auto& d : o.dtypes) s += (s.empty() ? "" : ",") + d;
                      return s;
                    }()) +
                    " --warmup " + std::to_string(o.warmup) + " --repeats " + std::to_string(o.repeats);
  if (mode == "training") {
    std::string m;
    for (const auto& x : o.models) m += (m.empty() ? "" : ",") + x;
    cmd += " --models " + bench::quote(m);
    if (o.steps > 0) cmd += " --steps " + std::to_string(o.steps);
  }
  int status = 0;
  json r = json::parse(bench::run_command(cmd, &status), nullptr, false);
  if (r.is_discarded() || !r.is_object() || r.contains("error")) {
    std::cerr << "bench_cuda_training: the PyTorch side (" << cmd << ") failed"
              << (r.is_object() && r.contains("error") ? ": " + r["error"].dump() : "") << "\n";
    return nullptr;
  }
  return r;
}

std::string cell(const json& t) {
  if (t.is_null()) return "—";
  return bench::range_cell(t["median_us"].get<double>(), t["min_us"].get<double>(), t["max_us"].get<double>());
}

const json* find_row(const json& rows, const std::function<bool(const json&)>& pred) {
  for (const json& r : rows)
    if (pred(r)) return &r;
  return nullptr;
}

std::string markdown(const json& report) {
  const json& m = report["machine"];
  std::ostringstream s;
  s << bench::measured_on(m) << ", GPU " << report.value("gpu", std::string("?")) << ", PyTorch " << report.value("pytorch_version", std::string("—"))
    << ", TF32 off on both sides.\nCells: median [min – max] µs per training step (zero_grad, forward, loss, backward, SGD step) "
    << "over " << report["repeats"] << " repeats of back-to-back steps, each timed from a synchronize to a synchronize. "
    << "Ratio = PyTorch eager / ours. An error cell is what our side raised.\n\n"
    << "| model | dtype | ours eager (µs) | ours graph (µs) | PyTorch eager (µs) | PyTorch graph (µs) | ratio | target | met? |\n"
    << "|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : report["training"]) {
    const json* t = report["pytorch_training"].is_null()
                        ? nullptr
                        : find_row(report["pytorch_training"], [&](const json& x) { return x["model"] == r["model"] && x["dtype"] == r["dtype"]; });
    const std::string name = r["model"].get<std::string>();
    s << "| " << name << " | " << r["dtype"].get<std::string>() << " | ";
    if (r.contains("error"))
      s << "error: " << r["error"].get<std::string>() << " | — | ";
    else
      s << cell(r["eager"]) << " | "
        << (r.contains("graph")         ? cell(r["graph"])
            : r.contains("graph_error") ? "error: " + r["graph_error"].get<std::string>()
                                        : "—")
        << " | ";
    s << (t ? cell((*t)["eager"]) : "—") << " | " << (t && t->contains("graph") ? cell((*t)["graph"]) : "—") << " | ";
    if (t && !r.contains("error")) {
      const json& ours = r.contains("graph") ? r["graph"] : r["eager"];
      const double q = (*t)["eager"]["median_us"].get<double>() / ours["median_us"].get<double>();
      s << bench::fmt(q) << " | ≥ " << bench::fmt(kTargets.at(name), 1) << " | " << (q >= kTargets.at(name) ? "yes" : "no") << " |\n";
    } else {
      s << "— | ≥ " << bench::fmt(kTargets.at(name), 1) << " | — |\n";
    }
  }
  if (report.contains("gemm")) {
    s << "\nThe MLP's GEMMs at batch 4096 (m×k×n; fwd: x·Wᵀ, grad_in, grad_w), dp::matmul vs torch.matmul (cuBLAS), TFLOP/s "
         "from the median of 100-product repeats; target ours ≥ "
      << bench::fmt(kGemmTarget * 100, 0)
      << "% of cuBLAS.\n\n| GEMM | m×k×n | dtype | ours TFLOP/s | cuBLAS (PyTorch) TFLOP/s | ours / cuBLAS |\n|---|---|---|---|---|---|\n";
    for (const json& r : report["gemm"]) {
      const json* t = report["pytorch_gemm"].is_null() ? nullptr : find_row(report["pytorch_gemm"], [&](const json& x) {
        return x["gemm"] == r["gemm"] && x["m"] == r["m"] && x["dtype"] == r["dtype"] && x["n"] == r["n"];
      });
      s << "| " << r["gemm"].get<std::string>() << " | " << r["m"] << "×" << r["k"] << "×" << r["n"] << " | " << r["dtype"].get<std::string>()
        << " | ";
      const bool ours_ok = r.contains("ours");
      s << (ours_ok ? bench::fmt(r["ours"]["tflops"].get<double>(), 1) : "error: " + r.value("error", std::string("?"))) << " | "
        << (t ? bench::fmt((*t)["pytorch"]["tflops"].get<double>(), 1) : "—") << " | "
        << (t && ours_ok ? bench::fmt(100.0 * r["ours"]["tflops"].get<double>() / (*t)["pytorch"]["tflops"].get<double>(), 0) + "%" : "—") << " |\n";
    }
  }
  return s.str();
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_cuda_training", argc, argv); args.next();) {
    if (o.read_option(args)) continue;
    if (args.is("--dtypes"))
      o.dtypes = bench::split_list(args.value());
    else if (args.is("--repeats"))
      o.repeats = std::stoi(args.value());
    else if (args.is("--no-gemm"))
      o.gemm = false;
    else if (args.is_help()) {
      std::cout << "bench_cuda_training [--models seed,mlp,cnn] [--dtypes float32,bfloat16] [--warmup 10] [--steps N] [--repeats 7]\n"
                   "                    [--no-gemm] [--no-torch] [--no-write] [--python python3] [--root DIR]\n";
      std::exit(0);
    } else
      args.unknown();
  }
  DP_CHECK(o.repeats >= 1, ValueError, "bench_cuda_training: --repeats must be >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
#if !DP_HAVE_CUDA
  std::cout << "bench_cuda_training: built without the CUDA backend; nothing measured\n";
  return 0;
#else
  if (!cuda::is_available()) {
    std::cout << "bench_cuda_training: no CUDA device is visible; nothing measured\n";
    return 0;
  }
  cuda::set_allow_tf32(false);
  json report = {{"machine", bench::machine_info(o.root)}, {"warmup", o.warmup}, {"repeats", o.repeats}, {"training", json::array()}};
  for (const std::string& name : o.models) {
    DP_CHECK(kTargets.count(name), ValueError, "bench_cuda_training: unknown model '", name, "' (seed, mlp, cnn)");
    for (const std::string& dtype : o.dtypes) {
      json r = run_ours(name, dtype, o);
      std::cerr << name << " " << dtype << ": " << (r.contains("error") ? "error: " + r["error"].get<std::string>() : cell(r["eager"]) + " µs")
                << "\n";
      report["training"].push_back(r);
    }
  }
  if (o.gemm) report["gemm"] = run_gemm(o);
  report["pytorch_training"] = nullptr;
  report["pytorch_gemm"] = nullptr;
  if (o.torch) {
    json t = run_torch(o, "training");
    if (!t.is_null()) {
      report["pytorch_training"] = t["rows"];
      report["pytorch_version"] = t["torch"];
      report["gpu"] = t["gpu"];
    }
    if (o.gemm) {
      json g = run_torch(o, "gemm");
      if (!g.is_null()) report["pytorch_gemm"] = g["rows"];
    }
  }
  const std::string md = markdown(report);
  std::cout << md;
  if (o.write) bench::write_results(o.root, "cuda_training.json", report, "bench_cuda_training", md);
  return 0;
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_training: %s\n", e.what());
  return 2;
}
