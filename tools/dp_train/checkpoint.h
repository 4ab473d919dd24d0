#pragma once
// Resumable checkpoints: one safetensors file, DIR/checkpoint.safetensors, written atomically by
// dp::save (temporary file, fsync, rename), so a crash or Ctrl-C during a write leaves the previous
// checkpoint whole. It holds
//   tensors   "model.<key>"      the model's state_dict (PyTorch's keys after the prefix)
//             "optimizer.<key>"  the optimizer's state tensors ("optimizer.state.0.exp_avg", ...)
//   metadata  "optimizer.<key>"  the optimizer's metadata (param_groups JSON, name)
//             "dp_train"         JSON: format version, the run settings, the position (next epoch
//                                and batch, global step), the scheduler state, every device's
//                                generator state, the loss/accuracy history and the time spent;
//                                for --data text:FILE also the text's vocabulary, length and
//                                fingerprint ("text", TextRecord).
// Doubles go through JSON, whose writer prints the shortest text that reads back to the same bits,
// so learning rates and scheduler state resume exactly.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "args.h"
#include "dp/core/device.h"
#include "dp/core/serialize.h"
#include "dp/nn/module.h"
#include "dp/optim/optim.h"

namespace dp::train {

// Everything the plot and the summary need from the whole run, also across resumptions.
struct History {
  std::vector<float> step_loss;  // loss of global step i + 1
  struct Eval {
    int64_t step = 0;  // global step after which it was measured
    double test_accuracy = 0;
    double test_loss = 0;
    double train_loss = 0;  // mean loss of the steps since the previous evaluation
  };
  std::vector<Eval> evals;
  std::vector<double> epoch_seconds;  // training time of each finished epoch (without evaluation)
};

// Where the run stands: the next step trains batch `batch` of epoch `epoch` (both 0-based).
struct Position {
  int64_t global_step = 0;  // optimizer steps done
  int64_t epoch = 0;
  int64_t batch = 0;
};

struct TrainState {
  Position position;
  double train_seconds = 0;  // time in training steps over every invocation so far
  double epoch_seconds = 0;  // of which in the current, unfinished epoch
  double wall_seconds = 0;   // whole invocations (setup, evaluation, checkpoints included)
  History history;
};

// What a language model's checkpoint records about its text: the vocabulary (the model's token ids
// mean these characters), and the length and FNV-1a fingerprint of the file it was trained on.
struct TextRecord {
  std::vector<char32_t> vocab;  // sorted, distinct (dp::data::CharTokenizer's vocabulary)
  int64_t characters = 0;
  uint64_t fingerprint = 0;
};

struct Checkpoint {
  RunSettings settings;
  std::optional<TextRecord> text;  // language models only
  TrainState state;
  nn::TensorDict model;
  optim::OptimizerState optimizer;
  std::optional<optim::LRSchedulerState> scheduler;
  nlohmann::json generators;  // [{"device": "cpu", "seed": s, "offset": o}, ...]
};

std::string checkpoint_path(const std::string& dir);

// The checkpoint's tensors and metadata (what save_checkpoint writes; a distributed run hands
// them to dp::distributed::save_checkpoint, which checks that every rank holds the same tensors
// and lets rank 0 write them). `world_size` is recorded for information only: the state does not
// depend on it, so a run resumes on any number of processes.
struct CheckpointContents {
  OrderedDict<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};
CheckpointContents checkpoint_contents(const RunSettings& settings, const TrainState& state, const nn::Module& model,
                                       const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler, const std::vector<Device>& devices,
                                       int world_size = 1, const TextRecord* text = nullptr);

// Writes DIR/checkpoint.safetensors (creating DIR); IOError naming the path when it cannot.
void save_checkpoint(const std::string& dir, const RunSettings& settings, const TrainState& state, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler, const std::vector<Device>& devices,
                     const TextRecord* text = nullptr);

// The vocabulary as dp::data::CharTokenizer::save writes it ({"format": "dparallel.CharTokenizer",
// "version": 1, "vocab_size": N, "chars": [...]}): the "vocab" metadata of a language model's
// --save file, which CharTokenizer::load reads once written to a file of its own.
std::string vocabulary_json(const std::vector<char32_t>& vocab);

// Reads DIR/checkpoint.safetensors. IOError when it is missing or unreadable, ValueError when it is
// not a dp-train checkpoint (or one of a newer format).
Checkpoint load_checkpoint(const std::string& dir);
// The checkpoint in a file already read (from `path`, named in messages); ValueError as above.
// Everything in the "dp_train" metadata is checked (parse_checkpoint_metadata).
Checkpoint parse_checkpoint(const SafetensorsFile& file, const std::string& path);
// The "dp_train" metadata alone (no tensors): every field present and of its type, the settings by
// the command line's rules (check_run_settings), the position non-negative, one step loss per step
// taken, evaluations in step order, one epoch time per finished epoch, well-formed generator states
// (the host's included), the scheduler state, a language model's text record (a vocabulary of
// distinct characters in order, a length of at least one character, a 16-digit fingerprint). ValueError naming the field ("settings.batch-size")
// for the first problem; never a JSON library exception, never the whole value in the message.
Checkpoint parse_checkpoint_metadata(const std::string& text);
// What needs the data set too (steps_per_epoch, total_steps of the run): the position is a batch of
// an epoch, epoch x steps_per_epoch + batch is the global step, and that is within the run.
void check_position(const Checkpoint& checkpoint, int64_t steps_per_epoch, int64_t total_steps);

// The generator state of the host and of `devices`, and its inverse (devices that no longer exist
// are skipped: a run resumed on fewer devices).
nlohmann::json generator_states(const std::vector<Device>& devices);
void restore_generators(const nlohmann::json& states);

}  // namespace dp::train
