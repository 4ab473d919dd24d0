#pragma once
// dp-train's command line. Two kinds of settings:
//  - RunSettings define the numbers a run produces (model, data, optimizer, schedule, length,
//    seed). Every checkpoint stores them, and a resumed run takes them from its checkpoint, so it
//    continues the same run; typing one with another value next to --resume is an error.
//  - The rest says how this invocation carries the run out (devices, workers, files, output) and
//    may differ between an interrupted run and its resumption.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <nlohmann/json.hpp>

namespace dp::train {

struct RunSettings {
  std::string model = "cnn";  // seed | mlp | cnn
  int64_t hidden = 256;       // mlp width
  std::string data;           // random | fashion-mnist (default: random for seed, else fashion-mnist)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t data_size = 100;  // rows of random data (the tutorial's data_size)
  int64_t epochs = 0;       // the run's length: exactly one of epochs and steps is > 0
  int64_t steps = 0;
  int64_t batch_size = 128;
  std::string optimizer = "adam";  // sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;            // sgd only
  double weight_decay = 0.0;        // default: 0, or 1e-2 for adamw (PyTorch's defaults)
  std::string schedule = "cosine";  // cosine (per step, to 0 at the last step) | constant
  uint64_t seed = 0;
  bool shuffle = true;
};

// The largest values the numeric options take (so that no size or step count computed from them
// overflows, and a typo is caught before anything is allocated).
inline constexpr int64_t kMaxHidden = 65536;         // --hidden: the H x H layer is 16 GiB
inline constexpr int64_t kMaxRows = 1000000000;      // --data-size, --batch-size
inline constexpr int64_t kMaxEpochs = 1000000;       // --epochs
inline constexpr int64_t kMaxSteps = 1000000000000;  // --steps, --checkpoint-every, --stop-after, --log-every
inline constexpr int64_t kMaxWorkers = 256;          // --workers
// The longest string a setting may hold (--data-dir; in a checkpoint, every string): a path
// (PATH_MAX). Longer cannot be opened, and would make every message that names it unbounded.
inline constexpr size_t kMaxPathBytes = 4096;

// The rules every RunSettings obeys, on the command line and in a checkpoint: known names, every
// number in its range, exactly one of epochs and steps, a --data-dir no longer than a path. ValueError naming the option otherwise.
void check_run_settings(const RunSettings& settings);

// Keys are the option names without "--" ("batch-size"), so a conflict message can name the option.
nlohmann::json to_json(const RunSettings& s);
RunSettings run_settings_from_json(const nlohmann::json& j);

struct Options {
  RunSettings run;
  std::set<std::string> run_options_given;  // run options typed on the command line ("lr", ...)

  std::string devices = "auto";
  std::string output_device;  // empty: device_ids[0]
  bool parallel_loss = false;
  int64_t workers = 1;
  std::string init, save, checkpoint_dir, resume, log, plot;
  int64_t log_every = 1;          // plain-line mode: print every Nth step
  int64_t checkpoint_every = 0;   // also checkpoint every N steps (0: at epoch ends only)
  int64_t stop_after = 0;         // stop (as Ctrl-C does) after N steps of this invocation
  double min_accuracy = -1;       // >= 0: exit 1 when the final test accuracy is below it
  std::string progress = "auto";  // auto | bar | lines | none
  // Across processes (DistributedDataParallel): on when the launcher's environment says the world
  // has more than one process (WORLD_SIZE > 1, see dp/distributed/init.h), or forced by --distributed.
  bool distributed = false;
};

// What main() should do after parsing: run with `options`, or exit with `exit_code` (help printed:
// 0; a usage error, already reported on stderr: 2).
struct ParseResult {
  std::optional<Options> options;
  int exit_code = 0;
};
ParseResult parse_args(int argc, char** argv);

// The settings of a resumed run: the checkpoint's, after checking that every run option typed on
// this command line agrees with them (ValueError naming the first that does not). --data-dir may
// change (the same files, moved).
RunSettings merge_resumed(const Options& options, const RunSettings& saved);

}  // namespace dp::train
