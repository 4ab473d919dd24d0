// DataParallel on one GPU presented as several virtual CUDA devices: the MLP
// 784-1024-1024-10 at batch 4096 and the CNN at batch 512 (bench_cuda_training's models), cross-
// entropy, SGD momentum 0.9, float32, TF32 off. Configurations:
//   plain   the module on cuda:0
//   dp1     DataParallel on {cuda:0}
//   dp2     DataParallel on {cuda:0, cuda:1}             (two virtual devices of the one GPU)
//   dp4     DataParallel on {cuda:0, ..., cuda:3}
// and, in the same run, PyTorch's plain module and nn.DataParallel(device_ids=[0]) (bench/pytorch_cuda.py
// --mode dp). Since one GPU does all the work, dpK's time over plain's is what scatter, replicate,
// gather and the gradient reduction cost. Targets: dp1 within 3% of plain, dp4 within 15%; our dp1
// faster than PyTorch's DataParallel(device_ids=[0]).
//
// The virtual devices come from DP_CUDA_VIRTUAL_DEVICES (set to 4 by this program before the first
// CUDA call, unless already set). Protocol: bench_cuda_training's (warm-up, then repeats of steps
// between two synchronizes; median, min, max per step), the configurations taken in turn inside
// every repeat so drift hits all alike. All configurations start from the same weights and see the
// same batch, so their final losses must agree: they are printed side by side.
//
//   bench_cuda_data_parallel [--models mlp,cnn] [--warmup 5] [--steps 20] [--repeats 7] [--no-torch] [--no-write]
//
// Writes bench/results/cuda_data_parallel.json and the bench_cuda_data_parallel table in docs/benchmarks.md.
#include <cstdio>
#include <cstdlib>
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
#include "dp/parallel/parallel.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#include "dp/cuda/matmul.h"
#endif

namespace {

using json = nlohmann::json;
using namespace dp;

constexpr double kDp1Overhead = 1.03, kDp4Overhead = 1.15;

struct Options : bench::TrainingOptions {
  int repeats = 7;
  Options() {
    models = {"mlp", "cnn"};
    python = "python3";
    warmup = 5;
    steps = 20;
  }
};

#if DP_HAVE_CUDA
nn::Sequential make_model(const std::string& name) {
  if (name == "mlp") return nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
  if (name == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  throw ValueError("bench_cuda_data_parallel: unknown model '" + name + "' (mlp, cnn)");
}

struct Config {
  std::string name;
  std::function<Tensor()> step;
  std::vector<double> per_step_us = {};
  std::string error = {};
};

std::vector<Config> make_configs(const std::string& name, const Tensor& x, const Tensor& y) {
  std::vector<Config> out;
  nn::CrossEntropyLoss criterion;
  auto fresh = [&] {
    manual_seed(1);
    nn::Sequential m = make_model(name);
    m->to(Device::cuda(0));
    return m;
  };
  auto sgd = [](const std::vector<Tensor>& p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions(0.01).momentum(0.9)); };
  {
    nn::Sequential model = fresh();
    auto opt = sgd(model->parameters());
    out.push_back({"plain", [=]() mutable {
                     opt->zero_grad(false);
                     Tensor loss = criterion(model(x), y);
                     loss.backward();
                     opt->step();
                     return loss;
                   }});
  }
  for (int k : {1, 2, 4}) {
    Config c{"dp" + std::to_string(k), nullptr};
    if (cuda::device_count() < k) {
      c.error = "needs " + std::to_string(k) + " CUDA devices, " + std::to_string(cuda::device_count()) + " visible";
      out.push_back(c);
      continue;
    }
    std::vector<Device> ids;
    for (int i = 0; i < k; ++i) ids.push_back(Device::cuda(i));
    nn::Sequential model = fresh();
    nn::DataParallel net(model, ids);
    auto opt = sgd(net->parameters());
    c.step = [=]() mutable {
      opt->zero_grad(false);
      Tensor loss = criterion(net(x), y);
      loss.backward();
      opt->step();
      return loss;
    };
    out.push_back(c);
  }
  return out;
}

json run_model(const std::string& name, const Options& o) {
  manual_seed(0);
  const int64_t batch = name == "mlp" ? 4096 : 512;
  Tensor x = (name == "mlp" ? randn({batch, 784}) : randn({batch, 1, 28, 28})).to(Device::cuda(0));
  Tensor y = randint(0, 10, {batch}).to(Device::cuda(0));
  std::vector<Config> configs = make_configs(name, x, y);
  auto guarded = [&](Config& c, const std::function<void()>& f) {
    if (!c.error.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      c.error = e.what();
    }
  };
  for (Config& c : configs)
    guarded(c, [&] {
      for (int i = 0; i < o.warmup; ++i) c.step();
      cuda::synchronize(0);
    });
  for (int r = 0; r < o.repeats; ++r)
    for (Config& c : configs)
      guarded(c, [&] {
        cuda::synchronize(0);
        const double us = bench::time_call<std::micro>([&] {
          for (int i = 0; i < o.steps; ++i) c.step();
          cuda::synchronize(0);
        });
        c.per_step_us.push_back(us / o.steps);
      });
  json rows = json::array();
  for (Config& c : configs) {
    json row = {{"model", name}, {"config", c.name}, {"batch", batch}};
    if (!c.error.empty()) {
      row["error"] = c.error;
    } else {
      const bench::Stats s = bench::stats(c.per_step_us);
      row["ours"] = {{"median_us", s.median}, {"min_us", s.min}, {"max_us", s.max}, {"repeats", o.repeats}, {"steps_per_repeat", o.steps}};
      guarded(c, [&] { row["final_loss"] = c.step().item<double>(); });
    }
    rows.push_back(row);
  }
  return rows;
}
#endif

std::string cell(const json& t) {
  return t.is_null() ? "—" : bench::range_cell(t["median_us"].get<double>(), t["min_us"].get<double>(), t["max_us"].get<double>());
}

std::string markdown(const json& report) {
  std::ostringstream s;
  s << bench::measured_on(report["machine"]) << ", GPU " << report.value("gpu", std::string("?")) << ", PyTorch "
    << report.value("pytorch_version", std::string("—")) << ", DP_CUDA_VIRTUAL_DEVICES=" << report["virtual_devices"]
    << ". Cells: median [min – max] µs per training step over " << report["repeats"]
    << " repeats (configurations interleaved). Overhead = config / plain (ours); target dp1 ≤ 1.03, dp4 ≤ 1.15. "
       "PyTorch columns: its plain module and nn.DataParallel(device_ids=[0]).\n\n"
    << "| model | config | ours (µs) | overhead vs plain | target | met? | PyTorch (µs) | ours faster? | final loss "
       "|\n|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::string, double> plain;
  for (const json& r : report["rows"])
    if (r["config"] == "plain" && r.contains("ours")) plain[r["model"]] = r["ours"]["median_us"].get<double>();
  for (const json& r : report["rows"]) {
    const std::string model = r["model"], config = r["config"];
    const json* t = nullptr;
    if (report["pytorch"].is_array())
      for (const json& p : report["pytorch"])
        if (p["model"] == model && p["config"] == config) t = &p;
    s << "| " << model << " | " << config << " | ";
    if (r.contains("error")) {
      s << "error: " << r["error"].get<std::string>() << " | — | — | — | ";
    } else {
      const double us = r["ours"]["median_us"].get<double>();
      const double q = plain.count(model) ? us / plain[model] : 0;
      const double target = config == "dp1" ? kDp1Overhead : config == "dp4" ? kDp4Overhead : 0;
      s << cell(r["ours"]) << " | " << (config == "plain" ? "1" : bench::fmt(q, 3)) << " | " << (target > 0 ? "≤ " + bench::fmt(target) : "—")
        << " | " << (target > 0 ? (q <= target ? "yes" : "no") : "—") << " | ";
    }
    s << (t ? cell((*t)["pytorch"]) : "—") << " | ";
    if (t && r.contains("ours"))
      s << (r["ours"]["median_us"].get<double>() < (*t)["pytorch"]["median_us"].get<double>() ? "yes" : "no");
    else
      s << "—";
    s << " | " << (r.contains("final_loss") ? bench::fmt(r["final_loss"].get<double>(), 6) : "—") << " |\n";
  }
  return s.str();
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_cuda_data_parallel", argc, argv); args.next();) {
    if (o.read_option(args)) continue;
    if (args.is("--repeats"))
      o.repeats = std::stoi(args.value());
    else if (args.is_help()) {
      std::cout
          << "bench_cuda_data_parallel [--models mlp,cnn] [--warmup 5] [--steps 20] [--repeats 7] [--no-torch] [--no-write] [--python python3]\n";
      std::exit(0);
    } else
      args.unknown();
  }
  DP_CHECK(o.repeats >= 1 && o.steps >= 1, ValueError, "bench_cuda_data_parallel: --repeats and --steps must be >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  ::setenv("DP_CUDA_VIRTUAL_DEVICES", "4", 0);  // before the first CUDA call; an existing value wins
  Options o = parse(argc, argv);
#if !DP_HAVE_CUDA
  std::cout << "bench_cuda_data_parallel: built without the CUDA backend; nothing measured\n";
  return 0;
#else
  if (!cuda::is_available()) {
    std::cout << "bench_cuda_data_parallel: no CUDA device is visible; nothing measured\n";
    return 0;
  }
  cuda::set_allow_tf32(false);
  json report = {{"machine", bench::machine_info(o.root)},
                 {"repeats", o.repeats},
                 {"virtual_devices", std::getenv("DP_CUDA_VIRTUAL_DEVICES")},
                 {"rows", json::array()},
                 {"pytorch", nullptr}};
  for (const std::string& name : o.models)
    for (json& r : run_model(name, o)) report["rows"].push_back(r);
  if (o.torch) {
    std::string m;
    for (const auto& x : o.models) m += (m.empty() ? "" : ",") + x;
    const std::string cmd = o.python + " " + bench::quote((o.root / "bench" / "pytorch_cuda.py").string()) + " --mode dp --models " +
                            bench::quote(m) + " --warmup " + std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) + " --repeats " +
                            std::to_string(o.repeats);
    json t = json::parse(bench::run_command(cmd), nullptr, false);
    if (t.is_object() && t.contains("rows")) {
      report["pytorch"] = t["rows"];
      report["pytorch_version"] = t["torch"];
      report["gpu"] = t["gpu"];
    } else {
      std::cerr << "bench_cuda_data_parallel: the PyTorch side (" << cmd << ") failed\n";
    }
  }
  const std::string md = markdown(report);
  std::cout << md;
  if (o.write) bench::write_results(o.root, "cuda_data_parallel.json", report, "bench_cuda_data_parallel", md);
  return 0;
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_data_parallel: %s\n", e.what());
  return 2;
}
