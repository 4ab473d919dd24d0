// dp-train's command line: --help, and every kind of bad argument gives one clear message on
// stderr, nothing on stdout, exit status 2, and never a crash (abort, uncaught exception, signal).
#include <functional>
#include "dp/dp.h"
#include "tools/test_dp_train_util.h"

namespace {

using namespace dp_train_test;

TEST(DpTrainCli, HelpListsTheOptionsAndExitsZero) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--help"}, dir);
  EXPECT_EQ(r.status, 0) << describe(r);
  for (const char* option : {"--model", "--devices", "--parallel-loss", "--epochs", "--steps", "--batch-size", "--optimizer", "--resume",
                             "--checkpoint-dir", "--init", "--save", "--log", "--plot", "--workers", "--no-shuffle"})
    EXPECT_NE(r.out.find(option), std::string::npos) << option << " missing from --help\n" << r.out;
}

struct BadCase {
  const char* name;
  std::vector<std::string> args;  // "{dir}" is replaced by the test's temporary directory
  const char* expected;           // a part of the message
  std::function<void(const TempDir&)> prepare = nullptr;
};

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::vector<BadCase> bad_cases() {
  return {
      {"UnknownModel", {"--model", "resnet"}, "--model: 'resnet' is not one of seed, mlp, cnn, gpt, gru or lstm"},
      {"UnknownOption", {"--bogus"}, "--bogus"},
      {"MissingValue", {"--model"}, "--model"},
      {"UnknownData", {"--data", "imagenet"}, "--data: 'imagenet' is not one of random or fashion-mnist"},
      {"UnknownOptimizer", {"--optimizer", "lbfgs"}, "--optimizer: 'lbfgs' is not one of sgd, adam or adamw"},
      {"UnknownSchedule", {"--schedule", "step"}, "--schedule"},
      {"UnknownProgress", {"--progress", "fancy"}, "--progress"},
      {"CpuDeviceDoesNotExist", {"--model", "seed", "--devices", "cpu:0,cpu:999"}, "cpu:999 does not exist"},
      {"CudaDeviceDoesNotExist", {"--model", "seed", "--devices", "cuda:15,cuda:16"}, "cuda:15 does not exist"},
      {"HostIsNotADeviceId", {"--model", "seed", "--devices", "cpu"}, "is the host"},
      {"DuplicateDevice", {"--model", "seed", "--devices", "cpu:0,cpu:0"}, "cpu:0 is listed twice"},
      {"MalformedDevice", {"--model", "seed", "--devices", "gpu0"}, "'gpu0' is not a device"},
      {"EmptyDeviceEntry", {"--model", "seed", "--devices", "cpu:0,,cpu:1"}, "empty entry"},
      {"OutputDeviceDoesNotExist", {"--model", "seed", "--output-device", "cpu:999"}, "--output-device: cpu:999 does not exist"},
      {"MissingDataSet", {"--model", "mlp", "--data-dir", "{dir}/no-such-dir"}, "dataset-fashion-mnist"},
      {"DataSetDirWithoutFiles", {"--model", "mlp", "--data-dir", "{dir}"}, "does not exist"},
      {"InitFileMissing", {"--model", "seed", "--init", "{dir}/missing.safetensors"}, "--init {dir}/missing.safetensors"},
      {"InitFileNotSafetensors",
       {"--model", "seed", "--init", "{dir}/garbage.safetensors"},
       "--init {dir}/garbage.safetensors",
       [](const TempDir& d) { write_file(d.file("garbage.safetensors"), "this is not a safetensors file at all"); }},
      {"InitFileWrongKeys",
       {"--model", "seed", "--init", "{dir}/other.safetensors"},
       "Missing key(s) in state_dict: \"0.weight\", \"0.bias\"",
       [](const TempDir& d) {
         dp::OrderedDict<std::string, dp::Tensor> t;
         t.insert("fc.weight", dp::zeros({1, 5}));
         dp::save(t, d.file("other.safetensors"));
       }},
      {"InitFileWrongShape",
       {"--model", "seed", "--init", "{dir}/shape.safetensors"},
       "size mismatch for 0.weight",
       [](const TempDir& d) {
         dp::OrderedDict<std::string, dp::Tensor> t;
         t.insert("0.weight", dp::zeros({2, 5}));
         t.insert("0.bias", dp::zeros({1}));
         dp::save(t, d.file("shape.safetensors"));
       }},
      {"BatchSizeZero", {"--model", "seed", "--batch-size", "0"}, "--batch-size must be at least 1, got 0"},
      {"BatchSizeNotANumber", {"--model", "seed", "--batch-size", "many"}, "--batch-size"},
      {"StepsZero", {"--model", "seed", "--steps", "0"}, "--steps must be at least 1"},
      {"EpochsNegative", {"--model", "seed", "--epochs", "-3"}, "--epochs must be at least 1"},
      {"EpochsAndSteps", {"--model", "seed", "--epochs", "2", "--steps", "5"}, "give --epochs or --steps, not both"},
      {"HiddenZero", {"--model", "mlp", "--hidden", "0"}, "--hidden must be at least 1"},
      {"DataSizeZero", {"--model", "seed", "--data-size", "0"}, "--data-size must be at least 1"},
      {"NegativeLearningRate", {"--model", "seed", "--lr", "-0.1"}, "--lr must be a finite number >= 0"},
      {"NegativeWeightDecay", {"--model", "seed", "--weight-decay", "-1"}, "--weight-decay"},
      {"MomentumWithAdam", {"--model", "seed", "--optimizer", "adam", "--momentum", "0.9"}, "--momentum applies to --optimizer sgd only"},
      {"NegativeWorkers", {"--model", "seed", "--workers", "-1"}, "--workers must be at least 0"},
      {"SeedModelOnFashionMnist", {"--model", "seed", "--data", "fashion-mnist"}, "--model seed takes 5 features"},
      {"MinAccuracyOutOfRange", {"--model", "seed", "--min-accuracy", "1.5"}, "--min-accuracy must lie in [0, 1]"},
      {"InitAndResume", {"--model", "seed", "--init", "a", "--resume", "b"}, "--init and --resume"},
      {"ResumeDirMissing", {"--resume", "{dir}/nothing-here"}, "is not a directory"},
      {"ResumeDirWithoutCheckpoint", {"--resume", "{dir}"}, "no checkpoint in {dir}"},
      {"ResumeFromAPlainWeightsFile",
       {"--resume", "{dir}/ck"},
       "not a dp-train checkpoint",
       [](const TempDir& d) {
         std::filesystem::create_directories(d.file("ck"));
         dp::OrderedDict<std::string, dp::Tensor> t;
         t.insert("0.weight", dp::zeros({1, 5}));
         dp::save(t, d.file("ck/checkpoint.safetensors"));
       }},
      {"LogInMissingDirectory", {"--model", "seed", "--log", "{dir}/no/such/dir/log.jsonl"}, "--log: cannot open"},
  };
}

// gtest prints the case by name, not as bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class DpTrainBadArgument : public ::testing::TestWithParam<BadCase> {};

std::string substitute(std::string s, const std::string& dir) {
  for (size_t at; (at = s.find("{dir}")) != std::string::npos;) s.replace(at, 5, dir);
  return s;
}

TEST_P(DpTrainBadArgument, OneClearMessageAndExitStatus2) {
  DP_TRAIN_REQUIRE_BINARY();
  const BadCase& c = GetParam();
  TempDir dir;
  if (c.prepare) c.prepare(dir);
  std::vector<std::string> args;
  for (const auto& a : c.args) args.push_back(substitute(a, dir.path()));
  Result r = run(args, dir);
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(r.err.rfind("dp-train: error: ", 0), 0u) << describe(r);
  EXPECT_NE(r.err.find(substitute(c.expected, dir.path())), std::string::npos) << "expected '" << c.expected << "'\n" << describe(r);
  EXPECT_TRUE(r.out.empty()) << "a rejected command must not start training\n" << describe(r);
  // One message (a state_dict mismatch lists the keys on a few lines, as PyTorch does); no trace.
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 4) << describe(r);
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Cases, DpTrainBadArgument, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
