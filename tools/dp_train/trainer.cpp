#include "trainer.h"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include "checkpoint.h"
#include "data.h"
#include "devices.h"
#include "dp/distributed/distributed.h"
#include "dp/distributed/launch.h"
#include "dp/distributed/timeline.h"
#include "dp/dp.h"
#include "dp/nn/serialize.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
#include "jsonl_log.h"
#include "models.h"
#include "plot.h"
#include "progress.h"
#include "signals.h"
#include "text.h"

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

std::unique_ptr<optim::Optimizer> make_optimizer(const RunSettings& s, const nn::Module& model) {
  // nanoGPT's AdamW: weight decay on the matrices and embeddings only, not on biases and LayerNorms.
  if (s.model == "gpt" && s.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(models::weight_decay_groups(model, s.weight_decay), optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  std::vector<Tensor> params = model.parameters();
  if (s.optimizer == "sgd")
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
  if (s.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  if (s.optimizer == "adam") return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(s.lr).weight_decay(s.weight_decay));
  throw ValueError("unknown optimizer '" + s.optimizer.substr(0, 100) + "' (sgd, adam or adamw)");
}

// An output file (or directory) given on the command line is checked before the first step, so a
// typo'd or read-only location fails at once instead of after the training it was to keep: a probe
// file is created where the output will be written, and removed. IOError naming the option and path.
void probe_output(const std::string& option, const std::string& path, bool directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir;
  if (directory) {
    fs::create_directories(path, ec);
    DP_CHECK(!ec, IOError, option, " ", path, ": cannot create the directory: ", ec.message());
    dir = path;
  } else {
    DP_CHECK(!fs::is_directory(path, ec), IOError, option, " ", path, ": is a directory, not a file");
    dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
  }
  const fs::path probe = dir / (".dp-train-probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    DP_CHECK(false, IOError, option, " ", path, ": cannot write there: cannot create a file in ", dir.string(), ": ", std::strerror(err));
  }
  ::close(fd);
  ::unlink(probe.c_str());
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

namespace {

// The rest of a training step after DDP's collectives, for a rank that shadows the step in a Join
// (it has no rows of the epoch's last batch): the optimizer step on the gradients it received and
// the step's bookkeeping, whose stop vote is a collective too.
class StepShadow final : public distributed::Joinable {
 public:
  StepShadow(distributed::ProcessGroup& group, std::function<void()> rest_of_step) : group_(group), rest_of_step_(std::move(rest_of_step)) {}
  distributed::ProcessGroup& join_process_group() override { return group_; }
  void join_shadow(const distributed::JoinRound&) override { rest_of_step_(); }
  void join_finish(bool) override {}

 private:
  distributed::ProcessGroup& group_;
  std::function<void()> rest_of_step_;
};

}  // namespace

struct Trainer::Impl {
  Options opt;
  RunSettings run;
  std::vector<Device> devices;
  Device output_device;
  DataSets sets;
  // The model in DataParallel, and across processes in DistributedDataParallel around that
  // (hybrid: DDP between processes, DataParallel inside).
  std::unique_ptr<Net> net;
  // Across processes: the group (null in one process) and this process's rank.
  distributed::ProcessGroupPtr group;
  int rank = 0, world = 1;
  std::string resume_dir;     // --resume, or --checkpoint-dir when a restarted job resumes by itself
  bool auto_resumed = false;  // resumed because the launcher restarted the job (DP_RESTART_COUNT > 0)
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
  int64_t rank_samples = 0;  // rows this process trained on in this invocation (its shares)
  int64_t last_checkpoint_step = -1;
  int stop_sig = 0;  // the signal that stopped the run (agreed over the ranks)

  explicit Impl(Options o) : opt(std::move(o)), progress(progress_mode(opt.progress), opt.log_every) {}

  nn::Module& model() { return net->module(); }
  bool text() const { return sets.text.has_value(); }
  // What the checkpoints record about the text (null for the image models).
  std::optional<TextRecord> text_record;

  bool leader() const { return rank == 0; }
  void note(const char* phase) {
    if (group) group->note_progress(state.position.global_step, phase);
  }
  // A line on stdout, from rank 0 only.
  void say(const std::string& text) {
    if (leader()) progress.line(text);
  }

  // ---- setup --------------------------------------------------------------------------------
  // One process: the local setup; its errors are SetupErrors. Across processes: the group first,
  // then the checkpoint to resume from (rank 0 reads it, every rank gets it), then the local setup
  // on every rank, after which the ranks compare notes: if any failed, every rank stops with exit
  // status 2 (the failed one with its own message), so no rank is left waiting in a collective.
  // Errors of the group itself (a lost peer, a timeout) are DistributedErrors.
  void setup() {
    join_group();
    decide_resume();
    if (!group) {
      setup_local(nullptr);
      return;
    }
    std::string error;
    std::optional<SafetensorsFile> file;
    if (!resume_dir.empty()) {
      try {
        file = distributed::load_checkpoint_file(*group, checkpoint_path(resume_dir));
      } catch (const distributed::DistributedError&) {
        throw;
      } catch (const std::exception& e) {  // rank 0 could not read it: the same error on every rank
        error = "--resume " + resume_dir + ": " + e.what();
      }
    }
    if (error.empty()) {
      try {
        setup_local(file ? &*file : nullptr);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    agree_setup(error);
    agree_settings();
    note("setup");
    // Checks that every rank built the same model and copies rank 0's weights to all.
    net->distribute(group);
  }

  void join_group() {
    std::optional<distributed::Environment> env = guarded("", [] { return distributed::read_environment(); });
    if (!opt.distributed && !(env && env->world_size > 1)) return;
    try {
      group = distributed::init_process_group();
    } catch (const distributed::DistributedError&) {
      throw;
    } catch (const std::exception& e) {
      throw SetupError(std::string("--distributed: ") + e.what());
    }
    rank = group->rank();
    world = group->size();
  }

  // A job the launcher restarted (DP_RESTART_COUNT > 0) continues from its own checkpoint: the
  // same command line then resumes where the failed attempt's last checkpoint left off.
  void decide_resume() {
    resume_dir = opt.resume;
    if (!resume_dir.empty() || opt.checkpoint_dir.empty() || distributed::restart_count() <= 0) return;
    int64_t exists = leader() && std::filesystem::exists(checkpoint_path(opt.checkpoint_dir)) ? 1 : 0;
    if (group) {
      Tensor flag = tensor(std::vector<int64_t>{exists});
      group->broadcast(flag, 0)->wait();
      exists = flag.item<int64_t>();
    }
    if (exists != 0) {
      resume_dir = opt.checkpoint_dir;
      auto_resumed = true;
    }
  }

  // Every rank says whether its setup failed; a failed rank throws its own error, the others one
  // naming the failed ranks.
  void agree_setup(const std::string& error) {
    std::vector<Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(zeros({1}, TensorOptions().dtype(kInt64)));
    group->allgather(all, tensor(std::vector<int64_t>{error.empty() ? 0 : 1}))->wait();
    std::string failed;
    for (int r = 0; r < world; ++r)
      if (all[static_cast<size_t>(r)].item<int64_t>() != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (!error.empty()) throw SetupError(error);
    if (!failed.empty()) throw SetupError("rank " + failed + " could not set up the run (its own message says why), so no rank trains");
  }

  // Every rank must train the same run: its run settings (--lr, --seed, --batch-size, ...: what a
  // checkpoint stores, after a resume's merge) are compared across the ranks before the first step,
  // and a difference is a setup error naming the option, the values and the ranks with their nodes.
  // --data-dir is left out: the same files may lie elsewhere on another machine.
  void agree_settings() {
    nlohmann::json mine = to_json(run);
    mine.erase("data-dir");
    const char* node = std::getenv("GROUP_RANK");
    const std::string text = nlohmann::json{{"settings", mine}, {"node", node != nullptr ? node : ""}}.dump();
    std::vector<Tensor> sizes;
    for (int r = 0; r < world; ++r) sizes.push_back(zeros({1}, TensorOptions().dtype(kInt64)));
    group->allgather(sizes, tensor(std::vector<int64_t>{static_cast<int64_t>(text.size())}))->wait();
    int64_t longest = 0;
    for (const Tensor& t : sizes) longest = std::max(longest, t.item<int64_t>());
    Tensor padded = zeros({longest}, TensorOptions().dtype(kUInt8));
    std::memcpy(padded.data_ptr(), text.data(), text.size());
    std::vector<Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(zeros({longest}, TensorOptions().dtype(kUInt8)));
    group->allgather(all, padded)->wait();
    std::vector<nlohmann::json> settings;
    std::vector<std::string> where;
    for (int r = 0; r < world; ++r) {
      const auto* p = static_cast<const char*>(all[static_cast<size_t>(r)].data_ptr());
      const nlohmann::json j =
          nlohmann::json::parse(std::string(p, static_cast<size_t>(sizes[static_cast<size_t>(r)].item<int64_t>())), nullptr, false);
      if (!j.is_object() || !j.contains("settings") || !j["settings"].is_object())
        throw SetupError(format("rank %d sent malformed run settings (a different dp-train version?)", r));
      settings.push_back(j["settings"]);
      const std::string n = j.contains("node") && j["node"].is_string() ? j["node"].get<std::string>() : std::string();
      where.push_back(format("rank %d", r) + (n.empty() ? std::string() : " (node " + distributed::printable_text(n, 16) + ")"));
    }
    for (const auto& [name, reference] : settings[0].items()) {
      std::string values;
      int differing = 0;
      for (int r = 1; r < world; ++r) {
        const nlohmann::json& other = settings[static_cast<size_t>(r)];
        if (other.contains(name) && other[name] == reference) continue;
        if (++differing > 4) continue;
        values += "; " + (other.contains(name) ? distributed::printable_text(other[name].dump(), 100) : std::string("none")) + " on " +
                  where[static_cast<size_t>(r)];
      }
      if (differing == 0) continue;
      if (differing > 4) values += format("; and %d more ranks differ", differing - 4);
      throw SetupError("--" + name + " differs between the ranks: " + distributed::printable_text(reference.dump(), 100) + " on " + where[0] +
                       values + ". Every rank of a run must be given the same run settings (the same command line on every node)");
    }
  }

  void setup_local(const SafetensorsFile* file) {
    run = opt.run;
    if (!resume_dir.empty()) {
      const std::string what = "--resume " + resume_dir;
      resumed = guarded(what, [&] { return file ? parse_checkpoint(*file, checkpoint_path(resume_dir)) : load_checkpoint(resume_dir); });
      run = guarded(what, [&] { return merge_resumed(opt, resumed->settings); });
      state = resumed->state;
      last_checkpoint_step = state.position.global_step;  // that checkpoint is already on disk
    }
    devices = guarded("", [&] { return parse_devices(opt.devices); });
    output_device = guarded("", [&] { return parse_output_device(opt.output_device).value_or(devices[0]); });
    device_samples.assign(devices.size(), 0);

    // Every random draw of the run happens here, in this order: the data (random data only), then
    // the initial weights. A resumed run repeats them and then overwrites weights and generators.
    manual_seed(run.seed);
    const std::string data_option = run.language_model()   ? "--data " + run.data
                                    : run.data == "random" ? "--data random"
                                                           : "--data-dir " + run.data_dir;
    sets = guarded(data_option, [&] { return load_data(run); });
    if (text()) {
      text_record = TextRecord{sets.text->tokenizer->chars(), sets.text->characters, sets.text->fingerprint};
      if (resumed) guarded("--resume " + resume_dir, [&] { return check_same_text(); });
    }
    guarded("", [&] {
      check_rank_shares(sets, run, world);
      return 0;
    });
    net = guarded("--model " + run.model, [&] { return make_net(run, text() ? sets.text->tokenizer->vocab_size() : 0); });
    if (!opt.init.empty() && !resumed) guarded("--init " + opt.init, [&] { return load_init(); });
    if (resumed) guarded("--resume " + resume_dir, [&] { return model().load_state_dict(resumed->model); });
    criterion = make_criterion(run.model);

    net->parallelize(devices, output_device);  // DataParallel's rule: parameters on device_ids[0]

    spe = steps_per_epoch(sets, run);
    total_steps = run.steps > 0 ? run.steps : run.epochs * spe;  // <= 1e6 epochs x 1e9 rows (args.h): no overflow
    total_epochs = (total_steps + spe - 1) / spe;
    if (resumed && text_changed) {
      // The run's position counts batches of the old text's epochs: only an epoch of the same length continues it.
      const int64_t c = resumed->text->characters, windows = (c - c / 10 - 1) / run.block_size;
      const int64_t old_spe = (windows + run.batch_size - 1) / run.batch_size;
      if (old_spe != spe)
        throw SetupError(
            format("--resume %s: %s has changed since the checkpoint (%lld characters, were %lld): an epoch is now %lld batches, "
                   "was %lld, so the run's position (epoch %lld, batch %lld) means nothing in it; resume on the text the run was "
                   "trained on",
                   resume_dir.c_str(), terminal_safe(sets.text->path).c_str(), static_cast<long long>(sets.text->characters),
                   static_cast<long long>(c), static_cast<long long>(spe), static_cast<long long>(old_spe),
                   static_cast<long long>(state.position.epoch + 1), static_cast<long long>(state.position.batch + 1)));
    }
    if (resumed)
      guarded("--resume " + resume_dir + ": " + checkpoint_path(resume_dir) + ": damaged dp-train checkpoint", [&] {
        check_position(*resumed, spe, total_steps);
        return 0;
      });

    optimizer = make_optimizer(run, model());
    if (run.schedule == "cosine") scheduler = std::make_unique<optim::CosineAnnealingLR>(*optimizer, total_steps);
    if (resumed) {
      guarded("--resume " + resume_dir, [&] {
        optimizer->load_state_dict(resumed->optimizer);
        if (scheduler) {
          DP_CHECK(resumed->scheduler.has_value(), ValueError, "the checkpoint has no scheduler state");
          scheduler->load_state(*resumed->scheduler);
        }
        restore_generators(resumed->generators);
        return 0;
      });
    }
    // Every file this run will write is checked now, before the first step (rank 0 writes them).
    if (leader()) {
      if (!opt.save.empty())
        guarded("", [&] {
          probe_output("--save", opt.save, false);
          return 0;
        });
      if (!opt.plot.empty())
        guarded("", [&] {
          probe_output("--plot", opt.plot, false);
          return 0;
        });
      if (!opt.checkpoint_dir.empty())
        guarded("", [&] {
          probe_output("--checkpoint-dir", opt.checkpoint_dir, true);
          return 0;
        });
    }
    // A restarted job appends to the failed attempt's log, as a resumed run does.
    if (!opt.log.empty() && leader())
      log_ptr = guarded("", [&] { return std::make_unique<JsonlLog>(opt.log, resumed.has_value() || distributed::restart_count() > 0); });
  }

  void log_record(const nlohmann::json& j) {
    if (log_ptr) log_ptr->write(j);
  }

  // For titles: "Fashion-MNIST", "random data", "text fortunes".
  std::string data_name() const {
    if (text()) return "text " + terminal_safe(std::filesystem::path(sets.text->path).filename().string());
    return run.data == "random" ? "random data" : "Fashion-MNIST";
  }

  // A language model's ids mean the characters of its vocabulary, so a resumed run must read a text
  // with the checkpoint's vocabulary (ValueError naming both and what differs). The same vocabulary
  // in a text that changed (another length or fingerprint) is taken, with a note in the header,
  // provided the run's position still lies within an epoch of the new text.
  bool text_changed = false;
  int check_same_text() {
    const TextRecord& saved = *resumed->text;  // parse_checkpoint requires it of a language model
    const TextData& t = *sets.text;
    const std::string file = terminal_safe(t.path), ck = terminal_safe(checkpoint_path(resume_dir));
    if (saved.vocab != t.tokenizer->chars())
      throw ValueError("the vocabulary of " + file + " (" + std::to_string(t.tokenizer->vocab_size()) +
                       " characters) differs from the one the run was trained on, recorded in " + ck + " (" + std::to_string(saved.vocab.size()) +
                       " characters): " + vocabulary_difference(t.tokenizer->chars(), saved.vocab, file, "the checkpoint's") +
                       ". The model's ids stand for the checkpoint's characters, so it can only continue on a text with that vocabulary "
                       "(give --data text:FILE of the text it was trained on, or start a new run)");
    text_changed = saved.characters != t.characters || saved.fingerprint != t.fingerprint;
    return 0;
  }

  // --init: the weights; for a language model, when the file records the vocabulary it was trained
  // on (dp-train's --save does), that must be this text's.
  int load_init() {
    if (text()) {
      const SafetensorsFile f = load_file(opt.init);
      const auto it = f.metadata.find("vocab");
      const std::string mine = vocabulary_json(text_record->vocab);
      if (it != f.metadata.end() && it->second != mine) {
        std::string theirs = "another vocabulary";
        try {
          const auto j = nlohmann::json::parse(it->second);
          theirs = "a vocabulary of " + std::to_string(j.at("vocab_size").get<int64_t>()) + " characters";
        } catch (const std::exception&) {
        }
        throw ValueError("the weights were trained on " + theirs + " (its \"vocab\" metadata), not on the " +
                         std::to_string(text_record->vocab.size()) + " characters of " + terminal_safe(sets.text->path) +
                         ": the ids would mean other characters");
      }
    }
    dp::load(model(), opt.init);
    return 0;
  }

  // "64+64": how `rows` rows are split into `parts` (ranks or devices), idle ones left out.
  static std::string split_text(const std::vector<int64_t>& split) {
    std::string out;
    for (int64_t rows : split) {
      if (rows <= 0) continue;
      if (!out.empty()) out += '+';
      out += std::to_string(rows);
    }
    return out;
  }

  void print_header() {
    if (!leader()) return;
    std::ostringstream m;
    m << model();
    progress.line(format("dp-train: %s, %lld parameters\n%s", run.model.c_str(), static_cast<long long>(parameter_count(model())), m.str().c_str()));
    progress.line("data: " + sets.description);
    if (!group) {
      progress.line(format("devices: %s (DataParallel: batch %lld split %s), outputs gathered on %s, loss on %s", join(devices).c_str(),
                           static_cast<long long>(run.batch_size), split_text(chunk_rows(run.batch_size, devices.size())).c_str(),
                           output_device.str().c_str(), opt.parallel_loss ? "the replicas" : output_device.str().c_str()));
    } else {
      std::vector<int64_t> shares;
      for (int r = 0; r < world; ++r) shares.push_back(rank_share(run.batch_size, world, r).count);
      const int64_t mine = shares[0];
      progress.line(
          format("processes: %d (DistributedDataParallel over %s; rank 0 prints, logs and checkpoints): batch %lld split %s over the "
                 "ranks; inside rank 0 DataParallel over %s (its %lld rows split %s), loss on the replicas",
                 world, group->backend_name().c_str(), static_cast<long long>(run.batch_size), split_text(shares).c_str(), join(devices).c_str(),
                 static_cast<long long>(mine), split_text(chunk_rows(mine, devices.size())).c_str()));
    }
    progress.line(format("training: %s, batch %lld, %lld epochs x %lld steps = %lld steps%s, seed %llu, %s, %lld loader worker(s)",
                         optimizer_text(run, total_steps).c_str(), static_cast<long long>(run.batch_size), static_cast<long long>(total_epochs),
                         static_cast<long long>(spe), static_cast<long long>(total_steps),
                         run.steps > 0 && total_steps % spe != 0 ? " (the last epoch partial)" : "", static_cast<unsigned long long>(run.seed),
                         run.shuffle ? "shuffled" : "in order", static_cast<long long>(opt.workers)));
    if (auto_resumed)
      progress.line(format("restart %d of this job (DP_RESTART_COUNT): continuing from the checkpoint in %s", distributed::restart_count(),
                           resume_dir.c_str()));
    else if (!resumed && !opt.checkpoint_dir.empty() && distributed::restart_count() > 0)
      progress.line(format("restart %d of this job (DP_RESTART_COUNT): %s holds no checkpoint yet, so the run starts again",
                           distributed::restart_count(), opt.checkpoint_dir.c_str()));
    if (resumed && state.position.global_step >= total_steps)
      progress.line(format("the run checkpointed in %s is complete (step %lld of %lld): nothing left to train", resume_dir.c_str(),
                           static_cast<long long>(state.position.global_step), static_cast<long long>(total_steps)));
    else if (resumed)
      progress.line(format("resuming %s at step %lld of %lld (epoch %lld, batch %lld of %lld)", resume_dir.c_str(),
                           static_cast<long long>(state.position.global_step), static_cast<long long>(total_steps),
                           static_cast<long long>(state.position.epoch + 1), static_cast<long long>(state.position.batch + 1),
                           static_cast<long long>(spe)));
    else if (!opt.init.empty())
      progress.line("initial weights: " + opt.init);
    if (text_changed)
      progress.line(format("note: %s has changed since the checkpoint (%lld characters, were %lld; same vocabulary): the run continues on it",
                           terminal_safe(sets.text->path).c_str(), static_cast<long long>(sets.text->characters),
                           static_cast<long long>(resumed->text->characters)));
    log_record({{"event", "start"},
                {"settings", to_json(run)},
                {"devices", join(devices)},
                {"output_device", output_device.str()},
                {"parallel_loss", opt.parallel_loss || group != nullptr},
                {"total_steps", total_steps},
                {"steps_per_epoch", spe},
                {"resumed_at", resumed ? state.position.global_step : 0},
                {"world_size", world},
                {"restart", distributed::restart_count()}});
  }

  // ---- one step and evaluation --------------------------------------------------------------
  double train_step(const data::Batch& b) {
    optimizer->zero_grad();
    note("forward");
    Tensor loss = net->loss(criterion, b.target, b.data, opt.parallel_loss);
    loss.backward();  // across processes: the gradients are all-reduced during backward
    optimizer_step();
    return loss.item<double>();
  }
  void optimizer_step() {
    note("optimizer");
    distributed::timeline::Scope span("optimizer", "train");
    optimizer->step();
    if (scheduler) scheduler->step();
  }

  struct Eval {
    double accuracy, loss;
  };
  // Every test row counted once: in one process all of them; across processes rank r takes rows
  // r, r + world, ... (DistributedSampler's evaluation layout) and the sums are added over ranks.
  // Text: a row is a window of block_size characters, each a prediction; the loss is the mean over
  // the held-out characters (every window has as many) and the accuracy the fraction of them whose
  // most likely next character is the right one.
  Eval evaluate() {
    const auto t0 = Clock::now();
    note("evaluation");
    NoGradGuard no_grad;
    net->set_training(false);
    const int64_t n = static_cast<int64_t>(sets.test->size());
    const int64_t per_row = text() ? sets.text->block_size : 1;  // predictions in a row
    std::vector<int64_t> rows;
    if (group) rows = data::DistributedSampler::evaluation(static_cast<size_t>(n), world, rank).indices(0);
    double loss_sum = 0;
    int64_t correct = 0;
    const int64_t mine = group ? static_cast<int64_t>(rows.size()) : n;
    const int64_t chunk = text() ? std::max<int64_t>(1, 16384 / per_row) : 1000;  // rows at a time
    for (int64_t start = 0; start < mine; start += chunk) {
      const int64_t len = std::min<int64_t>(chunk, mine - start);
      Tensor x, y;
      if (group) {
        data::Example e = sets.test->get_batch(std::vector<int64_t>(rows.begin() + start, rows.begin() + start + len));
        x = e.data;
        y = e.target;
      } else {
        x = sets.test->data().narrow(0, start, len);
        y = sets.test->target().narrow(0, start, len);
      }
      Tensor out = net->forward(x);
      Tensor target = y.to(out.device());
      loss_sum += std::visit([&](auto& c) { return c(out, target).template item<double>(); }, criterion) * static_cast<double>(len);
      Tensor hit = sets.binary ? out.gt(0.5).to(kFloat32).eq(target) : out.argmax(out.dim() - 1).eq(target);
      correct += hit.sum().item<int64_t>();
    }
    if (group) {
      Tensor sums = tensor(std::vector<double>{loss_sum, static_cast<double>(correct)});
      group->allreduce(sums, distributed::ReduceOp::Sum)->wait();
      loss_sum = sums[0].item<double>();
      correct = static_cast<int64_t>(sums[1].item<double>());
    }
    net->set_training(true);
    eval_s += since(t0);
    return {static_cast<double>(correct) / static_cast<double>(n * per_row), loss_sum / static_cast<double>(n)};
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
    nlohmann::json record = {{"event", "eval"},
                             {"step", to},
                             {"epoch", static_cast<double>(to) / static_cast<double>(spe)},
                             {"test_accuracy", e.accuracy},
                             {"test_loss", e.loss},
                             {"train_loss", to > from ? nlohmann::json(train_loss) : nlohmann::json(nullptr)}};
    if (text()) record["perplexity"] = std::exp(e.loss);
    log_record(record);
    return h.evals.back();
  }

  // One process writes the file itself; across processes every rank calls and rank 0 writes
  // (dp::distributed::save_checkpoint: the ranks' states are checked to be identical first, and
  // every rank learns whether the write worked). Both atomic.
  void checkpoint() {
    if (opt.checkpoint_dir.empty() || last_checkpoint_step == state.position.global_step) return;
    const auto t0 = Clock::now();
    note("checkpoint");
    state.wall_seconds = resumed_wall() + since(started);
    if (!group) {
      save_checkpoint(opt.checkpoint_dir, run, state, model(), *optimizer, scheduler.get(), devices, text_record ? &*text_record : nullptr);
    } else {
      if (leader()) {
        std::error_code ec;  // a failure shows in the write below, on every rank
        std::filesystem::create_directories(opt.checkpoint_dir, ec);
      }
      CheckpointContents c =
          checkpoint_contents(run, state, model(), *optimizer, scheduler.get(), devices, world, text_record ? &*text_record : nullptr);
      distributed::CheckpointOptions o;
      o.metadata = std::move(c.metadata);
      distributed::save_checkpoint(*group, c.tensors, checkpoint_path(opt.checkpoint_dir), o);
    }
    checkpoint_s += since(t0);
    last_checkpoint_step = state.position.global_step;
    log_record({{"event", "checkpoint"}, {"step", state.position.global_step}, {"path", checkpoint_path(opt.checkpoint_dir)}});
  }
  double resumed_wall() const { return resumed ? resumed->state.wall_seconds : 0; }

  void write_plot_file() {
    if (opt.plot.empty() || !leader()) return;
    PlotInput in;
    const std::string how = group ? format("DDP over %d processes x %s", world, join(devices).c_str()) : "DataParallel over " + join(devices);
    in.title = format("dp-train: %s on %s, %s, %s, batch %lld", run.model.c_str(), data_name().c_str(), how.c_str(),
                      optimizer_text(run, total_steps).c_str(), static_cast<long long>(run.batch_size));
    in.loss_name = sets.binary ? "binary cross-entropy" : text() ? "next-character cross-entropy" : "cross-entropy";
    if (text()) {
      in.accuracy_title = "Held-out next-character accuracy";
      in.test_name = "held-out";
    }
    in.target_accuracy = opt.min_accuracy;
    in.history = &state.history;
    in.steps_per_epoch = spe;
    write_plot(opt.plot, in);
  }

  // ---- the loop -----------------------------------------------------------------------------
  enum class Outcome { Finished, Signal, StopAfter };

  Outcome train() {
    Position& pos = state.position;
    if (group) post_vote();  // about the first step (see stop_requested)
    while (pos.global_step < total_steps) {
      auto epoch_t0 = Clock::now();
      double epoch_base = state.epoch_seconds;
      data::DataLoader loader = epoch_loader(sets, run, static_cast<uint64_t>(pos.epoch), pos.batch, opt.workers, world, rank);
      std::optional<Outcome> stop;
      bool ended = false;  // the run's last step is done, or the ranks voted to stop
      // After each step: the counts, the report, a checkpoint, and whether to go on.
      auto after_step = [&](double loss, double lr, double dt, int64_t local_rows) {
        const int64_t rows = group ? batch_rows(sets, run, pos.batch) : local_rows;
        const std::vector<int64_t> split = chunk_rows(local_rows, devices.size());
        for (size_t d = 0; d < devices.size(); ++d) device_samples[d] += split[d];
        rank_samples += local_rows;
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
        if (pos.global_step >= total_steps) {
          ended = true;
          return;
        }
        stop = stop_requested();
        if (stop) ended = true;
      };
      // An epoch whose last batch has fewer rows than there are ranks: the ranks without a row of
      // it run out one step early and, in a Join, shadow that step: DDP's collectives with no rows,
      // then (StepShadow) the optimizer step on the gradients they received and the rest of the
      // step (the stop vote), so every rank's weights and optimizer state stay identical. Rank 0
      // always has a row, so the loss it reports is the global batch's (NaN on a shadowing rank).
      std::optional<StepShadow> shadow_step;
      std::optional<distributed::Join> join;
      if (group && last_batch_uneven(sets, run, world)) {
        shadow_step.emplace(*group, [&] {
          const auto t0 = Clock::now();
          const double lr = optimizer->get_lr(0);
          optimizer_step();
          after_step(std::numeric_limits<double>::quiet_NaN(), lr, since(t0), 0);
        });
        join.emplace(std::vector<distributed::Joinable*>{net->joinable(), &*shadow_step});
      }
      for (auto it = loader.begin(); !ended && it != loader.end(); ++it) {
        note("data");
        const data::Batch& b = *it;
        const auto t0 = Clock::now();
        const double lr = optimizer->get_lr(0);
        const double loss = train_step(b);
        const double dt = since(t0);
        if (!std::isfinite(loss))  // the global batch's loss: the same on every rank, so every rank stops here
          throw Error(format("the loss is %g at step %lld (epoch %lld, batch %lld): training diverged; try a lower --lr", loss,
                             static_cast<long long>(pos.global_step + 1), static_cast<long long>(pos.epoch + 1),
                             static_cast<long long>(pos.batch + 1)));
        after_step(loss, lr, dt, b.data.size(0));
      }
      if (join) join->finish();
      sync_time(epoch_t0, epoch_base);
      if (pos.batch >= spe) end_epoch();
      if (stop) return *stop;
    }
    return Outcome::Finished;
  }

  // Whether to stop after this step: Ctrl-C / SIGTERM, or --stop-after. Across processes a signal
  // may reach one rank only (and --stop-after may be given to one rank only), so the ranks vote:
  // before every step each posts [its signal (0: none), 1 if its --stop-after count ends with that
  // step] to a Max all-reduce, which runs while the step computes and is read after it. So a signal
  // that reached any rank during step k stops every rank after step k + 1, --stop-after N stops
  // every rank after step N exactly, the same step everywhere, and their checkpoint is consistent;
  // the vote costs no waiting. In one process the flags are read directly.
  std::optional<Outcome> stop_requested() {
    int64_t sig = stop_signal();
    int64_t after = opt.stop_after > 0 && invocation_steps >= opt.stop_after ? 1 : 0;
    if (group) {
      const std::vector<int64_t> v = finish_vote();
      sig = v[0];
      after = v[1];
      if (sig == 0 && after == 0) post_vote();
    }
    if (sig != 0) {
      stop_sig = static_cast<int>(sig);
      return Outcome::Signal;
    }
    if (after != 0) return Outcome::StopAfter;
    return std::nullopt;
  }
  // The vote about stopping after the next step (posted before it).
  void post_vote() {
    const int64_t after = opt.stop_after > 0 && invocation_steps + 1 >= opt.stop_after ? 1 : 0;
    vote = tensor(std::vector<int64_t>{stop_signal(), after});
    vote_work = group->allreduce(vote, distributed::ReduceOp::Max);
  }
  // The outcome of the vote in flight: [signal, stop-after] over all ranks ({0, 0} when none is).
  std::vector<int64_t> finish_vote() {
    if (!vote_work) return {0, 0};
    note("stop-vote");
    vote_work->wait();
    vote_work.reset();
    return vote.to_vector<int64_t>();
  }
  Tensor vote;
  distributed::WorkPtr vote_work;

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
    if (leader()) progress.step(r);
    log_record({{"event", "step"},
                {"step", pos.global_step},
                {"epoch", pos.epoch + 1},
                {"batch", pos.batch},
                {"rows", rows},
                {"loss", loss},
                {"lr", lr},
                {"samples_per_s", rate},
                {"time_s", since(started)}});
  }

  void end_epoch() {
    Position& pos = state.position;
    const double seconds = state.epoch_seconds;
    state.history.epoch_seconds.push_back(seconds);
    const History::Eval e = record_eval();
    if (text())
      say(format("epoch %lld/%lld done: train loss %.4f  held-out loss %.4f  perplexity %.3f  next-char accuracy %.4f  (%s training, %.0f chars/s)",
                 static_cast<long long>(pos.epoch + 1), static_cast<long long>(total_epochs), e.train_loss, e.test_loss, std::exp(e.test_loss),
                 e.test_accuracy, format_duration(seconds).c_str(),
                 static_cast<double>(sets.train->size() * sets.text->block_size) / std::max(seconds, 1e-9)));
    else
      say(format("epoch %lld/%lld done: train loss %.4f  test loss %.4f  test accuracy %.4f  (%s training, %.0f samples/s)",
                 static_cast<long long>(pos.epoch + 1), static_cast<long long>(total_epochs), e.train_loss, e.test_loss, e.test_accuracy,
                 format_duration(seconds).c_str(), static_cast<double>(sets.train->size()) / std::max(seconds, 1e-9)));
    ++pos.epoch;
    pos.batch = 0;
    state.epoch_seconds = 0;
    checkpoint();
  }

  // ---- the end ------------------------------------------------------------------------------
  int finish(Outcome outcome) {
    const Position& pos = state.position;
    finish_vote();  // a vote still in flight (the run ended at its last step) completes on every rank
    if (outcome != Outcome::Finished) {
      if (outcome == Outcome::Signal && stop_sig == 0) stop_sig = stop_signal();
      checkpoint();
      write_plot_file();
      const std::string why = outcome == Outcome::Signal
                                  ? (stop_sig == SIGTERM  ? "stopped by SIGTERM"
                                     : stop_sig == SIGHUP ? "stopped by SIGHUP (its terminal or SSH session closed)"
                                                          : "stopped by Ctrl-C (SIGINT)")
                                  : format("stopped after %lld steps (--stop-after)", static_cast<long long>(invocation_steps));
      const std::string where = format("at step %lld of %lld (epoch %lld, batch %lld of %lld next)", static_cast<long long>(pos.global_step),
                                       static_cast<long long>(total_steps), static_cast<long long>(pos.epoch + 1),
                                       static_cast<long long>(pos.batch + 1), static_cast<long long>(spe));
      const std::string how = opt.checkpoint_dir.empty() ? "no --checkpoint-dir was given, so nothing was saved to resume from"
                                                         : "checkpoint in " + opt.checkpoint_dir + "; continue with: dp-train --resume " +
                                                               opt.checkpoint_dir + (group ? " (on any number of processes)" : "");
      say(why + (group ? format(" (all %d processes)", world) : std::string()) + " " + where + ": " + how);
      log_record({{"event", "stop"},
                  {"reason", outcome == Outcome::Signal ? "signal" : "stop-after"},
                  {"step", pos.global_step},
                  {"checkpoint", opt.checkpoint_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(checkpoint_path(opt.checkpoint_dir))}});
      return outcome == Outcome::Signal ? 128 + stop_sig : 0;
    }
    if (state.history.evals.empty() || state.history.evals.back().step != pos.global_step) record_eval();
    checkpoint();
    if (!opt.save.empty()) save_weights();
    write_plot_file();
    summary();
    print_sample();
    const double accuracy = state.history.evals.back().test_accuracy;
    if (opt.min_accuracy >= 0 && accuracy < opt.min_accuracy) {
      say(format("%s %.4f is below --min-accuracy %.4f", text() ? "held-out next-character accuracy" : "test accuracy", accuracy, opt.min_accuracy));
      return 1;
    }
    return 0;
  }

  // Language models, rank 0: --sample-tokens characters generated after the held-out text's first
  // character, drawn from a generator of the run's seed (the same sample for the same weights),
  // printed escaped for the terminal and logged as is.
  void print_sample() {
    if (!text() || opt.sample_tokens == 0 || !leader()) return;
    Generator gen(run.seed);
    const models::SampleOptions options = models::SampleOptions().temperature(opt.temperature).top_k(opt.top_k).generator(&gen);
    const Tensor prompt = tensor(std::vector<int64_t>{sets.text->prompt}).view({1, 1});
    const Tensor ids = net->generate(prompt, opt.sample_tokens, options);
    const std::string sample = sets.text->tokenizer->decode(ids.flatten().to(Device::cpu()));
    progress.line(format("sample (%lld characters after %s, temperature %g, %s):", static_cast<long long>(opt.sample_tokens),
                         quote_char(sets.text->tokenizer->chars()[static_cast<size_t>(sets.text->prompt)]).c_str(), opt.temperature,
                         opt.top_k > 0 ? format("top-k %lld", static_cast<long long>(opt.top_k)).c_str() : "all characters"));
    const std::string safe = terminal_safe(sample);
    for (size_t start = 0; start <= safe.size();) {
      const size_t end = std::min(safe.find('\n', start), safe.size());
      progress.line("  | " + safe.substr(start, end - start));
      start = end + 1;
    }
    log_record({{"event", "sample"}, {"text", sample}, {"temperature", opt.temperature}, {"top_k", opt.top_k}});
  }

  // --save: the model's state dict, as dp::save writes it; across processes written by rank 0 after
  // checking that every rank holds the same weights.
  // A language model's file also records its vocabulary (metadata "vocab", vocabulary_json).
  void save_weights() {
    std::map<std::string, std::string> metadata = {{"format", "pt"}, {"dparallel_module", model().name()}};
    if (text_record) metadata["vocab"] = vocabulary_json(text_record->vocab);
    if (!group) {
      save(model().state_dict(), opt.save, metadata);
      return;
    }
    note("save");
    distributed::CheckpointOptions o;
    o.metadata = std::move(metadata);
    distributed::save_checkpoint(*group, model().state_dict(), opt.save, o);
  }

  // Every rank's training throughput: [rows trained, training seconds] of each rank (allgather).
  std::vector<std::pair<int64_t, double>> rank_throughput() {
    if (!group) return {{rank_samples, invocation_train_s}};
    note("summary");
    std::vector<Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(zeros({2}, TensorOptions().dtype(kFloat64)));
    group->allgather(all, tensor(std::vector<double>{static_cast<double>(rank_samples), invocation_train_s}))->wait();
    std::vector<std::pair<int64_t, double>> out;
    for (const Tensor& t : all) out.emplace_back(static_cast<int64_t>(t[0].item<double>()), t[1].item<double>());
    return out;
  }

  // " (N characters/s)" for a language model, whose samples are windows of characters.
  std::string chars_per_s(double samples_per_s) const {
    return text() ? format(" (%.0f characters/s)", samples_per_s * static_cast<double>(sets.text->block_size)) : std::string();
  }

  void summary() {
    const std::vector<std::pair<int64_t, double>> ranks = rank_throughput();  // collective: before rank 0's early return
    if (!leader()) return;
    const History::Eval& e = state.history.evals.back();
    const double wall = since(started);
    progress.line(format("finished: %lld steps (%.4g epochs) of batch %lld", static_cast<long long>(total_steps),
                         static_cast<double>(total_steps) / static_cast<double>(spe), static_cast<long long>(run.batch_size)));
    if (text())
      progress.line(format("held-out loss %.4f (perplexity %.3f), next-character accuracy %.4f (%lld held-out characters in %lld windows of %lld)",
                           e.test_loss, std::exp(e.test_loss), e.test_accuracy, static_cast<long long>(sets.test->size() * sets.text->block_size),
                           static_cast<long long>(sets.test->size()), static_cast<long long>(sets.text->block_size)));
    else
      progress.line(
          format("test accuracy %.4f, test loss %.4f (%lld test rows)", e.test_accuracy, e.test_loss, static_cast<long long>(sets.test->size())));
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
    if (invocation_steps > 0 && !group)
      progress.line(format("throughput: %.0f samples/s%s on %zu device(s): %s", rate, chars_per_s(rate).c_str(), devices.size(), per_device.c_str()));
    if (invocation_steps > 0 && group) {
      std::string per_rank;
      for (size_t r = 0; r < ranks.size(); ++r)
        per_rank += format("%srank %zu %.0f samples/s (%lld samples)", r ? ", " : "", r,
                           ranks[r].second > 0 ? static_cast<double>(ranks[r].first) / ranks[r].second : 0.0, static_cast<long long>(ranks[r].first));
      progress.line(format("throughput: %.0f samples/s%s over %d processes: %s", rate, chars_per_s(rate).c_str(), world, per_rank.c_str()));
      progress.line(format("rank 0's devices: %s", per_device.c_str()));
    }
    std::string files;
    if (!opt.save.empty()) files += " weights " + opt.save + ";";
    if (!opt.checkpoint_dir.empty()) files += " checkpoint " + checkpoint_path(opt.checkpoint_dir) + ";";
    if (!opt.log.empty()) files += " log " + opt.log + ";";
    if (!opt.plot.empty()) files += " plot " + opt.plot + ";";
    if (!files.empty()) progress.line("wrote" + files.substr(0, files.size() - 1));
    nlohmann::json per_dev = nlohmann::json::object();
    for (size_t d = 0; d < devices.size(); ++d) per_dev[devices[d].str()] = device_samples[d];
    nlohmann::json end = {{"event", "end"},
                          {"step", state.position.global_step},
                          {"test_accuracy", e.test_accuracy},
                          {"test_loss", e.test_loss},
                          {"wall_s", wall},
                          {"train_s", invocation_train_s},
                          {"samples_per_s", rate},
                          {"device_samples", per_dev},
                          {"epoch_seconds", state.history.epoch_seconds}};
    if (text()) end["perplexity"] = std::exp(e.test_loss);
    if (group) {
      nlohmann::json samples = nlohmann::json::array(), rates = nlohmann::json::array();
      for (const auto& [n, t] : ranks) {
        samples.push_back(n);
        rates.push_back(t > 0 ? static_cast<double>(n) / t : 0.0);
      }
      end["world_size"] = world;
      end["rank_samples"] = samples;
      end["rank_samples_per_s"] = rates;
    }
    log_record(end);
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
