// Training-step time in float32 and under bfloat16 autocast on the CPU, dparallel against PyTorch
// in the same run: an MLP 784-1024-1024-10 at batch 256 and a CNN (conv32-conv64-fc128, as
// bench_training) at batch 128, cross-entropy, SGD with momentum. A step is zero_grad, forward and
// loss (in an autocast region in the bf16 mode), backward, optimizer step, on fixed random batches.
//
// Protocol: for each of --rounds rounds, every dparallel configuration (--warmup steps, then
// --steps timed one by one) and then every PyTorch one (bench/pytorch_amp.py, a python3
// subprocess doing the same), so both sides sample the machine's drift alike. Medians, min and max
// are over all rounds' steps, in milliseconds. A configuration dparallel cannot run (a bfloat16
// kernel it lacks) is reported with the reason instead of a time.
//
//   bench_amp [--models mlp,cnn] [--rounds 2] [--warmup 3] [--steps 10] [--threads 1] [--no-torch] [--no-write]
//
// Writes bench/results/amp.json and the table between the bench_amp markers in docs/benchmarks.md.
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dp/amp/autocast.h"
#include "dp/dp.h"
#include "dp/nn/modules/conv.h"
#include "dp/nn/modules/loss.h"
#include "dp/nn/modules/pooling.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"

namespace {

using json = nlohmann::json;
using namespace dp;

const char* const kModes[] = {"float32", "bf16"};

struct Options : bench::TrainingOptions {
  int threads = 1;
  int rounds = 2;
  Options() {
    models = {"mlp", "cnn"};
    warmup = 3;
    steps = 10;
  }
};

// Builds the model, batch and optimizer (seeded); returns one training step.
std::function<void()> make_step(const std::string& model_name, bool bf16) {
  manual_seed(0);
  nn::Sequential model;
  Tensor x, y;
  if (model_name == "mlp") {
    model = nn::Sequential(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
    x = randn({256, 784});
    y = randint(0, 10, {256});
  } else {
    model = nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                           nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                           nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
    x = randn({128, 1, 28, 28});
    y = randint(0, 10, {128});
  }
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  nn::CrossEntropyLoss loss_fn;
  return [=]() mutable {
    opt->zero_grad(true);
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CPU, kBFloat16, bf16);
      loss = loss_fn(model->forward(x), y);
    }
    loss.backward();
    opt->step();
  };
}

bool cpu_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

std::string cell(const std::vector<double>& v) {
  if (v.empty()) return "–";
  const bench::Stats s = bench::stats(v);
  return bench::range_cell(s.median, s.min, s.max);
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  for (bench::Args args("bench_amp", argc, argv); args.next();) {
    if (o.read_option(args)) continue;
    if (args.is("--threads"))
      o.threads = std::stoi(args.value());
    else if (args.is("--rounds"))
      o.rounds = std::stoi(args.value());
    else if (args.is_help()) {
      std::cout << "bench_amp [--models mlp,cnn] [--rounds 2] [--warmup 3] [--steps 10] [--threads 1] [--python PATH] [--no-torch] [--no-write]\n";
      return 0;
    } else
      args.unknown();
  }
  set_num_threads(o.threads);
  json report = {{"machine", bench::machine_info(o.root)}};
  report["machine"]["avx512_bf16"] = cpu_flag("avx512_bf16");
  report["machine"]["amx_bf16"] = cpu_flag("amx_bf16");
  report["options"] = {{"models", o.models}, {"rounds", o.rounds}, {"warmup", o.warmup}, {"steps", o.steps}, {"threads", o.threads}};

  std::map<std::string, std::map<std::string, std::vector<double>>> ours, theirs;
  std::map<std::string, std::map<std::string, std::string>> not_run;
  std::string torch_version = "not run";
  for (int round = 0; round < o.rounds; ++round) {
    for (const std::string& m : o.models) {
      for (const char* mode : kModes) {
        if (not_run[m].count(mode)) continue;
        auto step = make_step(m, std::string(mode) == "bf16");
        try {
          for (int i = 0; i < o.warmup; ++i) step();
          for (int i = 0; i < o.steps; ++i) ours[m][mode].push_back(bench::time_call<std::milli>(step));
        } catch (const Error& e) {
          not_run[m][mode] = e.what();
        }
      }
    }
    if (!o.torch) continue;
    std::string models_arg;
    for (const auto& m : o.models) models_arg += (models_arg.empty() ? "" : ",") + m;
    std::ostringstream cmd;
    cmd << "OPENBLAS_NUM_THREADS=" << o.threads << " OMP_NUM_THREADS=" << o.threads << " " << bench::quote(o.python) << " "
        << bench::quote((o.root / "bench" / "pytorch_amp.py").string()) << " --models " << bench::quote(models_arg) << " --warmup " << o.warmup
        << " --steps " << o.steps << " --threads " << o.threads;
    const std::string command = cmd.str();
    int status = 0;
    const json r = json::parse(bench::run_command(command, &status), nullptr, false);
    if (status != 0 || r.is_discarded()) {
      std::cerr << "bench_amp: the PyTorch side failed (" << command << ")\n";
      o.torch = false;
      continue;
    }
    torch_version = r["torch"];
    for (const auto& [m, modes] : r["results"].items())
      for (const auto& [mode, times] : modes.items())
        for (double t : times) theirs[m][mode].push_back(t);
  }

  // The table: one row per model and mode.
  std::ostringstream md;
  md << bench::measured_on(report["machine"]) << "; PyTorch " << torch_version << "; " << o.threads << " thread(s); " << o.rounds << " rounds of "
     << o.steps << " timed steps (after " << o.warmup << " warm-up steps) per configuration. "
     << "CPU bfloat16 instructions: avx512_bf16 " << (report["machine"]["avx512_bf16"].get<bool>() ? "yes" : "no") << ", amx_bf16 "
     << (report["machine"]["amx_bf16"].get<bool>() ? "yes" : "no") << ".\n\n"
     << "| model | mode | dparallel ms/step median [min – max] | PyTorch ms/step median [min – max] | PyTorch / dparallel | bf16 / float32 time, "
        "dparallel | bf16 / float32 time, PyTorch |\n"
     << "|---|---|---|---|---|---|---|\n";
  json results = json::object();
  auto median = [](const std::vector<double>& v) { return v.empty() ? 0.0 : bench::stats(v).median; };
  for (const std::string& m : o.models) {
    for (const char* mode : kModes) {
      const auto& a = ours[m][mode];
      const auto& b = theirs[m][mode];
      json row = {{"dparallel_ms", a}, {"pytorch_ms", b}};
      std::string ours_cell = cell(a);
      if (not_run[m].count(mode)) {
        row["dparallel_not_run"] = not_run[m][mode];
        ours_cell = "not run: " + not_run[m][mode];
      }
      const bool bf = std::string(mode) == "bf16";
      const double oa = median(a), ob = median(b), of = median(ours[m]["float32"]), tf = median(theirs[m]["float32"]);
      md << "| " << m << " | " << (bf ? "bf16 autocast" : "float32") << " | " << ours_cell << " | " << cell(b) << " | "
         << (oa > 0 && ob > 0 ? bench::fmt(ob / oa) : "–") << " | " << (bf && oa > 0 && of > 0 ? bench::fmt(oa / of) : "–") << " | "
         << (bf && ob > 0 && tf > 0 ? bench::fmt(ob / tf) : "–") << " |\n";
      results[m][mode] = row;
    }
  }
  report["results"] = results;
  report["torch"] = torch_version;
  std::cout << md.str();
  if (o.write) bench::write_results(o.root, "amp.json", report, "bench_amp", md.str());
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
