// Checkpoints of whole models and optimizers (dp/nn/serialize.h, dp/optim/serialize.h) through
// real files: round trips restore parameters, buffers and optimizer state exactly (training resumes
// bit for bit); PyTorch loads our model checkpoint with strict load_state_dict and computes the same
// outputs; mismatched, truncated and corrupt files fail with errors that name the file and the
// problem and leave the model / optimizer untouched; a save that fails half-way (injected full disk)
// or whose process is killed half-way leaves the previous checkpoint loadable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include "dp/core/serialize.h"
#include "dp/nn/nn.h"
#include "dp/nn/serialize.h"
#include "dp/optim/optim.h"
#include "support/golden.h"
#include "support/run_command.h"
#include "support/temp_files.h"

namespace dp {
namespace {

namespace fs = std::filesystem;
using test::json;

// Bitwise copies of every state_dict entry (the state_dict aliases the live tensors).
nn::TensorDict snapshot(const nn::Module& m) {
  nn::TensorDict out;
  for (const auto& item : m.state_dict()) out.insert(item.key(), item.value().clone());
  return out;
}

::testing::AssertionResult same_state(const nn::TensorDict& a, const nn::TensorDict& b) {
  if (a.keys() != b.keys()) return ::testing::AssertionFailure() << "the state_dict keys differ";
  for (const auto& item : a) {
    const Tensor& other = b[item.key()];
    if (item.value().dtype() != other.dtype() || !dp::equal(item.value(), other))
      return ::testing::AssertionFailure() << item.key() << " differs: " << item.value() << " vs " << other;
  }
  return ::testing::AssertionSuccess();
}

// A model with parameters and buffers: Linear, BatchNorm1d (running statistics, a step counter),
// ReLU, Linear.
nn::Sequential make_model() { return nn::Sequential(nn::Linear(4, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 3)); }

// A few SGD steps on random batches, so that weights, running statistics and the optimizer state
// are no longer at their initial values.
void train(nn::Sequential& model, optim::Optimizer& opt, int steps, uint64_t seed) {
  Generator gen(seed);
  nn::CrossEntropyLoss loss_fn;
  model->train();
  for (int i = 0; i < steps; ++i) {
    Tensor x = randn({16, 4}, TensorOptions(), &gen);
    Tensor y = randint(0, 3, {16}, TensorOptions(kInt64), &gen);
    opt.zero_grad();
    loss_fn(model(x), y).backward();
    opt.step();
  }
}

template <typename E>
std::string expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "expected '" << f << "' in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
  return "";
}

// ---------------------------------------------------------------- models

TEST(ModuleCheckpoint, RoundTripRestoresParametersAndBuffersExactly) {
  test::TempDir dir;
  manual_seed(1);
  nn::Sequential model = make_model();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  train(model, opt, 3, 7);
  const nn::TensorDict before = snapshot(*model);
  ASSERT_EQ(before["1.num_batches_tracked"].item<int64_t>(), 3);
  const std::string path = dir.file("model.safetensors");
  dp::save(model, path);

  manual_seed(2);
  nn::Sequential fresh = make_model();
  EXPECT_FALSE(same_state(snapshot(*fresh), before));            // a different start, so the load is what matters
  Tensor weight_handle = fresh->ptr<nn::LinearImpl>(0)->weight;  // e.g. held by an optimizer
  nn::LoadResult r = dp::load(fresh, path);
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(same_state(snapshot(*fresh), before));
  EXPECT_TRUE(weight_handle.is_same(fresh->ptr<nn::LinearImpl>(0)->weight)) << "loading must write into the existing tensors";
  EXPECT_TRUE(dp::equal(weight_handle, before["0.weight"]));

  // The restored model computes what the saved one does (eval mode: running statistics in use).
  model->eval();
  fresh->eval();
  Tensor x = randn({5, 4});
  EXPECT_TRUE(dp::equal(fresh(x), model(x)));

  // The file holds exactly the state_dict under PyTorch's keys, plus the "pt" format tag.
  SafetensorsFile f = load_file(path);
  std::vector<std::string> keys = f.tensors.keys(), expected = model->state_dict().keys();
  std::sort(keys.begin(), keys.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.tensors["1.num_batches_tracked"].dtype(), kInt64);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

// PyTorch reads our checkpoint: tests/golden/check_module_checkpoint.py builds the same
// nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)), loads our file with
// load_state_dict(strict=True) and prints its output for a fixed input, which must be ours.
TEST(ModuleCheckpoint, PyTorchLoadsOurCheckpointStrictlyAndComputesTheSameOutput) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) GTEST_SKIP() << python << " not found: cannot check our file with PyTorch";
  test::TempDir dir;
  manual_seed(3);
  nn::Sequential model(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3));
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.05));
  Generator gen(4);
  for (int i = 0; i < 3; ++i) {  // trained weights, not just an initialisation
    opt.zero_grad();
    nn::MSELoss()(model(randn({8, 6}, TensorOptions(), &gen)), randn({8, 3}, TensorOptions(), &gen)).backward();
    opt.step();
  }
  const std::string path = dir.file("ours.safetensors");
  dp::save(model, path);
  const std::string script = std::string(DP_GOLDEN_DIR) + "/check_module_checkpoint.py";
  auto [rc, out] = test::run_command(std::string(python) + " '" + script + "' '" + path + "'");
  if (rc != 0 && out.find("No module named 'torch'") != std::string::npos) GTEST_SKIP() << "PyTorch is not importable: " << out;
  ASSERT_EQ(rc, 0) << out;
  const json result = json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1));
  // The script's input: arange(12).reshape(2, 6) / 10 - 0.3.
  Tensor x = arange(12, kFloat32).reshape({2, 6}).div(10.0).sub(0.3);
  EXPECT_TRUE(test::all_close(model(x).detach(), result.at("output"), 1e-5, 1e-6)) << out;

  // The check is not vacuous: a checkpoint with a renamed key fails PyTorch's strict load.
  nn::TensorDict renamed;
  for (const auto& item : model->state_dict()) renamed.insert(item.key() == "2.bias" ? std::string("2.b") : item.key(), item.value());
  save(renamed, dir.file("renamed.safetensors"), {{"format", "pt"}});
  auto [rc2, out2] = test::run_command(std::string(python) + " '" + script + "' '" + dir.file("renamed.safetensors") + "'");
  EXPECT_NE(rc2, 0) << out2;
  EXPECT_NE(out2.find("2.bias"), std::string::npos) << out2;
}

TEST(ModuleCheckpoint, MismatchedCheckpointsNameEveryProblemAndChangeNothing) {
  test::TempDir dir;
  nn::Sequential small(nn::Linear(5, 2), nn::ReLU(), nn::Linear(2, 1));
  const std::string path = dir.file("small.safetensors");
  dp::save(small, path);

  // Other shapes: every mismatching tensor is named with both shapes, and the file is named.
  nn::Sequential wider(nn::Linear(5, 3), nn::ReLU(), nn::Linear(3, 1));
  const nn::TensorDict wider_before = snapshot(*wider);
  std::string msg =
      expect_error<ValueError>([&] { dp::load(wider, path); },
                               {"size mismatch for 0.weight: copying a param with shape [2, 5] from checkpoint, the shape in current model is [3, 5]",
                                "size mismatch for 0.bias", "size mismatch for 2.weight", path});
  EXPECT_EQ(msg.find("2.bias"), std::string::npos) << "2.bias matches and must not be reported: " << msg;
  EXPECT_TRUE(same_state(snapshot(*wider), wider_before)) << "a failed load must not change the model";

  // Another structure: missing and unexpected keys by name (strict), or returned (non-strict).
  nn::Sequential deeper(nn::Linear(5, 2), nn::ReLU(), nn::Linear(2, 1), nn::Linear(1, 1));
  const nn::TensorDict deeper_before = snapshot(*deeper);
  expect_error<ValueError>([&] { dp::load(deeper, path); }, {"Missing key(s) in state_dict: \"3.weight\", \"3.bias\"", path});
  EXPECT_TRUE(same_state(snapshot(*deeper), deeper_before));
  nn::LoadResult r = dp::load(deeper, path, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"3.weight", "3.bias"}));
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(dp::equal(deeper->ptr<nn::LinearImpl>(0)->weight, small->ptr<nn::LinearImpl>(0)->weight));
  EXPECT_TRUE(dp::equal(deeper->ptr<nn::LinearImpl>(3)->weight, deeper_before["3.weight"]));

  nn::Sequential shallow(nn::Linear(5, 2));
  // (Unexpected keys come in the file's order, which the safetensors writer sorts by dtype and name.)
  expect_error<ValueError>([&] { dp::load(shallow, path); }, {"Unexpected key(s) in state_dict: \"2.bias\", \"2.weight\"", path});
  r = dp::load(shallow, path, /*strict=*/false);
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"2.bias", "2.weight"}));

  // A checkpoint of a DataParallel-wrapped PyTorch model ("module." before every key) loads.
  nn::TensorDict prefixed;
  for (const auto& item : small->state_dict()) prefixed.insert("module." + item.key(), item.value());
  save(prefixed, dir.file("prefixed.safetensors"));
  nn::Sequential target(nn::Linear(5, 2), nn::ReLU(), nn::Linear(2, 1));
  dp::load(target, dir.file("prefixed.safetensors"));
  EXPECT_TRUE(same_state(snapshot(*target), snapshot(*small)));

  // A file that does not exist.
  expect_error<IOError>([&] { dp::load(target, dir.file("absent.safetensors")); }, {dir.file("absent.safetensors")});
}

TEST(ModuleCheckpoint, TruncatedOrCorruptFilesFailClearlyAndChangeNothing) {
  test::TempDir dir;
  nn::Sequential model(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4));
  const std::string good = dir.file("good.safetensors");
  dp::save(model, good);
  const std::string bytes = test::read_bytes(good);
  const uint64_t header = test::header_length(bytes);
  ASSERT_LT(8 + header, bytes.size());

  nn::Sequential target(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4));
  const nn::TensorDict before = snapshot(*target);
  // Cut at every kind of place: nothing, inside the length field, inside the header, at the start
  // of the data, inside the data, one byte short.
  for (size_t cut :
       {size_t(0), size_t(5), size_t(8 + header / 2), size_t(8 + header), size_t(8 + header + 100), bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(cut) + " of " + std::to_string(bytes.size()) + " bytes");
    const std::string path = dir.file("cut" + std::to_string(cut) + ".safetensors");
    test::write_bytes(path, bytes.substr(0, cut));
    try {
      dp::load(target, path);
      ADD_FAILURE() << "a truncated file loaded";
    } catch (const Error& e) {  // IOError (shorter than announced) or ValueError (header cut off)
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos ||
                  msg.find("out of range") != std::string::npos)
          << msg;
    }
    EXPECT_TRUE(same_state(snapshot(*target), before));
  }

  // Corrupt headers: damaged JSON, a wrong dtype name, offsets that do not match the shape.
  std::string text = bytes.substr(8, header);
  auto with_header = [&](const std::string& h) {
    std::string out = bytes;
    out.replace(8, header, h);
    return out;
  };
  struct Corruption {
    std::string name, file, expect;
  };
  std::string bad_json = text;
  bad_json[bad_json.find(':')] = '#';
  std::string bad_dtype = text;
  bad_dtype.replace(bad_dtype.find("\"F32\""), 5, "\"X32\"");
  std::string bad_shape = text;
  const size_t shape_at = bad_shape.find("\"shape\":[32,16]");
  ASSERT_NE(shape_at, std::string::npos) << text;
  bad_shape.replace(shape_at, 15, "\"shape\":[16,16]");
  for (const Corruption& c : {Corruption{"json", with_header(bad_json), "JSON"}, Corruption{"dtype", with_header(bad_dtype), "X32"},
                              Corruption{"shape", with_header(bad_shape), "0.weight"}}) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file("corrupt_" + c.name + ".safetensors");
    test::write_bytes(path, c.file);
    std::string msg = expect_error<ValueError>([&] { dp::load(target, path); }, {path, c.expect});
    EXPECT_TRUE(same_state(snapshot(*target), before));
  }
}

// A save that fails part-way (an injected "No space left on device" after k bytes) leaves the
// previous checkpoint in place, byte for byte, and no temporary file.
TEST(ModuleCheckpoint, FailedSaveKeepsThePreviousCheckpoint) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  manual_seed(5);
  nn::Sequential model = make_model();
  dp::save(model, path);
  const std::string before = test::read_bytes(path);
  const nn::TensorDict saved = snapshot(*model);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.5));
  train(model, opt, 2, 9);
  ASSERT_FALSE(same_state(snapshot(*model), saved));
  for (int64_t k : {int64_t(0), int64_t(100), static_cast<int64_t>(before.size() / 2), static_cast<int64_t>(before.size()) - 1}) {
    SCOPED_TRACE("failing after " + std::to_string(k) + " bytes");
    detail::set_save_fault({k, 28 /* ENOSPC */, false});
    expect_error<IOError>([&] { dp::save(model, path); }, {path, "No space left on device"});
    detail::clear_save_fault();
    EXPECT_EQ(test::read_bytes(path), before);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
  }
  nn::Sequential restored = make_model();
  dp::load(restored, path);
  EXPECT_TRUE(same_state(snapshot(*restored), saved));
}

// A process killed (SIGKILL) while it saves checkpoints over and over never leaves a partial file
// at the checkpoint's path: whatever instant the kill lands, the file loads and is one complete
// version. (Killed mid-write, the hidden temporary file stays behind, as any crashed writer's
// would; the next save does not care.)
TEST(ModuleCheckpoint, KilledWhileSavingLeavesACompleteCheckpoint) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  // Big enough (16 MB) that most of the writer's time is spent inside save().
  const int64_t n = 4 * 1024 * 1024;
  nn::Sequential model(nn::Linear(1024, 4096), nn::Linear(4096, 1));
  auto set_version = [&](int v) {
    NoGradGuard g;
    for (Tensor& p : model->parameters()) p.fill_(static_cast<double>(v));
  };
  ASSERT_GE(model->ptr<nn::LinearImpl>(0)->weight.numel(), n);
  set_version(0);
  dp::save(model, path);
  // Whatever happens in the parent, the writer does not outlive the round.
  struct Reaper {
    pid_t pid = -1;
    ~Reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  };
  int interrupted = 0;
  for (int round = 0; round < 12; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    Reaper reaper;
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Two versions made up front, then saved in turn: the writer spends its time in save()
      // (filling 16 MB per save would take most of it under a sanitizer, and the kills would
      // land there instead).
      ::close(ready[0]);
      set_version(round * 1000 + 1);
      nn::Sequential other(nn::Linear(1024, 4096), nn::Linear(4096, 1));
      {
        NoGradGuard g;
        for (Tensor& p : other->parameters()) p.fill_(static_cast<double>(round * 1000 + 2));
      }
      for (int v = 1;; ++v) {
        if (v % 2)
          dp::save(model, path);
        else
          dp::save(other, path);
        if (v == 1 && ::write(ready[1], "x", 1) != 1) ::_exit(2);
      }
    }
    reaper.pid = pid;
    ::close(ready[1]);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the writer did not complete its first save";
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + 2731 * round % 20000));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    reaper.pid = -1;
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself (status " << status << ")";

    // The checkpoint loads, and all its values are one version's.
    nn::Sequential loaded(nn::Linear(1024, 4096), nn::Linear(4096, 1));
    ASSERT_NO_THROW(dp::load(loaded, path)) << "round " << round;
    const double v = loaded->ptr<nn::LinearImpl>(0)->weight.view({-1})[0].item<double>();
    EXPECT_GE(v, round * 1000 + 1);
    for (const auto& item : loaded->state_dict())
      EXPECT_TRUE(dp::equal(item.value(), full_like(item.value(), v))) << "round " << round << ": " << item.key() << " mixes versions";
    // Leftovers are only hidden temporary files of the killed writer; remove them for the next round.
    for (const std::string& e : dir.entries()) {
      if (e == "model.safetensors") continue;
      EXPECT_EQ(e.rfind(".model.safetensors.tmp.", 0), 0u) << e;
      fs::remove(dir.path / e);
      ++interrupted;
    }
  }
  // Evidence that kills did land inside save() (else the test would prove nothing).
  EXPECT_GT(interrupted, 0) << "no kill interrupted a save";
  std::printf("[ info ] %d of 12 kills interrupted a save mid-write\n", interrupted);
}

// ---------------------------------------------------------------- optimizers

// Trains `steps` more steps from a checkpoint in `dir` and returns the final state.
template <typename MakeOpt>
void check_resume(const MakeOpt& make_opt, const std::string& name) {
  test::TempDir dir;
  // Uninterrupted reference: 4 steps, checkpoint, 4 more.
  manual_seed(11);
  nn::Sequential model = make_model();
  auto opt = make_opt(model->parameters());
  train(model, *opt, 4, 21);
  dp::save(model, dir.file("model.safetensors"));
  dp::save(*opt, dir.file("optim.safetensors"));
  train(model, *opt, 4, 22);

  // Resumed: a fresh model and optimizer (other initial values, no state) load the checkpoints.
  manual_seed(12);
  nn::Sequential resumed = make_model();
  auto opt2 = make_opt(resumed->parameters());
  dp::load(resumed, dir.file("model.safetensors"));
  dp::load(*opt2, dir.file("optim.safetensors"));
  train(resumed, *opt2, 4, 22);
  EXPECT_TRUE(same_state(snapshot(*resumed), snapshot(*model))) << name << ": resumed training differs from uninterrupted training";

  SafetensorsFile f = load_file(dir.file("optim.safetensors"));
  EXPECT_EQ(f.metadata.at("optimizer"), name);
  EXPECT_TRUE(f.metadata.count("param_groups"));
}

TEST(OptimizerCheckpoint, SgdMomentumResumesExactly) {
  check_resume([](std::vector<Tensor> p) { return std::make_shared<optim::SGD>(std::move(p), optim::SGDOptions(0.1).momentum(0.9).nesterov(true)); },
               "SGD");
}

TEST(OptimizerCheckpoint, AdamResumesExactly) {
  check_resume([](std::vector<Tensor> p) { return std::make_shared<optim::Adam>(std::move(p), optim::AdamOptions(0.01).amsgrad(true)); }, "Adam");
}

TEST(OptimizerCheckpoint, AdamWWithGroupsResumesExactly) {
  check_resume(
      [](std::vector<Tensor> p) {
        std::vector<Tensor> first(p.begin(), p.begin() + 2), rest(p.begin() + 2, p.end());
        return std::make_shared<optim::AdamW>(
            std::vector<optim::OptimizerParamGroup>{optim::OptimizerParamGroup(first), optim::OptimizerParamGroup(rest, optim::AdamWOptions(0.003))},
            optim::AdamWOptions(0.01).weight_decay(0.1));
      },
      "AdamW");
}

TEST(OptimizerCheckpoint, SharedPtrOverloads) {
  test::TempDir dir;
  nn::Linear lin(3, 2);
  auto opt = std::make_shared<optim::Adam>(lin->parameters(), optim::AdamOptions(0.1));
  lin(ones({2, 3})).sum().backward();
  opt->step();
  dp::save(opt, dir.file("o.safetensors"));  // the optimizer overload, not the module one
  auto again = std::make_shared<optim::Adam>(lin->parameters(), optim::AdamOptions(0.5));
  dp::load(again, dir.file("o.safetensors"));  // the optimizer overload (the module one is constrained)
  EXPECT_EQ(again->get_lr(0), 0.1);
  EXPECT_EQ(again->state().size(), 2u);
}

TEST(OptimizerCheckpoint, WrongOrDamagedFilesFailClearlyAndChangeNothing) {
  test::TempDir dir;
  nn::Sequential model = make_model();
  auto params = model->parameters();
  optim::Adam adam(params, optim::AdamOptions(0.01));
  train(model, adam, 1, 3);
  dp::save(adam, dir.file("adam.safetensors"));
  dp::save(model, dir.file("model.safetensors"));

  optim::SGD sgd(params, optim::SGDOptions(0.2).momentum(0.9));
  train(model, sgd, 1, 4);
  optim::OptimizerState sgd_before = sgd.state_dict();
  const Tensor buf_before = sgd_before.tensors["state.0.momentum_buffer"].clone();
  auto unchanged = [&] {
    EXPECT_EQ(sgd.get_lr(0), 0.2);
    EXPECT_TRUE(dp::equal(sgd.state_dict().tensors["state.0.momentum_buffer"], buf_before));
  };
  expect_error<ValueError>([&] { dp::load(sgd, dir.file("adam.safetensors")); }, {"saved by Adam, not SGD", dir.file("adam.safetensors")});
  unchanged();
  expect_error<ValueError>([&] { dp::load(sgd, dir.file("model.safetensors")); }, {"no optimizer state", dir.file("model.safetensors")});
  unchanged();

  // An optimizer over fewer parameters.
  optim::Adam small(std::vector<Tensor>(params.begin(), params.begin() + 2), optim::AdamOptions(0.01));
  expect_error<ValueError>(
      [&] { dp::load(small, dir.file("adam.safetensors")); },
      {"param group 0 has " + std::to_string(params.size()) + " parameters in the loaded state but 2", dir.file("adam.safetensors")});

  // Truncated.
  const std::string bytes = test::read_bytes(dir.file("adam.safetensors"));
  test::write_bytes(dir.file("cut.safetensors"), bytes.substr(0, bytes.size() - 10));
  expect_error<IOError>([&] { dp::load(adam, dir.file("cut.safetensors")); }, {"truncated", dir.file("cut.safetensors")});
  expect_error<IOError>([&] { dp::load(adam, dir.file("absent.safetensors")); }, {dir.file("absent.safetensors")});
}

// The optimizer's groups are JSON in the file's metadata ("param_groups"): nested 100k levels deep
// (a recursive parser or printer would overflow the stack), or with a number past a double's range,
// they are a ValueError naming the file, and the optimizer is left as it was.
TEST(OptimizerCheckpoint, HostileParamGroupsJsonIsAValueErrorNotACrash) {
  test::TempDir dir;
  nn::Sequential model = make_model();
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.2).momentum(0.9));
  train(model, sgd, 1, 5);
  const std::string path = dir.file("sgd.safetensors");
  dp::save(sgd, path);
  const Tensor buf_before = sgd.state_dict().tensors["state.0.momentum_buffer"].clone();
  SafetensorsFile saved = load_file(path);
  ASSERT_EQ(saved.metadata.count("param_groups"), 1u);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string(100000, '['), "nests deeper than 64 levels"},
      {std::string(100000, '[') + std::string(100000, ']'), "nests deeper than 64 levels"},
      {std::string(50000, '{'), "is not valid JSON"},  // '{' must be followed by a key
      {"[{\"lr\":1e309,\"params\":[0]}]", "number overflow"},
  };
  for (const auto& [groups, expected] : cases) {
    std::map<std::string, std::string> meta = saved.metadata;
    meta["param_groups"] = groups;
    dp::save(saved.tensors, path, meta);
    const std::string msg = expect_error<ValueError>([&] { dp::load(sgd, path); }, {"SGD.load_state_dict", "param_groups", expected, path});
    EXPECT_LT(msg.size(), 1000u) << "the message must not carry the input";
    EXPECT_EQ(sgd.get_lr(0), 0.2);
    EXPECT_TRUE(dp::equal(sgd.state_dict().tensors["state.0.momentum_buffer"], buf_before));
  }
}

}  // namespace
}  // namespace dp
