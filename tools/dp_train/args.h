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
  std::string model = "cnn";  // seed | mlp | cnn | gpt | gru | lstm
  int64_t hidden = 256;       // mlp width; gru/lstm hidden size (default 128)
  // random | fashion-mnist (default: random for seed, else fashion-mnist) | text:FILE (gpt, gru, lstm;
  // default text:/usr/share/games/fortunes/fortunes)
  std::string data;
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
  // Language models (gpt, gru, lstm). Only these models' settings hold them (to_json, checkpoints);
  // parse_args fills in the model's defaults for those not typed.
  int64_t layers = 0;      // gpt: Transformer blocks (default 2); gru/lstm: stacked layers (default 1)
  int64_t heads = 0;       // gpt: attention heads (default 4)
  int64_t embd = 0;        // gpt: model width n_embd; gru/lstm: the embedding size (default 64)
  int64_t block_size = 0;  // tokens per training window and the longest context (default 64)
  double dropout = 0.0;    // gpt: dropout; gru/lstm: between stacked layers

  bool language_model() const { return model == "gpt" || model == "gru" || model == "lstm"; }
  // The FILE of --data text:FILE ("" for other data).
  std::string text_path() const { return data.rfind("text:", 0) == 0 ? data.substr(5) : std::string(); }
};

// The largest values the numeric options take (so that no size or step count computed from them
// overflows, and a typo is caught before anything is allocated).
inline constexpr int64_t kMaxHidden = 65536;          // --hidden: the H x H layer is 16 GiB
inline constexpr int64_t kMaxRows = 1000000000;       // --data-size, --batch-size
inline constexpr int64_t kMaxEpochs = 1000000;        // --epochs
inline constexpr int64_t kMaxSteps = 1000000000000;   // --steps, --checkpoint-every, --stop-after, --log-every
inline constexpr int64_t kMaxWorkers = 256;           // --workers
inline constexpr int64_t kMaxLayers = 1024;           // --layers
inline constexpr int64_t kMaxBlockSize = 1 << 20;     // --block-size
inline constexpr int64_t kMaxSampleTokens = 1 << 20;  // --sample-tokens
// The longest string a setting may hold (--data-dir; in a checkpoint, every string): a path
// (PATH_MAX). Longer cannot be opened, and would make every message that names it unbounded.
inline constexpr size_t kMaxPathBytes = 4096;

// The rules every RunSettings obeys, on the command line and in a checkpoint: known names, every
// number in its range, exactly one of epochs and steps, a --data-dir no longer than a path. ValueError naming the option otherwise.
void check_run_settings(const RunSettings& settings);

// Keys are the option names without "--" ("batch-size"), so a conflict message can name the option.
// The language-model keys (layers, heads, embd, block-size, dropout) are there for gpt, gru and
// lstm only (or always, with all_keys), so an image model's settings are what they always were.
nlohmann::json to_json(const RunSettings& s, bool all_keys = false);
RunSettings run_settings_from_json(const nlohmann::json& j);

struct Options {
  RunSettings run;
  std::set<std::string> run_options_given;  // run options typed on the command line ("lr", ...)

  std::string devices = "auto";
  std::string output_device;  // empty: device_ids[0]
  bool parallel_loss = false;
  int64_t workers = 1;
  std::string init, save, checkpoint_dir, resume, log, plot;
  int64_t log_every = 1;         // plain-line mode: print every Nth step
  int64_t checkpoint_every = 0;  // also checkpoint every N steps (0: at epoch ends only)
  int64_t stop_after = 0;        // stop (as Ctrl-C does) after N steps of this invocation
  double min_accuracy = -1;      // >= 0: exit 1 when the final test accuracy is below it
                                 // (language models: the held-out next-token accuracy)
  // Language models: the text sampled at the end of a finished run (rank 0).
  int64_t sample_tokens = 200;    // characters to generate (0: no sample)
  double temperature = 0.8;       // logits divided by it before sampling (> 0)
  int64_t top_k = 0;              // sample among the k most likely characters only (0: all)
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
// change (the same files, moved), and so may the FILE of --data text:FILE (the trainer checks that
// its vocabulary is the checkpoint's).
RunSettings merge_resumed(const Options& options, const RunSettings& saved);

}  // namespace dp::train
