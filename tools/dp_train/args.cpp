#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <CLI/CLI.hpp>
#include "dp/core/errors.h"

namespace dp::train {
namespace {

const std::initializer_list<const char*> kModels = {"seed", "mlp", "cnn", "gpt", "gru", "lstm"};

const char* kDefaultText = "text:/usr/share/games/fortunes/fortunes";

const char* kDescription =
    "dp-train: trains a built-in model on a built-in data set with DataParallel over several devices.\n"
    "\n"
    "Models (state_dict keys are PyTorch's for the same nn.Sequential):\n"
    "  seed  Linear(5,1), Sigmoid; BCELoss (the DataParallel tutorial's model, on its random data)\n"
    "  mlp   Flatten, Linear(784,H), ReLU, Linear(H,H), ReLU, Linear(H,10); cross-entropy\n"
    "  cnn   Conv(1,32,3,pad 1), ReLU, MaxPool 2, Conv(32,64,3,pad 1), ReLU, MaxPool 2, Flatten,\n"
    "        Linear(3136,128), ReLU, Linear(128,10); cross-entropy\n"
    "Language models, on --data text:FILE (next-character cross-entropy; state_dict keys are nanoGPT's / PyTorch's):\n"
    "  gpt   dp::models::GPT (nanoGPT): --layers blocks of --heads heads, width --embd, context --block-size\n"
    "  gru   Embedding(V,--embd), GRU(--embd,--hidden,--layers), Linear(--hidden,V)\n"
    "  lstm  Embedding(V,--embd), LSTM(--embd,--hidden,--layers), Linear(--hidden,V)\n"
    "Data: random = dp::data::RandomDataset (N(0,1) features, labelled by a fixed teacher: a hyperplane\n"
    "for seed, a random linear map to 10 classes for mlp/cnn; as many test rows, drawn after them);\n"
    "fashion-mnist = Debian's dataset-fashion-mnist (60000 train / 10000 test images, normalised);\n"
    "text:FILE = the characters of a UTF-8 text file (vocabulary: its distinct characters), the first 90%\n"
    "for training, the last 10% held out, in windows of --block-size characters (default: Debian's fortunes,\n"
    "text:/usr/share/games/fortunes/fortunes). A finished language-model run prints a sample of generated text.\n"
    "\n"
    "Across processes: started by a launcher (dp-run --nproc-per-node 2 -- dp-train ..., or torchrun's,\n"
    "mpirun's or srun's environment with WORLD_SIZE > 1), every process trains with DistributedDataParallel\n"
    "(and DataParallel over its own --devices); --batch-size stays the rows of one optimizer step, split\n"
    "over the processes; rank 0 prints, logs, plots and writes the checkpoint. After a launcher restart\n"
    "(DP_RESTART_COUNT > 0) the run resumes from --checkpoint-dir when it holds a checkpoint.\n"
    "\n"
    "Exit status: 0 done; 1 final test accuracy (language models: held-out next-token accuracy) below\n"
    "--min-accuracy; 2 bad arguments or input files;\n"
    "3 an error during training (across processes also: a lost peer, a timeout, a failed rendezvous);\n"
    "130 (143, 129) stopped by Ctrl-C = SIGINT (SIGTERM, SIGHUP), after writing the checkpoint.";

// Per-model defaults for the run options the user did not type (the main job's are cnn's).
// Language models run --steps (an epoch's length depends on the text), the others --epochs.
struct ModelDefaults {
  const char* data;
  int64_t batch_size;
  int64_t epochs;
  double lr;
  int64_t steps = 0;
};
ModelDefaults defaults_for(const std::string& model) {
  if (model == "seed") return {"random", 30, 50, 0.05};  // tutorial batch 30; 4 steps an epoch
  if (model == "mlp") return {"fashion-mnist", 128, 5, 1e-3};
  if (model == "gpt" || model == "gru" || model == "lstm") return {kDefaultText, 32, 0, 3e-3, 200};
  return {"fashion-mnist", 128, 5, 1e-3};  // >= 0.90 test accuracy from epoch 3 on (README)
}
// The language models' shapes when not typed.
struct ShapeDefaults {
  int64_t layers, heads, embd, hidden;
};
ShapeDefaults shape_defaults_for(const std::string& model) {
  if (model == "gpt") return {2, 4, 64, 0};
  return {1, 0, 64, 128};  // gru, lstm
}

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A usage error: reported as "dp-train: error: <message>" with exit status 2. Inside finish() and
// the settings checks it is a ValueError (the checks are shared with the checkpoint reader), which
// finish() turns into CLI's usage error.
[[noreturn]] void usage(const std::string& message) { throw ValueError(message); }

// A value from the command line or a checkpoint, in a message: at most 100 bytes of it.
std::string clip(const std::string& s) { return s.size() <= 100 ? s : s.substr(0, 100) + "... (" + std::to_string(s.size()) + " bytes)"; }

void check_choice(const std::string& option, const std::string& value, std::initializer_list<const char*> choices) {
  std::string list;
  size_t i = 0;
  for (const char* c : choices) {
    if (value == c) return;
    list += i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ");
    list += c;
    ++i;
  }
  usage(option + ": '" + clip(value) + "' is not one of " + list);
}

void check_at_least(const std::string& option, int64_t value, int64_t least) {
  if (value < least) usage(option + " must be at least " + std::to_string(least) + ", got " + std::to_string(value));
}

void check_range(const std::string& option, int64_t value, int64_t least, int64_t most) {
  check_at_least(option, value, least);
  if (value > most) usage(option + " must be at most " + std::to_string(most) + ", got " + std::to_string(value));
}

void check_non_negative(const std::string& option, double value) {
  if (!std::isfinite(value) || value < 0) usage(option + " must be a finite number >= 0, got " + fmt(value));
}

// --seed's check, before CLI11 converts the text: CLI11 converts unsigned options with strtoull,
// which takes "-5" for 2^64 - 5 and past 2^64 - 1 gives that largest value; both are refused.
// "" when fine, else why not (CLI11 prefixes the option's name).
std::string seed_problem(const std::string& text) {
  const size_t i = text.find_first_not_of(" \t\n\v\f\r");
  errno = 0;
  char* end = nullptr;
  (void)std::strtoull(text.c_str(), &end, 0);
  if (i == std::string::npos || text[i] == '-' || errno == ERANGE || end == text.c_str())
    return "must be an integer from 0 to 18446744073709551615, got " + clip(text);
  return "";  // anything else (trailing characters) is left to CLI11's conversion error
}

// Fills in the per-model defaults and checks every value; throws CLI::ValidationError.
void finish_checked(Options& o, const CLI::App& app);
void finish(Options& o, const CLI::App& app) {
  try {
    finish_checked(o, app);
  } catch (const ValueError& e) {
    throw CLI::ValidationError(e.what());
  }
}
void finish_checked(Options& o, const CLI::App& app) {
  RunSettings& r = o.run;
  auto given = [&](const char* name) { return app.count(std::string("--") + name) > 0; };
  for (const char* name :
       {"model",    "hidden",       "data",     "data-dir", "data-size",  "epochs", "steps", "batch-size", "optimizer",  "lr",
        "momentum", "weight-decay", "schedule", "seed",     "no-shuffle", "layers", "heads", "embd",       "block-size", "dropout"})
    if (given(name)) o.run_options_given.insert(std::string(name) == "no-shuffle" ? "shuffle" : name);

  // With --resume the model is the checkpoint's (merge_resumed); a --data text:FILE typed there (the
  // text moved) is a language model's, which the checks here then assume.
  if (!o.resume.empty() && !given("model") && r.data.rfind("text:", 0) == 0) r.model = "lstm";
  check_choice("--model", r.model, kModels);
  const ModelDefaults d = defaults_for(r.model);
  if (!given("data")) r.data = d.data;
  if (!given("batch-size")) r.batch_size = d.batch_size;
  if (!given("lr")) r.lr = d.lr;
  if (!given("weight-decay")) r.weight_decay = r.optimizer == "adamw" ? 1e-2 : 0.0;
  if (given("epochs") && given("steps")) usage("give --epochs or --steps, not both");
  if (!given("epochs") && !given("steps")) {
    r.epochs = d.epochs;
    r.steps = d.steps;
  }
  if (r.language_model()) {
    const ShapeDefaults sd = shape_defaults_for(r.model);
    if (!given("layers")) r.layers = sd.layers;
    if (!given("heads")) r.heads = sd.heads;
    if (!given("embd")) r.embd = sd.embd;
    if (!given("hidden") && sd.hidden > 0) r.hidden = sd.hidden;
    if (!given("block-size")) r.block_size = 64;
  } else if (o.resume.empty()) {
    // A language model's option on an image model's run is a mistake (with --resume the model is
    // the checkpoint's, which merge_resumed checks the options against).
    for (const char* name : {"layers", "heads", "embd", "block-size", "dropout", "sample-tokens", "temperature", "top-k"})
      if (given(name)) usage(std::string("--") + name + " applies to the language models (--model gpt, gru or lstm), not to --model " + r.model);
  }
  if (r.model != "gpt" && given("heads") && o.resume.empty()) usage("--heads applies to --model gpt only");

  check_choice("--progress", o.progress, {"auto", "bar", "lines", "none"});
  if (given("epochs")) check_at_least("--epochs", r.epochs, 1);
  if (given("steps")) check_at_least("--steps", r.steps, 1);
  if (given("momentum") && r.optimizer != "sgd") usage("--momentum applies to --optimizer sgd only (Adam's betas are fixed at 0.9, 0.999)");
  check_run_settings(r);
  check_range("--workers", o.workers, 0, kMaxWorkers);
  check_range("--log-every", o.log_every, 1, kMaxSteps);
  check_range("--checkpoint-every", o.checkpoint_every, 0, kMaxSteps);
  check_range("--stop-after", o.stop_after, 0, kMaxSteps);
  if (given("min-accuracy") && !(o.min_accuracy >= 0 && o.min_accuracy <= 1)) usage("--min-accuracy must lie in [0, 1], got " + fmt(o.min_accuracy));
  check_range("--sample-tokens", o.sample_tokens, 0, kMaxSampleTokens);
  if (!(std::isfinite(o.temperature) && o.temperature > 0)) usage("--temperature must be a finite number > 0, got " + fmt(o.temperature));
  check_range("--top-k", o.top_k, 0, kMaxRows);
  if (!o.resume.empty() && !o.init.empty()) usage("--init and --resume both give the starting weights; a resumed run starts from its checkpoint");
  if (!o.resume.empty() && o.checkpoint_dir.empty()) o.checkpoint_dir = o.resume;  // can be interrupted and resumed again
}

}  // namespace

void check_run_settings(const RunSettings& r) {
  check_choice("--model", r.model, kModels);
  if (r.data.size() > kMaxPathBytes)
    usage("--data is " + std::to_string(r.data.size()) + " bytes long, longer than a path can be (" + std::to_string(kMaxPathBytes) + ")");
  if (r.language_model()) {
    if (r.data.rfind("text:", 0) != 0)
      usage("--model " + r.model + " trains on text: give --data text:FILE (e.g. " + kDefaultText + "), not " + clip(r.data));
    if (r.text_path().empty()) usage("--data text:FILE: the FILE is missing");
    check_range("--layers", r.layers, 1, kMaxLayers);
    check_range("--embd", r.embd, 1, kMaxHidden);
    check_range("--block-size", r.block_size, 1, kMaxBlockSize);
    if (!(std::isfinite(r.dropout) && r.dropout >= 0 && r.dropout < 1)) usage("--dropout must lie in [0, 1), got " + fmt(r.dropout));
    if (r.model == "gpt") {
      check_range("--heads", r.heads, 1, r.embd);
      if (r.embd % r.heads != 0)
        usage("--embd " + std::to_string(r.embd) + " must be divisible by --heads " + std::to_string(r.heads) + " (each head gets embd / heads)");
    }
  } else {
    if (r.data.rfind("text:", 0) == 0)
      usage("--data text:FILE is for the language models (--model gpt, gru or lstm); --model " + r.model + " trains on random or fashion-mnist");
    check_choice("--data", r.data, {"random", "fashion-mnist"});
  }
  check_choice("--optimizer", r.optimizer, {"sgd", "adam", "adamw"});
  check_choice("--schedule", r.schedule, {"cosine", "constant"});
  if (r.model == "seed" && r.data != "random")
    usage("--model seed takes 5 features, so it trains on --data random (the tutorial's RandomDataset), not " + clip(r.data));
  if (r.data == "fashion-mnist" && r.data_dir.empty()) usage("--data-dir must not be empty");
  if (r.data_dir.size() > kMaxPathBytes)
    usage("--data-dir is " + std::to_string(r.data_dir.size()) + " bytes long, longer than a path can be (" + std::to_string(kMaxPathBytes) + ")");
  check_range("--hidden", r.hidden, 1, kMaxHidden);
  check_range("--data-size", r.data_size, 1, kMaxRows);
  check_range("--batch-size", r.batch_size, 1, kMaxRows);
  if (r.steps == 0) {
    check_range("--epochs", r.epochs, 1, kMaxEpochs);
  } else {
    check_range("--steps", r.steps, 1, kMaxSteps);
    if (r.epochs != 0) usage("give --epochs or --steps, not both");
  }
  check_non_negative("--lr", r.lr);
  check_non_negative("--momentum", r.momentum);
  check_non_negative("--weight-decay", r.weight_decay);
  if (r.momentum != 0 && r.optimizer != "sgd") usage("--momentum applies to --optimizer sgd only (Adam's betas are fixed at 0.9, 0.999)");
}

nlohmann::json to_json(const RunSettings& s, bool all_keys) {
  nlohmann::json j = {{"model", s.model},         {"hidden", s.hidden}, {"data", s.data},         {"data-dir", s.data_dir},
                      {"data-size", s.data_size}, {"epochs", s.epochs}, {"steps", s.steps},       {"batch-size", s.batch_size},
                      {"optimizer", s.optimizer}, {"lr", s.lr},         {"momentum", s.momentum}, {"weight-decay", s.weight_decay},
                      {"schedule", s.schedule},   {"seed", s.seed},     {"shuffle", s.shuffle}};
  if (all_keys || s.language_model()) {
    j["layers"] = s.layers;
    j["heads"] = s.heads;
    j["embd"] = s.embd;
    j["block-size"] = s.block_size;
    j["dropout"] = s.dropout;
  }
  return j;
}

RunSettings run_settings_from_json(const nlohmann::json& j) {
  RunSettings s;
  s.model = j.at("model").get<std::string>();
  s.hidden = j.at("hidden").get<int64_t>();
  s.data = j.at("data").get<std::string>();
  s.data_dir = j.at("data-dir").get<std::string>();
  s.data_size = j.at("data-size").get<int64_t>();
  s.epochs = j.at("epochs").get<int64_t>();
  s.steps = j.at("steps").get<int64_t>();
  s.batch_size = j.at("batch-size").get<int64_t>();
  s.optimizer = j.at("optimizer").get<std::string>();
  s.lr = j.at("lr").get<double>();
  s.momentum = j.at("momentum").get<double>();
  s.weight_decay = j.at("weight-decay").get<double>();
  s.schedule = j.at("schedule").get<std::string>();
  s.seed = j.at("seed").get<uint64_t>();
  s.shuffle = j.at("shuffle").get<bool>();
  if (j.contains("layers")) {
    s.layers = j.at("layers").get<int64_t>();
    s.heads = j.at("heads").get<int64_t>();
    s.embd = j.at("embd").get<int64_t>();
    s.block_size = j.at("block-size").get<int64_t>();
    s.dropout = j.at("dropout").get<double>();
  }
  return s;
}

RunSettings merge_resumed(const Options& options, const RunSettings& saved) {
  const nlohmann::json mine = to_json(options.run, true), theirs = to_json(saved);
  const bool text_moved = saved.language_model() && options.run_options_given.count("data") && !options.run.text_path().empty();
  for (const std::string& name : options.run_options_given) {
    if (name == "data-dir" || (name == "data" && text_moved)) continue;
    if (!theirs.contains(name))
      throw ValueError("--" + name + " applies to the language models (--model gpt, gru or lstm), but the checkpoint's run is --model " +
                       saved.model);
    // epochs/steps: typing the length the run already has is fine; a different one would change
    // the learning-rate schedule of the steps already taken.
    if (mine.at(name) != theirs.at(name)) {
      const std::string flag = name == "shuffle" ? "--no-shuffle" : "--" + name;
      throw ValueError(flag + " " + clip(mine.at(name).dump()) + " differs from the checkpoint's " + clip(theirs.at(name).dump()) +
                       ": a resumed run continues the saved run with its settings (leave the option out, or start a new run)");
    }
  }
  RunSettings merged = saved;
  if (options.run_options_given.count("data-dir")) merged.data_dir = options.run.data_dir;
  if (text_moved) merged.data = options.run.data;
  check_run_settings(merged);
  return merged;
}

ParseResult parse_args(int argc, char** argv) {
  CLI::App app(kDescription, "dp-train");
  // Later values win, so scripts/run-main.sh's own arguments can be overridden by the user's.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
  Options o;
  RunSettings& r = o.run;

  app.add_option("--model", r.model, "seed | mlp | cnn | gpt | gru | lstm")->default_str("cnn")->group("Model and data");
  app.add_option("--hidden", r.hidden, "mlp hidden width H; gru/lstm hidden size (default: 256; gru/lstm 128)")->group("Model and data");
  app.add_option("--data", r.data,
                 "random | fashion-mnist | text:FILE (default: random for seed, fashion-mnist for mlp/cnn, "
                 "text:/usr/share/games/fortunes/fortunes for gpt/gru/lstm)")
      ->group("Model and data");
  app.add_option("--layers", r.layers, "gpt: Transformer blocks (default 2); gru/lstm: stacked layers (default 1)")->group("Language models");
  app.add_option("--heads", r.heads, "gpt: attention heads (default 4)")->group("Language models");
  app.add_option("--embd", r.embd, "gpt: width n_embd; gru/lstm: embedding size (default 64)")->group("Language models");
  app.add_option("--block-size", r.block_size, "characters per training window, the longest context (default 64)")->group("Language models");
  app.add_option("--dropout", r.dropout, "gpt: dropout; gru/lstm: between stacked layers (default 0)")->group("Language models");
  app.add_option("--sample-tokens", o.sample_tokens, "characters of text generated at the end (0: none)")
      ->default_val(o.sample_tokens)
      ->group("Language models");
  app.add_option("--temperature", o.temperature, "sampling temperature (> 0)")->default_val(o.temperature)->group("Language models");
  app.add_option("--top-k", o.top_k, "sample among the k most likely characters (0: all)")->default_val(o.top_k)->group("Language models");
  app.add_option("--data-dir", r.data_dir, "Fashion-MNIST's IDX files")->default_val(r.data_dir)->group("Model and data");
  app.add_option("--data-size", r.data_size, "rows of random data (train; the test set has as many)")
      ->default_val(r.data_size)
      ->group("Model and data");

  app.add_option("--devices", o.devices, "auto (every CUDA GPU, else every CPU core as cpu:0..cpu:N-1) or a list: cpu:0,cpu:1")
      ->default_val(o.devices)
      ->group("Devices");
  app.add_option("--output-device", o.output_device, "where outputs are gathered and the loss computed (default: the first device; 'cpu' = host)")
      ->group("Devices");
  app.add_flag("--parallel-loss", o.parallel_loss, "compute the loss on the replicas (only scalars travel back)")->group("Devices");
  app.add_flag("--distributed", o.distributed, "train across processes even if WORLD_SIZE is 1 (default: when the launcher's WORLD_SIZE > 1)")
      ->group("Devices");

  app.add_option("--epochs", r.epochs, "run length in epochs (default: 5; seed 50)")->group("Training");
  app.add_option("--steps", r.steps, "run length in optimizer steps (instead of --epochs)")->group("Training");
  app.add_option("--batch-size", r.batch_size, "rows per step, split over the devices (default: 128; seed 30)")->group("Training");
  app.add_option("--optimizer", r.optimizer, "sgd | adam | adamw")->default_val(r.optimizer)->group("Training");
  app.add_option("--lr", r.lr, "learning rate (default: 1e-3; seed 0.05)")->group("Training");
  app.add_option("--momentum", r.momentum, "SGD momentum")->default_val(r.momentum)->group("Training");
  app.add_option("--weight-decay", r.weight_decay, "weight decay (default: 0; adamw 1e-2)")->group("Training");
  app.add_option("--schedule", r.schedule, "cosine (decay to 0 over the run, per step) | constant")->default_val(r.schedule)->group("Training");
  app.add_option("--seed", r.seed, "seeds initialisation, random data and the shuffle order")
      ->default_val(r.seed)
      ->check(CLI::Validator([](std::string& text) { return seed_problem(text); }, ""))
      ->group("Training");
  bool no_shuffle = false;
  app.add_flag("--no-shuffle", no_shuffle, "visit the training set in order (default: a new permutation every epoch)")->group("Training");
  app.add_option("--workers", o.workers, "DataLoader threads building batches ahead (0: on the training thread)")
      ->default_val(o.workers)
      ->group("Training");

  app.add_option("--init", o.init, "start from these weights (safetensors state dict, PyTorch's keys)")->group("Files");
  app.add_option("--save", o.save, "write the final weights here (safetensors state dict)")->group("Files");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write a resumable checkpoint here after every epoch")->group("Files");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also every N steps (0: epoch ends only)")->default_val(0)->group("Files");
  app.add_option("--resume", o.resume, "continue the run checkpointed in DIR (on any devices)")->group("Files");
  app.add_option("--log", o.log, "write one JSON record per step and per evaluation (JSON Lines)")->group("Files");
  app.add_option("--plot", o.plot, "write an SVG plot of the loss and accuracy curves")->group("Files");

  app.add_option("--progress", o.progress, "auto (a bar on a terminal, else lines) | bar | lines | none")->default_val(o.progress)->group("Output");
  app.add_option("--log-every", o.log_every, "in line mode, print every Nth step")->default_val(o.log_every)->group("Output");
  app.add_option("--stop-after", o.stop_after, "stop after N steps of this invocation, as Ctrl-C does (0: never)")->default_val(0)->group("Output");
  app.add_option("--min-accuracy", o.min_accuracy, "exit 1 if the final test accuracy (text: next-token accuracy) is below this")->group("Output");

  ParseResult result;
  try {
    app.parse(argc, argv);
    r.shuffle = !no_shuffle;
    finish(o, app);
  } catch (const CLI::Success& e) {  // --help
    result.exit_code = app.exit(e);
    return result;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dp-train: error: %s\nRun 'dp-train --help' to see the options.\n", e.what());
    result.exit_code = 2;
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace dp::train
