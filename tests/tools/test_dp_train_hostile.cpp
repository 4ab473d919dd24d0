// Hardening (docs/hardening.md), dp-train: absurd numeric options, tampered checkpoints (their
// metadata and the optimizer state in them), missing, misplaced or read-only output locations, and
// hostile weight files each end in one "dp-train: error: ..." line naming the option, file or field,
// with exit status 2, before the first step; never a signal. A stale temporary checkpoint file left
// by a killed writer is removed by the next checkpoint.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include "dp/core/serialize.h"
#include "test_dp_train_util.h"

namespace {

using namespace dp_train_test;
using nlohmann::json;

// A failed start: exit 2, one error line naming `expected`, nothing trained.
void expect_setup_error(const Result& r, const std::vector<std::string>& expected) {
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(r.err.rfind("dp-train: error: ", 0), 0u) << describe(r);
  for (const std::string& e : expected) EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "'\n" << describe(r);
  // Nothing trained: no step line (--progress lines) and no finished epoch (every progress mode).
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "nothing may be trained\n" << describe(r);
  EXPECT_EQ(r.out.find(" done: train loss"), std::string::npos) << "nothing may be trained\n" << describe(r);
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << describe(r);
  EXPECT_LT(r.err.size(), 2000u) << "the message must not carry the input\n" << describe(r);
}

const std::vector<std::string> kSeed{"--model", "seed", "--devices", "cpu:0", "--progress", "none"};

TEST(DpTrainHostile, EveryNumericOptionIsRangeChecked) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  const std::string max = "9223372036854775807";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "mlp", "--data", "random", "--hidden", max}, "--hidden must be at most 65536"},
      {{"--model", "seed", "--data-size", max}, "--data-size must be at most"},
      {{"--model", "seed", "--batch-size", max}, "--batch-size must be at most"},
      {{"--model", "seed", "--epochs", max}, "--epochs must be at most"},
      {{"--model", "seed", "--steps", max}, "--steps must be at most"},
      {{"--model", "seed", "--workers", max}, "--workers must be at most"},
      {{"--model", "seed", "--log-every", max}, "--log-every must be at most"},
      {{"--model", "seed", "--checkpoint-every", max}, "--checkpoint-every must be at most"},
      {{"--model", "seed", "--stop-after", max}, "--stop-after must be at most"},
      {{"--model", "seed", "--lr", "inf"}, "--lr must be a finite number"},
      {{"--model", "seed", "--data-size", "9223372036854775808"}, "--data-size"},  // past int64: CLI's conversion error
  };
  for (const auto& [args, expected] : cases) {
    Result r = run(args, dir);
    expect_setup_error(r, {expected});
  }
  // Every numeric option with NaN, infinities, a negative value and an absurd one. An integer
  // option refuses NaN, infinities and numbers past its type in the command line parser (the error
  // names the option); the rest is refused by the option's range.
  struct Case {
    std::string option, value, expected;
    std::vector<std::string> extra = {};
  };
  std::vector<Case> numeric;
  for (const char* option : {"--hidden", "--data-size", "--batch-size", "--epochs", "--steps", "--workers", "--log-every", "--checkpoint-every",
                             "--stop-after", "--seed"}) {
    const std::string o = option;
    for (const char* v : {"nan", "inf", "-inf", "99999999999999999999999"}) numeric.push_back({o, v, o});
  }
  for (const auto& [option, least] : std::vector<std::pair<std::string, int>>{{"--hidden", 1},
                                                                              {"--data-size", 1},
                                                                              {"--batch-size", 1},
                                                                              {"--epochs", 1},
                                                                              {"--steps", 1},
                                                                              {"--workers", 0},
                                                                              {"--log-every", 1},
                                                                              {"--checkpoint-every", 0},
                                                                              {"--stop-after", 0}})
    numeric.push_back({option, "-5", option + " must be at least " + std::to_string(least) + ", got -5"});
  numeric.push_back({"--seed", "-5", "--seed: must be an integer from 0 to 18446744073709551615, got -5"});
  for (const char* option : {"--lr", "--momentum", "--weight-decay"}) {
    const std::string o = option;
    for (const char* v : {"nan", "inf", "-inf", "-0.5", "-1e-300", "1e999"})
      numeric.push_back({o, v, o + " must be a finite number >= 0, got ", {"--optimizer", "sgd"}});
  }
  for (const char* v : {"nan", "inf", "-0.5", "1.5", "1e999"}) numeric.push_back({"--min-accuracy", v, "--min-accuracy must lie in [0, 1], got "});
  for (const Case& c : numeric) {
    Result r = run(concat(concat({"--model", "seed"}, c.extra), {c.option, c.value}), dir);
    SCOPED_TRACE(c.option + " " + c.value);
    expect_setup_error(r, {c.expected});
  }
}

TEST(DpTrainHostile, DataDirLongerThanAPathIsRefused) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  const std::string long_dir = "/" + std::string(5000, 'd');
  expect_setup_error(run({"--model", "mlp", "--data-dir", long_dir, "--steps", "1"}, dir),
                     {"--data-dir is 5001 bytes long, longer than a path can be (4096)"});
}

// A checkpoint of a short seed run (stopped after 2 of 8 steps), then its "dp_train" metadata
// changed by `tamper` and written back.
class TamperedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kBinary == nullptr) GTEST_SKIP() << "dp-train is not built";
    ck_ = dir_.file("ck");
    Result r = run(concat(kSeed, {"--data-size", "60", "--batch-size", "15", "--epochs", "2", "--stop-after", "2", "--checkpoint-dir", ck_}), dir_);
    ASSERT_EQ(r.status, 0) << describe(r);
    path_ = ck_ + "/checkpoint.safetensors";
    original_ = dp::load_file(path_);
  }
  // Rewrites the checkpoint with its metadata changed.
  void tamper(const std::function<void(json&)>& change) {
    tamper_text([&](std::string& text) {
      json m = json::parse(text);
      change(m);
      text = m.dump();
    });
  }
  void tamper_text(const std::function<void(std::string&)>& change) {
    std::map<std::string, std::string> meta = original_.metadata;
    change(meta["dp_train"]);
    dp::save(original_.tensors, path_, meta);
  }
  Result resume() { return run(concat({"--resume", ck_, "--devices", "cpu:0", "--progress", "none"}, {}), dir_, "resume"); }

  TempDir dir_;
  std::string ck_, path_;
  dp::SafetensorsFile original_;
};

TEST_F(TamperedCheckpoint, UntouchedCheckpointResumes) {
  Result r = resume();
  EXPECT_EQ(r.status, 0) << describe(r);
}

TEST_F(TamperedCheckpoint, SettingsFollowTheCommandLinesRules) {
  tamper([](json& m) { m["settings"]["batch-size"] = 0; });
  expect_setup_error(resume(), {path_, "\"settings\"", "--batch-size must be at least 1, got 0"});
  tamper([](json& m) { m["settings"]["data-size"] = 0; });
  expect_setup_error(resume(), {"--data-size must be at least 1, got 0"});
  tamper([](json& m) { m["settings"]["epochs"] = INT64_MAX; });
  expect_setup_error(resume(), {"--epochs must be at most"});
  tamper([](json& m) { m["settings"]["steps"] = 5; });
  expect_setup_error(resume(), {"give --epochs or --steps, not both"});
  tamper([](json& m) { m["settings"]["optimizer"] = "lamb"; });
  expect_setup_error(resume(), {"--optimizer: 'lamb' is not one of sgd, adam or adamw"});
  tamper([](json& m) { m["settings"]["hidden"] = "wide"; });
  expect_setup_error(resume(), {"\"settings.hidden\" must be an integer, got a string"});
  tamper([](json& m) { m["settings"].erase("seed"); });
  expect_setup_error(resume(), {"\"settings.seed\" is missing"});
}

TEST_F(TamperedCheckpoint, HistoryMustMatchTheSteps) {
  tamper([](json& m) { m["history"]["step_loss"] = json::array(); });
  expect_setup_error(resume(), {"\"history.step_loss\" has 0 entries but \"position.global_step\" is 2"});
  tamper([](json& m) { m["history"]["step_loss"] = json::array({0.5}); });
  expect_setup_error(resume(), {"\"history.step_loss\" has 1 entries"});
  tamper([](json& m) { m["history"]["step_loss"][0] = "x"; });
  expect_setup_error(resume(), {"\"history.step_loss[0]\" must be a number"});
  tamper([](json& m) { m["history"]["epoch_seconds"] = json::array({1.0, 2.0}); });
  expect_setup_error(resume(), {"\"history.epoch_seconds\" has 2 entries"});
}

TEST_F(TamperedCheckpoint, PositionMustBeInTheRun) {
  tamper([](json& m) { m["position"]["batch"] = 7; });
  expect_setup_error(resume(), {"\"position.batch\" is 7 but an epoch of this run has 4 batches"});
  tamper([](json& m) {
    m["position"]["epoch"] = 1;
    m["history"]["epoch_seconds"] = json::array({1.0});
  });
  expect_setup_error(resume(), {"\"position\" is inconsistent"});
  tamper([](json& m) { m["position"]["global_step"] = -1; });
  expect_setup_error(resume(), {"\"position.global_step\" must be at least 0"});
}

TEST_F(TamperedCheckpoint, GeneratorStatesMustBeWellFormed) {
  tamper([](json& m) { m["generators"] = json::array({{{"device", "cpu"}, {"seed", -1}, {"offset", 0}}}); });
  expect_setup_error(resume(), {"\"generators[0].seed\" must be an integer >= 0"});
  tamper([](json& m) { m["generators"] = json::array({{{"device", "toaster"}, {"seed", 1}, {"offset", 0}}}); });
  expect_setup_error(resume(), {"\"generators[0].device\" is not a device name"});
  tamper([](json& m) { m["generators"] = json::array(); });
  expect_setup_error(resume(), {"\"generators\" must be a non-empty list"});
  tamper([](json& m) { m["generators"][0].erase("offset"); });
  expect_setup_error(resume(), {"\"generators[0].offset\" is missing"});
}

TEST_F(TamperedCheckpoint, HostileJson) {
  tamper_text([](std::string& t) { t = std::string(100000, '['); });
  expect_setup_error(resume(), {path_, "nests deeper than 64 levels"});
  tamper_text([](std::string& t) { t = "{\"version\":1e309}"; });
  expect_setup_error(resume(), {path_, "not valid JSON"});
  tamper_text([](std::string& t) { t = "{\"version\":2}"; });
  expect_setup_error(resume(), {"checkpoint format version 2"});
}

// The optimizer's state is saved in the checkpoint too: its groups as JSON in the metadata entry
// "optimizer.param_groups", read by the library's Optimizer::load_state_dict.
TEST_F(TamperedCheckpoint, HostileOptimizerStateJsonIsAnErrorNotACrash) {
  ASSERT_EQ(original_.metadata.count("optimizer.param_groups"), 1u);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string(100000, '['), "nests deeper than 64 levels"},
      {std::string(100000, '[') + std::string(100000, ']'), "nests deeper than 64 levels"},
      {"[{\"lr\":1e309,\"params\":[0,1]}]", "number overflow"},
  };
  for (const auto& [groups, expected] : cases) {
    std::map<std::string, std::string> meta = original_.metadata;
    meta["optimizer.param_groups"] = groups;
    dp::save(original_.tensors, path_, meta);
    expect_setup_error(resume(), {"--resume " + ck_, "load_state_dict", "param_groups", expected});
  }
}

// Free text of the metadata never reaches a message unbounded: a 1 MB --data-dir (which the
// Fashion-MNIST loader would name in its error), device name or optimizer name.
TEST_F(TamperedCheckpoint, LongStringsAreRefusedWithoutBeingQuoted) {
  const std::string huge(1 << 20, 'd');
  tamper([&](json& m) {
    m["settings"]["model"] = "mlp";
    m["settings"]["data"] = "fashion-mnist";
    m["settings"]["data-dir"] = "/nonexistent/" + huge;
  });
  expect_setup_error(resume(), {path_, "\"settings.data-dir\" is 1048589 bytes long"});
  tamper([&](json& m) { m["generators"][0]["device"] = huge; });
  expect_setup_error(resume(), {path_, "\"generators[0].device\" is 1048576 bytes long"});
  tamper([&](json& m) { m["settings"]["optimizer"] = huge; });
  expect_setup_error(resume(), {path_, "\"settings.optimizer\" is 1048576 bytes long"});
  // At the limit (4096 bytes, a path's): read, and refused by the rule of its field, quoted clipped.
  tamper([&](json& m) { m["settings"]["optimizer"] = std::string(4096, 'o'); });
  expect_setup_error(resume(), {path_, "--optimizer: 'ooo", "(4096 bytes)' is not one of sgd, adam or adamw"});
}

TEST_F(TamperedCheckpoint, DeeplyNestedHeaderIsAnErrorNotACrash) {
  // The safetensors header itself nested 160 KB deep (the safetensors reader's hostile file), for --resume and --init.
  const std::string deep(160000, '[');
  std::string bytes(8, '\0');
  const uint64_t n = deep.size() + 5;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  bytes += "{\"a\":" + deep;
  std::ofstream(path_, std::ios::binary) << bytes;
  expect_setup_error(resume(), {path_, "nests deeper than 128 levels"});
  Result r = run(concat(kSeed, {"--init", path_}), dir_, "init");
  expect_setup_error(r, {"--init", path_, "nests deeper than 128 levels"});
}

TEST_F(TamperedCheckpoint, StaleTemporaryOfAKilledWriterIsRemovedByTheNextCheckpoint) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = ck_ + "/.checkpoint.safetensors.tmp." + dp::detail::temp_file_host_tag() + "-" + std::to_string(dead) + ".0.0badf00d";
  std::ofstream(stale) << "partial";
  Result r = run({"--resume", ck_, "--devices", "cpu:0", "--progress", "none", "--stop-after", "1"}, dir_, "resume");
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(std::filesystem::exists(stale)) << "the stale temporary file should have been removed";
  EXPECT_TRUE(std::filesystem::exists(path_));
}

TEST(DpTrainHostile, OutputPathsAreCheckedBeforeTheFirstStep) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  std::ofstream(dir.file("plain")) << "x";
  const std::string missing = dir.file("no/such/dir/w.safetensors");
  expect_setup_error(run(concat(kSeed, {"--save", missing}), dir), {"--save " + missing, "cannot write there", "No such file or directory"});
  const std::string plot = dir.file("no/such/dir/p.svg");
  expect_setup_error(run(concat(kSeed, {"--plot", plot}), dir), {"--plot " + plot, "cannot write there"});
  const std::string ck = dir.file("plain/ck");
  expect_setup_error(run(concat(kSeed, {"--checkpoint-dir", ck}), dir), {"--checkpoint-dir " + ck, "cannot create the directory"});
  expect_setup_error(run(concat(kSeed, {"--save", dir.path()}), dir), {"--save " + dir.path(), "is a directory"});
  // Nothing is left behind by the probes.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  EXPECT_EQ(std::count_if(left.begin(), left.end(), [](const std::string& n) { return n.find("probe") != std::string::npos; }), 0);
}

// The same outputs in a directory the user may not write to (mode 0555). Root writes anywhere, so as
// root dp-train runs as the unprivileged user nobody (run_unprivileged).
TEST(DpTrainHostile, OutputPathsInAReadOnlyDirectoryFailBeforeTheFirstStep) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // nobody may enter it
  const std::string ro = dir.file("ro"), rw = dir.file("rw");
  std::filesystem::create_directory(ro);
  std::filesystem::create_directory(rw);
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(rw.c_str(), 0777), 0);
  // The same user can run dp-train and write a file where it may: the failures below are the
  // read-only directory's.
  const std::string ok = rw + "/w.safetensors";
  Result control = run_unprivileged(concat(kSeed, {"--epochs", "1", "--save", ok}), dir, "control");
  if (control.status == dp::test::kCannotDropPrivileges) GTEST_SKIP() << "cannot drop root privileges to test a read-only directory: " << control.err;
  ASSERT_EQ(control.status, 0) << describe(control);
  EXPECT_TRUE(std::filesystem::exists(ok));

  const std::string save = ro + "/w.safetensors", plot = ro + "/p.svg", ck = ro + "/ck";
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--save", save}, {"--save " + save, "cannot write there", "cannot create a file in " + ro, "Permission denied"}},
      {{"--plot", plot}, {"--plot " + plot, "cannot write there", "cannot create a file in " + ro, "Permission denied"}},
      {{"--checkpoint-dir", ck}, {"--checkpoint-dir " + ck, "cannot create the directory", "Permission denied"}},
      {{"--checkpoint-dir", ro}, {"--checkpoint-dir " + ro, "cannot write there", "Permission denied"}},  // exists, read-only
  };
  for (const auto& [args, expected] : cases) {
    // With a step line each step: a run that reached training would show it.
    Result r = run_unprivileged(concat(kSeed, concat({"--epochs", "100", "--progress", "lines"}, args)), dir);
    expect_setup_error(r, expected);
  }
  EXPECT_TRUE(std::filesystem::is_empty(ro)) << "nothing may be written into the read-only directory";
  ::chmod(ro.c_str(), 0755);
}

TEST(DpTrainHostile, EmptyFashionMnistDirectoryIsAnError) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  // Valid IDX files with 0 samples (uncompressed).
  std::string labels("\0\0\x08\x01\0\0\0\0", 8), images("\0\0\x08\x03\0\0\0\0\0\0\0\x1c\0\0\0\x1c", 16);
  for (const char* split : {"train", "t10k"}) {
    std::ofstream(dir.file(std::string(split) + "-labels-idx1-ubyte"), std::ios::binary) << labels;
    std::ofstream(dir.file(std::string(split) + "-images-idx3-ubyte"), std::ios::binary) << images;
  }
  Result r = run({"--model", "mlp", "--hidden", "8", "--devices", "cpu:0", "--data-dir", dir.path(), "--steps", "1"}, dir);
  expect_setup_error(r, {"--data-dir", "0 labels"});
}

}  // namespace
