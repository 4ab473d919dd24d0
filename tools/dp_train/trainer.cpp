#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>
#include "checkpoint.h"
#include "data.h"
#include "devices.h"
#include "dp/dp.h"
#include "dp/nn/serialize.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
#include "jsonl_log.h"
#include "models.h"
#include "plot.h"
#include "progress.h"
#include "signals.h"

namespace dp::train {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string format(const char* fmt, auto... args) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// Rows each device gets from a batch of `rows` (DataParallel's split; 0 for devices it leaves idle).
std::vector<int64_t> chunk_rows(int64_t rows, size_t devices) {
  std::vector<int64_t> out = parallel::chunk_sizes(rows, static_cast<int64_t>(devices));
  out.resize(devices, 0);
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const RunSettings& s, std::vector<Tensor> params) {
  if (s.optimizer == "sgd")
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
  if (s.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(s.lr).weight_decay(s.weight_decay));
}

std::string optimizer_text(const RunSettings& s, int64_t total_steps) {
  std::string t = s.optimizer == "sgd" ? "SGD" : s.optimizer == "adam" ? "Adam" : "AdamW";
  t += format(" lr %g", s.lr);
  if (s.optimizer == "sgd" && s.momentum != 0) t += format(" momentum %g", s.momentum);
  if (s.weight_decay != 0) t += format(" weight decay %g", s.weight_decay);
  t += s.schedule == "cosine" ? format(" (cosine decay to 0 over %lld steps)", static_cast<long long>(total_steps)) : " (constant)";
  return t;
}

// Runs a setup step, turning its errors into a SetupError that says which option failed.
template <typename F>
auto guarded(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw SetupError(what.empty() ? e.what() : what + ": " + e.what());
  }
}

}  // namespace

struct Trainer::Impl {
  Options opt;
  RunSettings run;
  std::vector<Device> devices;
  Device output_device;
  DataSets sets;
  nn::Sequential model{nullptr};
  nn::DataParallel<nn::SequentialImpl> net{nullptr};
  Criterion criterion;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  TrainState state;
  int64_t spe = 0, total_steps = 0, total_epochs = 0;
  std::optional<Checkpoint> resumed;

  Progress progress;
  std::unique_ptr<JsonlLog> log_ptr;
  Clock::time_point started = Clock::now();
  double invocation_train_s = 0, eval_s = 0, checkpoint_s = 0;
  int64_t invocation_steps = 0, invocation_samples = 0;
  std::vector<int64_t> device_samples;
  int64_t last_checkpoint_step = -1;

  explicit Impl(Options o) : opt(std::move(o)), progress(progress_mode(opt.progress), opt.log_every) {}

  // ---- setup --------------------------------------------------------------------------------
  void setup() {
    run = opt.run;
    if (!opt.resume.empty()) {
      resumed = guarded("--resume " + opt.resume, [&] { return load_checkpoint(opt.resume); });
      run = guarded("--resume " + opt.resume, [&] { return merge_resumed(opt, resumed->settings); });
      state = resumed->state;
      last_checkpoint_step = state.position.global_step;  // that checkpoint is already on disk
    }
    devices = guarded("", [&] { return parse_devices(opt.devices); });
    output_device = guarded("", [&] { return parse_output_device(opt.output_device).value_or(devices[0]); });
    device_samples.assign(devices.size(), 0);

    // Every random draw of the run happens here, in this order: the data (random data only), then
    // the initial weights. A resumed run repeats them and then overwrites weights and generators.
    manual_seed(run.seed);
    sets = guarded(run.data == "random" ? "--data random" : "--data-dir " + run.data_dir, [&] { return load_data(run); });
    model = make_model(run.model, run.hidden);
    if (!opt.init.empty()) guarded("--init " + opt.init, [&] { return dp::load(model, opt.init); });
    if (resumed) guarded("--resume " + opt.resume, [&] { return model->load_state_dict(resumed->model); });
    criterion = make_criterion(run.model);

    model->to(devices[0]);  // DataParallel's rule: parameters on device_ids[0]
    net = nn::DataParallel<nn::SequentialImpl>(model, parallel::DataParallelOptions(devices).output_device(output_device));

    spe = steps_per_epoch(sets, run);
    total_steps = run.steps > 0 ? run.steps : run.epochs * spe;
    total_epochs = (total_steps + spe - 1) / spe;

    optimizer = make_optimizer(run, model->parameters());
    if (run.schedule == "cosine") scheduler = std::make_unique<optim::CosineAnnealingLR>(*optimizer, total_steps);
    if (resumed) {
      guarded("--resume " + opt.resume, [&] {
        optimizer->load_state_dict(resumed->optimizer);
        if (scheduler) {
          DP_CHECK(resumed->scheduler.has_value(), ValueError, "the checkpoint has no scheduler state");
          scheduler->load_state(*resumed->scheduler);
        }
        restore_generators(resumed->generators);
        return 0;
      });
    }
    if (!opt.log.empty()) log_ptr = guarded("", [&] { return std::make_unique<JsonlLog>(opt.log, resumed.has_value()); });
  }

  void log_record(const nlohmann::json& j) {
    if (log_ptr) log_ptr->write(j);
  }

  void print_header() {
    std::ostringstream m;
    m << model;
    const std::vector<int64_t> split = chunk_rows(run.batch_size, devices.size());
    std::string split_text;
    for (size_t i = 0; i < split.size(); ++i)
      if (split[i] > 0) split_text += (split_text.empty() ? "" : "+") + std::to_string(split[i]);
    progress.line(format("dp-train: %s, %lld parameters\n%s", run.model.c_str(), static_cast<long long>(parameter_count(*model)), m.str().c_str()));
    progress.line("data: " + sets.description);
    progress.line(format("devices: %s (DataParallel: batch %lld split %s), outputs gathered on %s, loss on %s", join(devices).c_str(),
                         static_cast<long long>(run.batch_size), split_text.c_str(), output_device.str().c_str(),
                         opt.parallel_loss ? "the replicas" : output_device.str().c_str()));
    progress.line(format("training: %s, batch %lld, %lld epochs x %lld steps = %lld steps%s, seed %llu, %s, %lld loader worker(s)",
                         optimizer_text(run, total_steps).c_str(), static_cast<long long>(run.batch_size), static_cast<long long>(total_epochs),
                         static_cast<long long>(spe), static_cast<long long>(total_steps),
                         run.steps > 0 && total_steps % spe != 0 ? " (the last epoch partial)" : "",
                         static_cast<unsigned long long>(run.seed), run.shuffle ? "shuffled" : "in order", static_cast<long long>(opt.workers)));
    if (resumed && state.position.global_step >= total_steps)
      progress.line(format("the run checkpointed in %s is complete (step %lld of %lld): nothing left to train", opt.resume.c_str(),
                           static_cast<long long>(state.position.global_step), static_cast<long long>(total_steps)));
    else if (resumed)
      progress.line(format("resuming %s at step %lld of %lld (epoch %lld, batch %lld of %lld)", opt.resume.c_str(),
                           static_cast<long long>(state.position.global_step), static_cast<long long>(total_steps),
                           static_cast<long long>(state.position.epoch + 1), static_cast<long long>(state.position.batch + 1),
                           static_cast<long long>(spe)));
    else if (!opt.init.empty())
      progress.line("initial weights: " + opt.init);
    log_record({{"event", "start"}, {"settings", to_json(run)}, {"devices", join(devices)}, {"output_device", output_device.str()},
                {"parallel_loss", opt.parallel_loss}, {"total_steps", total_steps}, {"steps_per_epoch", spe},
                {"resumed_at", resumed ? state.position.global_step : 0}});
  }

  // ---- one step and evaluation --------------------------------------------------------------
  double train_step(const data::Batch& b) {
    optimizer->zero_grad();
    Tensor loss = std::visit(
        [&](auto& c) -> Tensor {
          // Inputs stay on the host: DataParallel hands each replica its rows (views on CPU devices, copies on GPUs).
          if (opt.parallel_loss) return net->forward_loss(c, b.target, b.data);
          return c(net(b.data), b.target.to(output_device));
        },
        criterion);
    loss.backward();
    optimizer->step();
    if (scheduler) scheduler->step();
    return loss.item<double>();
  }

  struct Eval {
    double accuracy, loss;
  };
  Eval evaluate() {
    const auto t0 = Clock::now();
    NoGradGuard no_grad;
    model->eval();
    const Tensor& x = sets.test->data();
    const Tensor& y = sets.test->target();
    const int64_t n = x.size(0);
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t start = 0; start < n; start += 1000) {
      const int64_t len = std::min<int64_t>(1000, n - start);
      Tensor out = net(x.narrow(0, start, len));
      Tensor target = y.narrow(0, start, len).to(out.device());
      loss_sum += std::visit([&](auto& c) { return c(out, target).template item<double>(); }, criterion) * static_cast<double>(len);
      Tensor hit = sets.binary ? out.gt(0.5).to(kFloat32).eq(target) : out.argmax(1).eq(target);
      correct += hit.sum().item<int64_t>();
    }
    model->train();
    eval_s += since(t0);
    return {static_cast<double>(correct) / static_cast<double>(n), loss_sum / static_cast<double>(n)};
  }

  // Evaluates, records it in the history and the log; returns it.
  History::Eval record_eval() {
    const Eval e = evaluate();
    History& h = state.history;
    const int64_t from = h.evals.empty() ? 0 : h.evals.back().step, to = state.position.global_step;
    double train_loss = 0;
    for (int64_t i = from; i < to; ++i) train_loss += h.step_loss[static_cast<size_t>(i)];
    train_loss = to > from ? train_loss / static_cast<double>(to - from) : NAN;
    h.evals.push_back({to, e.accuracy, e.loss, train_loss});
    log_record({{"event", "eval"}, {"step", to}, {"epoch", static_cast<double>(to) / static_cast<double>(spe)}, {"test_accuracy", e.accuracy},
                {"test_loss", e.loss}, {"train_loss", to > from ? nlohmann::json(train_loss) : nlohmann::json(nullptr)}});
    return h.evals.back();
  }

  void checkpoint() {
    if (opt.checkpoint_dir.empty() || last_checkpoint_step == state.position.global_step) return;
    const auto t0 = Clock::now();
    state.wall_seconds = resumed_wall() + since(started);
    save_checkpoint(opt.checkpoint_dir, run, state, *model, *optimizer, scheduler.get(), devices);
    checkpoint_s += since(t0);
    last_checkpoint_step = state.position.global_step;
    log_record({{"event", "checkpoint"}, {"step", state.position.global_step}, {"path", checkpoint_path(opt.checkpoint_dir)}});
  }
  double resumed_wall() const { return resumed ? resumed->state.wall_seconds : 0; }

  void write_plot_file() {
    if (opt.plot.empty()) return;
    PlotInput in;
    in.title = format("dp-train: %s on %s, DataParallel over %s, %s, batch %lld", run.model.c_str(),
                      run.data == "random" ? "random data" : "Fashion-MNIST", join(devices).c_str(), optimizer_text(run, total_steps).c_str(),
                      static_cast<long long>(run.batch_size));
    in.loss_name = sets.binary ? "binary cross-entropy" : "cross-entropy";
    in.target_accuracy = opt.min_accuracy;
    in.history = &state.history;
    in.steps_per_epoch = spe;
    write_plot(opt.plot, in);
  }

  // ---- the loop -----------------------------------------------------------------------------
  enum class Outcome { Finished, Signal, StopAfter };

  Outcome train() {
    Position& pos = state.position;
    while (pos.global_step < total_steps) {
      auto epoch_t0 = Clock::now();
      double epoch_base = state.epoch_seconds;
      data::DataLoader loader = epoch_loader(sets, run, static_cast<uint64_t>(pos.epoch), pos.batch, opt.workers);
      std::optional<Outcome> stop;
      for (auto it = loader.begin(); it != loader.end(); ++it) {
        const data::Batch& b = *it;
        const auto t0 = Clock::now();
        const double lr = optimizer->get_lr(0);
        const double loss = train_step(b);
        const double dt = since(t0);
        if (!std::isfinite(loss))
          throw Error(format("the loss is %g at step %lld (epoch %lld, batch %lld): training diverged; try a lower --lr", loss,
                             static_cast<long long>(pos.global_step + 1), static_cast<long long>(pos.epoch + 1),
                             static_cast<long long>(pos.batch + 1)));
        const int64_t rows = b.data.size(0);
        const std::vector<int64_t> split = chunk_rows(rows, devices.size());
        for (size_t d = 0; d < devices.size(); ++d) device_samples[d] += split[d];
        invocation_train_s += dt;
        ++invocation_steps;
        invocation_samples += rows;
        ++pos.global_step;
        ++pos.batch;
        state.history.step_loss.push_back(static_cast<float>(loss));
        report_step(loss, lr, rows);
        if (opt.checkpoint_every > 0 && pos.global_step % opt.checkpoint_every == 0 && pos.batch < spe) {
          sync_time(epoch_t0, epoch_base);
          checkpoint();
        }
        if (pos.global_step >= total_steps) break;
        if (stop_signal() != 0) stop = Outcome::Signal;
        else if (opt.stop_after > 0 && invocation_steps >= opt.stop_after) stop = Outcome::StopAfter;
        if (stop) break;
      }
      sync_time(epoch_t0, epoch_base);
      if (pos.batch >= spe) end_epoch();
      if (stop) return *stop;
    }
    return Outcome::Finished;
  }

  // Adds the time since epoch_t0 to the epoch's and the run's training time.
  void sync_time(Clock::time_point& epoch_t0, double& epoch_base) {
    const double dt = since(epoch_t0);
    state.epoch_seconds = epoch_base + dt;
    state.train_seconds += dt;
    epoch_t0 = Clock::now();
    epoch_base = state.epoch_seconds;
  }

  void report_step(double loss, double lr, int64_t rows) {
    const Position& pos = state.position;
    const double rate = invocation_train_s > 0 ? static_cast<double>(invocation_samples) / invocation_train_s : 0;
    const double per_step = invocation_train_s / static_cast<double>(invocation_steps);
    StepReport r;
    r.epoch = pos.epoch + 1;
    r.epochs = total_epochs;
    r.batch = pos.batch;
    r.batches = spe;
    r.step = pos.global_step;
    r.total_steps = total_steps;
    r.loss = loss;
    r.lr = lr;
    r.samples_per_s = rate;
    r.eta_s = per_step * static_cast<double>(total_steps - pos.global_step);
    progress.step(r);
    log_record({{"event", "step"}, {"step", pos.global_step}, {"epoch", pos.epoch + 1}, {"batch", pos.batch}, {"rows", rows}, {"loss", loss},
                {"lr", lr}, {"samples_per_s", rate}, {"time_s", since(started)}});
  }

  void end_epoch() {
    Position& pos = state.position;
    const double seconds = state.epoch_seconds;
    state.history.epoch_seconds.push_back(seconds);
    const History::Eval e = record_eval();
    progress.line(format("epoch %lld/%lld done: train loss %.4f  test loss %.4f  test accuracy %.4f  (%s training, %.0f samples/s)",
                         static_cast<long long>(pos.epoch + 1), static_cast<long long>(total_epochs), e.train_loss, e.test_loss,
                         e.test_accuracy, format_duration(seconds).c_str(),
                         static_cast<double>(sets.train->size()) / std::max(seconds, 1e-9)));
    ++pos.epoch;
    pos.batch = 0;
    state.epoch_seconds = 0;
    checkpoint();
  }

  // ---- the end ------------------------------------------------------------------------------
  int finish(Outcome outcome) {
    const Position& pos = state.position;
    if (outcome != Outcome::Finished) {
      checkpoint();
      write_plot_file();
      const std::string why = outcome == Outcome::Signal ? (stop_signal() == SIGTERM ? "stopped by SIGTERM" : "stopped by Ctrl-C (SIGINT)")
                                                         : format("stopped after %lld steps (--stop-after)", static_cast<long long>(invocation_steps));
      const std::string where = format("at step %lld of %lld (epoch %lld, batch %lld of %lld next)", static_cast<long long>(pos.global_step),
                                       static_cast<long long>(total_steps), static_cast<long long>(pos.epoch + 1),
                                       static_cast<long long>(pos.batch + 1), static_cast<long long>(spe));
      const std::string how = opt.checkpoint_dir.empty()
                                  ? "no --checkpoint-dir was given, so nothing was saved to resume from"
                                  : "checkpoint in " + opt.checkpoint_dir + "; continue with: dp-train --resume " + opt.checkpoint_dir;
      progress.line(why + " " + where + ": " + how);
      log_record({{"event", "stop"}, {"reason", outcome == Outcome::Signal ? "signal" : "stop-after"}, {"step", pos.global_step},
                  {"checkpoint", opt.checkpoint_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(checkpoint_path(opt.checkpoint_dir))}});
      return outcome == Outcome::Signal ? 128 + stop_signal() : 0;
    }
    if (state.history.evals.empty() || state.history.evals.back().step != pos.global_step) record_eval();
    checkpoint();
    if (!opt.save.empty()) dp::save(model, opt.save);
    write_plot_file();
    summary();
    const double accuracy = state.history.evals.back().test_accuracy;
    if (opt.min_accuracy >= 0 && accuracy < opt.min_accuracy) {
      progress.line(format("test accuracy %.4f is below --min-accuracy %.4f", accuracy, opt.min_accuracy));
      return 1;
    }
    return 0;
  }

  void summary() {
    const History::Eval& e = state.history.evals.back();
    const double wall = since(started);
    progress.line(format("finished: %lld steps (%.4g epochs) of batch %lld", static_cast<long long>(total_steps),
                         static_cast<double>(total_steps) / static_cast<double>(spe), static_cast<long long>(run.batch_size)));
    progress.line(format("test accuracy %.4f, test loss %.4f (%lld test rows)", e.test_accuracy, e.test_loss,
                         static_cast<long long>(sets.test->size())));
    progress.line(format("time: %s this invocation (training %s, evaluation %s, checkpoints %s); training over the whole run %s",
                         format_duration(wall).c_str(), format_duration(invocation_train_s).c_str(), format_duration(eval_s).c_str(),
                         format_duration(checkpoint_s).c_str(), format_duration(state.train_seconds).c_str()));
    const std::vector<double>& epochs = state.history.epoch_seconds;
    if (!epochs.empty() && epochs.size() <= 12) {
      std::string per_epoch;
      for (double s : epochs) per_epoch += " " + format_duration(s);
      progress.line("training time per epoch:" + per_epoch);
    } else if (!epochs.empty()) {
      progress.line(format("training time per epoch: mean %s, min %s, max %s over %zu epochs",
                           format_duration(std::accumulate(epochs.begin(), epochs.end(), 0.0) / static_cast<double>(epochs.size())).c_str(),
                           format_duration(*std::min_element(epochs.begin(), epochs.end())).c_str(),
                           format_duration(*std::max_element(epochs.begin(), epochs.end())).c_str(), epochs.size()));
    }
    const double rate = invocation_train_s > 0 ? static_cast<double>(invocation_samples) / invocation_train_s : 0;
    std::string per_device;
    for (size_t d = 0; d < devices.size(); ++d)
      per_device += format("%s%s %.0f samples/s (%lld samples)", d ? ", " : "", devices[d].str().c_str(),
                           invocation_train_s > 0 ? static_cast<double>(device_samples[d]) / invocation_train_s : 0.0,
                           static_cast<long long>(device_samples[d]));
    if (invocation_steps > 0) progress.line(format("throughput: %.0f samples/s on %zu device(s): %s", rate, devices.size(), per_device.c_str()));
    std::string files;
    if (!opt.save.empty()) files += " weights " + opt.save + ";";
    if (!opt.checkpoint_dir.empty()) files += " checkpoint " + checkpoint_path(opt.checkpoint_dir) + ";";
    if (!opt.log.empty()) files += " log " + opt.log + ";";
    if (!opt.plot.empty()) files += " plot " + opt.plot + ";";
    if (!files.empty()) progress.line("wrote" + files.substr(0, files.size() - 1));
    nlohmann::json per_dev = nlohmann::json::object();
    for (size_t d = 0; d < devices.size(); ++d) per_dev[devices[d].str()] = device_samples[d];
    log_record({{"event", "end"}, {"step", state.position.global_step}, {"test_accuracy", e.test_accuracy}, {"test_loss", e.test_loss},
                {"wall_s", wall}, {"train_s", invocation_train_s}, {"samples_per_s", rate}, {"device_samples", per_dev},
                {"epoch_seconds", state.history.epoch_seconds}});
  }
};

Trainer::Trainer(Options options) : impl_(std::make_unique<Impl>(std::move(options))) { impl_->setup(); }
Trainer::~Trainer() = default;

int Trainer::run() {
  impl_->print_header();
  install_stop_handlers();
  const Impl::Outcome outcome = impl_->train();
  return impl_->finish(outcome);
}

}  // namespace dp::train
