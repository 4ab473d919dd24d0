// Data-parallel training by hand, with nothing but the core: linear regression
//   y = X·w_true + b_true + noise,   X: 4096 rows × 16 features,   noise ~ N(0, 0.01²)
// trained by full-batch gradient descent, the batch split across CPU devices (default cpu:0 and
// cpu:1). Each step:
//   1. the host parameters are copied to every device with the differentiable .to(device);
//   2. each device computes its half's forward and loss on its own worker thread, in parallel;
//   3. one backward over the summed loss: the engine runs each device's part on that device's
//      worker, and the gradients flow back through .to() into the host parameters' .grad;
//   4. SGD under NoGradGuard, then the gradients are zeroed.
// Step 0 also checks that the gradient assembled from the devices equals the full-batch gradient
// computed on the host alone (the DataParallel contract).
//
//   train_two_devices [--devices cpu:0,cpu:1] [--steps 200] [--lr 0.1] [--rows 4096] [--features 16] [--seed 0]
//
// Exit status: 0 when the final loss is below the threshold explained at kNoiseStd, 1 when it is
// not (or the step-0 gradient check fails), 2 on a usage or runtime error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <iostream>
#include <string>
#include <vector>

#include "dp/dp.h"

namespace {

// With noise of standard deviation σ the least-squares fit leaves a training MSE of about
// σ²·(1 − (features + 1)/rows) ≈ 0.996·σ² (sampling spread ±2.2% for 4096 rows), and gradient
// descent at lr 0.1 shrinks the remaining error by about (1 − 2·lr) = 0.8 per step (the Hessian of
// the MSE is 2·XᵀX/rows ≈ 2·I), so after 200 steps the optimisation error is ~1e-19 of the
// starting loss (~17). A converged run therefore ends at ≈ σ²; 1.5·σ² leaves room for rounding and
// sampling, while a run that has not converged (too few steps, a gradient that lost a device's
// share and so moves half as fast, divergence, NaN) stays above it.
constexpr double kNoiseStd = 0.01;
constexpr double kLossThreshold = 1.5 * kNoiseStd * kNoiseStd;
constexpr double kBias = 0.5;

struct Args {
  std::vector<dp::Device> devices{dp::Device("cpu:0"), dp::Device("cpu:1")};
  int steps = 200;
  double lr = 0.1;
  int64_t rows = 4096;
  int64_t features = 16;
  uint64_t seed = 0;
};

std::vector<dp::Device> parse_devices(const std::string& list) {
  std::vector<dp::Device> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.emplace_back(item);  // throws ValueError naming a bad spec
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  DP_CHECK(!out.empty(), ValueError, "--devices: expected a comma-separated list such as cpu:0,cpu:1, got '", list, "'");
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string opt = argv[i];
    auto value = [&]() -> std::string {
      DP_CHECK(i + 1 < argc, ValueError, opt, " needs a value");
      return argv[++i];
    };
    if (opt == "--devices")
      a.devices = parse_devices(value());
    else if (opt == "--steps")
      a.steps = std::stoi(value());
    else if (opt == "--lr")
      a.lr = std::stod(value());
    else if (opt == "--rows")
      a.rows = std::stoll(value());
    else if (opt == "--features")
      a.features = std::stoll(value());
    else if (opt == "--seed")
      a.seed = std::stoull(value());
    else if (opt == "--help" || opt == "-h") {
      std::cout << "train_two_devices [--devices cpu:0,cpu:1] [--steps 200] [--lr 0.1] [--rows 4096] [--features 16] [--seed 0]\n";
      std::exit(0);
    } else {
      throw dp::ValueError("unknown option " + opt + " (see --help)");
    }
  }
  DP_CHECK(a.steps >= 1, ValueError, "--steps must be >= 1, got ", a.steps);
  DP_CHECK(a.lr > 0, ValueError, "--lr must be > 0, got ", a.lr);
  DP_CHECK(a.rows >= static_cast<int64_t>(a.devices.size()) && a.features >= 1, ValueError,
           "--rows must be >= the number of devices and --features >= 1");
  return a;
}

// The CPU devices named on the command line must exist: grow the CPU device count if needed
// (it defaults to the number of hardware threads, or DP_CPU_DEVICES).
void ensure_devices(const std::vector<dp::Device>& devices) {
  int needed = 0;
  for (dp::Device d : devices)
    if (d.is_cpu()) needed = std::max(needed, d.index + 1);
  if (needed > dp::cpu_device_count()) dp::set_cpu_device_count(needed);
  for (dp::Device d : devices) dp::check_device(d);
}

double max_abs_diff(const dp::Tensor& a, const dp::Tensor& b) { return dp::max(dp::abs(a - b)).item<double>(); }

int run(const Args& args) {
  ensure_devices(args.devices);
  const auto n_dev = static_cast<int64_t>(args.devices.size());
  dp::manual_seed(args.seed);

  // The data, made on the host: y = X·w_true + b_true + noise.
  dp::Tensor x = dp::randn({args.rows, args.features});
  dp::Tensor w_true = dp::randn({args.features, 1});
  dp::Tensor y = dp::mm(x, w_true) + kBias + dp::randn({args.rows, 1}) * kNoiseStd;

  // One shard per device (torch.chunk sizes), moved once: the data does not change between steps.
  std::vector<dp::Tensor> xs = x.chunk(n_dev, 0), ys = y.chunk(n_dev, 0);
  const auto used = static_cast<int64_t>(xs.size());
  for (int64_t i = 0; i < used; ++i) {
    xs[i] = xs[i].to(args.devices[i]);
    ys[i] = ys[i].to(args.devices[i]);
  }

  // The parameters live on the host.
  dp::Tensor w = dp::zeros({args.features, 1}).requires_grad_();
  dp::Tensor b = dp::zeros({1}).requires_grad_();

  std::cout << "linear regression: " << args.rows << " rows x " << args.features << " features, " << args.steps << " steps, lr " << args.lr
            << ", shards on";
  for (int64_t i = 0; i < used; ++i) std::cout << " " << args.devices[i].str() << " (" << xs[i].size(0) << " rows)";
  std::cout << "\n";

  // Forward and loss of one step; the loss is the mean squared error over the whole batch, each
  // device contributing sum((pred - y)²) / rows for its shard.
  auto forward = [&]() -> dp::Tensor {
    std::vector<dp::Tensor> ws(used), bs(used);
    for (int64_t i = 0; i < used; ++i) {  // broadcast: differentiable copies host -> device
      ws[i] = w.to(args.devices[i]);
      bs[i] = b.to(args.devices[i]);
    }
    std::vector<std::future<dp::Tensor>> parts;
    const bool grad_enabled = dp::GradMode::is_enabled();  // grad mode is per thread: carry it over
    for (int64_t i = 0; i < used; ++i) {
      auto shard = [&, i, grad_enabled] {
        dp::AutoGradMode mode(grad_enabled);
        dp::Tensor err = dp::mm(xs[i], ws[i]) + bs[i] - ys[i];
        return dp::sum(err * err) / static_cast<double>(args.rows);
      };
      dp::Worker* worker = dp::worker_for(args.devices[i]);
      if (worker)
        parts.push_back(worker->submit(shard));
      else
        parts.push_back(std::async(std::launch::deferred, shard));  // the host "cpu": this thread
    }
    dp::Tensor loss;
    for (auto& f : parts) {  // gather the partial losses on the host and sum them
      dp::Tensor l = f.get().to(dp::Device::cpu());
      loss = loss.defined() ? loss + l : l;
    }
    return loss;
  };

  auto t0 = std::chrono::steady_clock::now();
  double loss_value = 0;
  for (int step = 0; step < args.steps; ++step) {
    dp::Tensor loss = forward();
    loss.backward();
    loss_value = loss.item<double>();

    if (step == 0) {
      // The gradient assembled from the devices must equal the full-batch host gradient.
      dp::Tensor err = dp::mm(x, w) + b - y;
      dp::Tensor ref = dp::sum(err * err) / static_cast<double>(args.rows);
      std::vector<dp::Tensor> g = dp::autograd::grad({ref}, {w, b});
      double dw = max_abs_diff(w.grad(), g[0]), db = max_abs_diff(b.grad(), g[1]);
      double scale = std::max(1.0, dp::max(dp::abs(g[0])).item<double>());
      std::printf("step 0 gradient check: max |device grad - full-batch grad| = %.3g (w), %.3g (b)\n", dw, db);
      if (!(dw <= 1e-4 * scale && db <= 1e-4 * scale)) {
        std::printf("FAILED: the gradient from %lld devices differs from the single-device full-batch gradient\n", static_cast<long long>(used));
        return 1;
      }
    }
    if (step % 20 == 0) std::printf("step %4d  loss %.6f\n", step, loss_value);

    {
      dp::NoGradGuard no_grad;
      w.sub_(w.grad() * args.lr);
      b.sub_(b.grad() * args.lr);
      w.mutable_grad().zero_();
      b.mutable_grad().zero_();
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  dp::Tensor final_loss;
  {
    dp::NoGradGuard no_grad;
    final_loss = forward();
  }
  double final_value = final_loss.item<double>();
  double w_err = max_abs_diff(w.detach(), w_true);
  double b_err = std::abs(b.item<double>() - kBias);
  std::printf("step %4d  loss %.6f\n", args.steps, final_value);
  std::printf("learned vs true: max |w - w_true| = %.3g, |b - b_true| = %.3g (b = %.5f, b_true = %.5f)\n", w_err, b_err, b.item<double>(), kBias);
  std::printf("final loss %.6g, threshold %.6g (1.5 x noise variance); %.1f ms per step on %lld devices\n", final_value, kLossThreshold,
              1e3 * seconds / args.steps, static_cast<long long>(used));
  if (!(final_value < kLossThreshold)) {
    std::printf("FAILED: did not converge (final loss %.6g is not below %.6g)\n", final_value, kLossThreshold);
    return 1;
  }
  std::printf("converged\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "train_two_devices: " << e.what() << "\n";
    return 2;
  }
}
