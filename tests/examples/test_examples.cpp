// Runs the example programs (built in DP_EXAMPLES_DIR) and checks what they print: the PyTorch
// DataParallel tutorial's lines, the one-device variant, and that the training examples converge,
// keep PyTorch-compatible keys and give the gradients of a plain model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "dp/distributed/store.h"
#include "dp/dp.h"

namespace {

struct ProgramRun {
  int status = -1;  // exit status, -1 if the program did not exit normally
  std::string out;  // stdout
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
  }
};

#ifdef DP_EXAMPLES_DIR
std::string example(const std::string& name) { return std::string(DP_EXAMPLES_DIR) + "/" + name; }

// Runs an example with arguments; stderr goes to the test's stderr (shown by ctest on failure). The
// `timeout` keeps a hung program (a deadlock between replicas) from hanging the suite.
ProgramRun run(const std::string& name, const std::string& args) {
  ProgramRun r;
  const std::string cmd = "timeout 120 " + example(name) + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t k; (k = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), k);
  const int rc = pclose(p);
  ::unsetenv("DP_STORE_TOKEN");
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return r;
}
#endif

class Examples : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DP_EXAMPLES_DIR
    GTEST_SKIP() << "examples are not built (DP_BUILD_EXAMPLES=OFF)";
#else
    for (const char* name : {"seed_tutorial", "seed_training", "middle_block_parallel", "embedding_on_host"})
      ASSERT_TRUE(std::filesystem::exists(example(name))) << example(name) << " is missing: build the examples";
#endif
  }
};

#ifdef DP_EXAMPLES_DIR

using Batch = std::vector<std::string>;  // a batch's "In Model" lines, sorted, then its "Outside" line

// Splits the tutorial's output into batches: the "In Model" lines before each "Outside" line. The
// replicas print from parallel threads, so their order within a batch is free: each batch's In Model
// lines are compared as a multiset (sorted).
std::vector<Batch> batches(const std::vector<std::string>& lines, size_t first) {
  std::vector<Batch> out;
  Batch current;
  for (size_t i = first; i < lines.size(); ++i) {
    if (lines[i].rfind("Outside:", 0) == 0) {
      std::sort(current.begin(), current.end());
      current.push_back(lines[i]);
      out.push_back(current);
      current.clear();
    } else {
      current.push_back(lines[i]);
    }
  }
  if (!current.empty()) out.push_back(current);  // lines after the last Outside: a failure below
  return out;
}

std::string in_model(int rows) { return "\tIn Model: input size [" + std::to_string(rows) + ", 5] output size [" + std::to_string(rows) + ", 2]"; }
std::string outside(int rows) { return "Outside: input size [" + std::to_string(rows) + ", 5] output_size [" + std::to_string(rows) + ", 2]"; }
// One batch of `rows` split into the given per-replica sizes.
Batch batch(int rows, std::vector<int> chunks) {
  Batch b;
  for (int c : chunks) b.push_back(in_model(c));
  std::sort(b.begin(), b.end());
  b.push_back(outside(rows));
  return b;
}

// PyTorch's tutorial output with 2 GPUs: 100 rows in batches of 30, each split 15/15, the last 5/5.
std::vector<Batch> tutorial_two_devices() { return {batch(30, {15, 15}), batch(30, {15, 15}), batch(30, {15, 15}), batch(10, {5, 5})}; }

TEST_F(Examples, TutorialTwoDevicesPrintsPyTorchsLines) {
  // Several runs: the replica threads' order varies between runs, the lines must not.
  for (int attempt = 0; attempt < 3; ++attempt) {
    ProgramRun r = run("seed_tutorial", "--devices cpu:0,cpu:1");
    ASSERT_EQ(r.status, 0) << r.out;
    auto lines = r.lines();
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0], "Let's use 2 devices!");
    EXPECT_EQ(batches(lines, 1), tutorial_two_devices()) << r.out;
  }
}

TEST_F(Examples, TutorialDefaultDevices) {
  ProgramRun r = run("seed_tutorial", "");
  ASSERT_EQ(r.status, 0) << r.out;
  auto lines = r.lines();
  ASSERT_FALSE(lines.empty());
  if (dp::cuda_device_count() == 0) {
    // No CUDA device: the default is cpu:0,cpu:1, so the output is the two-device tutorial's.
    EXPECT_EQ(lines[0], "Let's use 2 devices!");
    EXPECT_EQ(batches(lines, 1), tutorial_two_devices()) << r.out;
  } else if (dp::cuda_device_count() > 1) {
    EXPECT_EQ(lines[0], "Let's use " + std::to_string(dp::cuda_device_count()) + " GPUs!");
  }
}

TEST_F(Examples, TutorialOneDeviceCallsTheModuleOnWholeBatches) {
  ProgramRun r = run("seed_tutorial", "--devices cpu:0");
  ASSERT_EQ(r.status, 0) << r.out;
  auto lines = r.lines();
  // No "Let's use" line (the tutorial prints it only for several GPUs), whole batches in the model.
  EXPECT_EQ(batches(lines, 0), (std::vector<Batch>{batch(30, {30}), batch(30, {30}), batch(30, {30}), batch(10, {10})})) << r.out;
}

TEST_F(Examples, TutorialFourDevicesFollowsTorchChunk) {
  // torch.chunk: 30 rows on 4 devices -> 8,8,8,6; 10 rows -> 3,3,3,1 (ceil(B / n) per chunk).
  ProgramRun r = run("seed_tutorial", "--devices cpu:0,cpu:1,cpu:2,cpu:3");
  ASSERT_EQ(r.status, 0) << r.out;
  auto lines = r.lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "Let's use 4 devices!");
  EXPECT_EQ(batches(lines, 1),
            (std::vector<Batch>{batch(30, {8, 8, 8, 6}), batch(30, {8, 8, 8, 6}), batch(30, {8, 8, 8, 6}), batch(10, {3, 3, 3, 1})}))
      << r.out;
}

TEST_F(Examples, HelpStatesTheDefaultDevices) {
  for (const char* name : {"seed_tutorial", "seed_training", "middle_block_parallel", "embedding_on_host"}) {
    ProgramRun r = run(name, "--help");
    EXPECT_EQ(r.status, 0) << name;
    EXPECT_NE(r.out.find("--devices LIST"), std::string::npos) << name << ": " << r.out;
    EXPECT_NE(r.out.find("default: every CUDA device if there is one, else cpu:0,cpu:1"), std::string::npos) << name << ": " << r.out;
  }
}

TEST_F(Examples, BadDeviceListIsAnError) {
  ProgramRun host = run("seed_tutorial", "--devices cpu 2>/dev/null");
  EXPECT_EQ(host.status, 2);
  ProgramRun garbage = run("seed_training", "--devices gpu:0 2>/dev/null");
  EXPECT_EQ(garbage.status, 2);
}

// "loss A -> B" from seed_training's last line.
std::pair<double, double> losses(const ProgramRun& r) {
  static const std::regex re(R"(loss ([0-9.]+) -> ([0-9.]+), training accuracy ([0-9.]+))");
  std::smatch m;
  for (const std::string& line : r.lines())
    if (std::regex_search(line, m, re)) return {std::stod(m[1]), std::stod(m[2])};
  ADD_FAILURE() << "no final loss line in:\n" << r.out;
  return {0, 0};
}

TEST_F(Examples, SeedTrainingOnTwoDevicesMatchesOneDevice) {
  // The same seed gives the same batches and weights, and DataParallel's gradient is the full-batch
  // gradient, so the losses agree with the one-device run up to float rounding.
  ProgramRun one = run("seed_training", "--devices cpu:0 --epochs 100");
  ProgramRun two = run("seed_training", "--devices cpu:0,cpu:1 --epochs 100");
  ProgramRun replicas = run("seed_training", "--devices cpu:0,cpu:1 --epochs 100 --loss-on-replicas");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(two.status, 0) << two.out;
  ASSERT_EQ(replicas.status, 0) << replicas.out;
  EXPECT_NE(two.out.find("training on cpu:0,cpu:1 (each batch split over the devices), loss on cpu:0"), std::string::npos) << two.out;
  EXPECT_NE(replicas.out.find("loss on the replicas"), std::string::npos) << replicas.out;
  auto [first1, last1] = losses(one);
  auto [first2, last2] = losses(two);
  auto [first3, last3] = losses(replicas);
  EXPECT_LT(last2, first2);
  EXPECT_NEAR(first2, first1, 1e-4);
  EXPECT_NEAR(last2, last1, 1e-4);
  EXPECT_NEAR(first3, first1, 1e-4);
  EXPECT_NEAR(last3, last1, 1e-4);
}

TEST_F(Examples, MiddleBlockKeepsKeysAndGradients) {
  ProgramRun r = run("middle_block_parallel", "--devices cpu:0,cpu:1 --steps 5");
  ASSERT_EQ(r.status, 0) << r.out;
  // The printed tree is PyTorch's, the keys are the bare model's (no "block2.module." infix).
  EXPECT_NE(r.out.find("  (block2): DataParallel(\n    (module): Linear(in_features=20, out_features=20, bias=True)\n  )"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("state_dict keys: block1.weight block1.bias block2.weight block2.bias block3.weight block3.bias\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("block2 runs on cpu:0,cpu:1\n"), std::string::npos) << r.out;
  // Every step's largest gradient difference to the plain copy, read back, is float rounding.
  static const std::regex step_re(R"(step (\d+)  loss ([0-9.]+) \(plain ([0-9.]+)\)  max gradient difference ([0-9.e+-]+))");
  int steps = 0;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (!std::regex_search(line, m, step_re)) continue;
    ++steps;
    EXPECT_NEAR(std::stod(m[2]), std::stod(m[3]), 1e-5) << line;
    EXPECT_LE(std::stod(m[4]), 1e-5) << line;
  }
  EXPECT_EQ(steps, 5) << r.out;
  EXPECT_NE(r.out.find("gradients match"), std::string::npos) << r.out;
}

TEST_F(Examples, MiddleBlockOnOneDevice) {
  ProgramRun r = run("middle_block_parallel", "--devices cpu:1 --steps 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("block2 runs on cpu:1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradients match"), std::string::npos) << r.out;
}

TEST_F(Examples, EmbeddingOnHostFeedsAnotherDevice) {
  ProgramRun r = run("embedding_on_host", "--devices cpu:1 --steps 30");
  ASSERT_EQ(r.status, 0) << r.out;
  // Forgetting the transfer is caught, naming both devices.
  EXPECT_NE(r.out.find("without .to(cpu:1): DeviceError: linear: expected all tensors to be on the same device"), std::string::npos) << r.out;
  // Each parameter and its gradient stay where the layer lives; the host embedding got its gradient
  // back through the differentiable .to().
  EXPECT_NE(r.out.find("embedding.weight on cpu    grad on cpu\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fc.weight        on cpu:1  grad on cpu:1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fc.bias          on cpu:1  grad on cpu:1\n"), std::string::npos) << r.out;
  static const std::regex re(R"(loss ([0-9.]+) -> ([0-9.]+): loss went down)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, re)) << r.out;
  // 30 Adam steps on 1000 tokens x 10 classes: from chance (ln 10 = 2.30) to well below it.
  EXPECT_GT(std::stod(m[1]), 2.0);
  EXPECT_LT(std::stod(m[2]), 1.5);
}

// ddp_train as two processes (the docs' two-command example, with the store hosted here so the port
// is free): both ranks end on the same weights, the global batches are the one-process run's, so
// the losses and accuracies agree with it, and the collective checkpoint is written once.
ProgramRun run_ranks(int world, const std::string& args) {
  // The store's token reaches the ranks through the environment they inherit (not the command line).
  const std::string token = dp::distributed::generate_store_token();
  dp::distributed::TCPStoreServerOptions so;
  so.token = token;
  dp::distributed::TCPStoreServer store("127.0.0.1", 0, so);
  ::setenv("DP_STORE_TOKEN", token.c_str(), 1);
  std::string cmd;
  const std::string env =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(store.port()) + " DP_STORE_HOSTED=1 WORLD_SIZE=" + std::to_string(world) + " ";
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (int r = 1; r < world; ++r)
    cmd += "(" + env + "RANK=" + std::to_string(r) + " timeout 120 " + example("ddp_train") + " " + args + " > " + dir + "/ddp_train_rank" +
           std::to_string(r) + ".log 2>&1) & ";
  cmd += env + "RANK=0 timeout 120 " + example("ddp_train") + " " + args + "; s=$?; wait; ";
  for (int r = 1; r < world; ++r) cmd += "cat " + dir + "/ddp_train_rank" + std::to_string(r) + ".log; ";
  cmd += "exit $s";
  ProgramRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t k; (k = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), k);
  const int rc = pclose(p);
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return r;
}

std::vector<std::string> matching(const ProgramRun& r, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : r.lines())
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

TEST_F(Examples, DdpTrainTwoProcessesMatchOneProcess) {
  const std::string args = "--lr 0.01 --epochs 2 --print-params";
  ProgramRun one = run_ranks(1, args);
  ASSERT_EQ(one.status, 0) << one.out;
  const std::string ckpt = (std::filesystem::temp_directory_path() / "ddp_train_example.safetensors").string();
  std::filesystem::remove(ckpt);
  ProgramRun two = run_ranks(2, args + " --save " + ckpt);
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_EQ(matching(two, "epoch "), matching(one, "epoch ")) << "one process:\n" << one.out << "two:\n" << two.out;
  ASSERT_EQ(matching(two, "epoch ").size(), 2u) << two.out;
  std::vector<std::string> hashes = matching(two, "rank ");
  ASSERT_EQ(hashes.size(), 2u) << two.out;
  EXPECT_EQ(hashes[0].substr(hashes[0].find("hash")), hashes[1].substr(hashes[1].find("hash"))) << two.out;
  EXPECT_TRUE(std::filesystem::exists(ckpt));
  EXPECT_EQ(dp::load(ckpt).size(), 4u);  // two Linear layers' weights and biases
  // The hybrid: DataParallel over two CPU devices inside each of the two processes.
  ProgramRun hybrid = run_ranks(2, args + " --devices cpu:0,cpu:1");
  ASSERT_EQ(hybrid.status, 0) << hybrid.out;
  EXPECT_EQ(matching(hybrid, "epoch "), matching(one, "epoch ")) << hybrid.out;
  static const std::regex acc(R"(epoch 2  train loss [0-9.]+  test accuracy ([0-9.]+))");
  std::smatch m;
  const std::string last = matching(two, "epoch 2").at(0);
  ASSERT_TRUE(std::regex_search(last, m, acc)) << last;
  EXPECT_GT(std::stod(m[1]), 0.9);
}

// ---- Sequence models: examples/gpt.cpp and examples/rnn_packed.cpp ----

// A small English text (a few thousand characters) for the GPT example: fixed sentences in an order
// drawn from a fixed seed, so every run and every rank reads the same file.
std::string write_text_corpus() {
  static const char* kSentences[] = {"The quick brown fox jumps over the lazy dog.\n",
                                     "A journey of a thousand miles begins with a single step.\n",
                                     "All that glitters is not gold.\n",
                                     "To be or not to be, that is the question.\n",
                                     "The early bird catches the worm.\n",
                                     "Actions speak louder than words.\n",
                                     "Knowledge is power, and time is money.\n",
                                     "Where there is a will, there is a way.\n"};
  std::mt19937 gen(7);
  std::string text;
  while (text.size() < 12000) text += kSentences[gen() % 8];
  const std::string path = (std::filesystem::temp_directory_path() / "dp_examples_corpus.txt").string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// "step N  val loss V" lines of a gpt run, as (N, V).
std::vector<std::pair<int, double>> val_losses(const ProgramRun& r) {
  static const std::regex re(R"(step ([0-9]+)  val loss ([0-9.]+))");
  std::vector<std::pair<int, double>> out;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.emplace_back(std::stoi(m[1]), std::stod(m[2]));
  }
  return out;
}

const std::string kGptArgs = " --steps 40 --batch 8 --block 32 --layers 2 --heads 2 --embd 32 --eval-every 20 --sample 120 --lr 1e-2";

TEST_F(Examples, GptTrainsWithDataParallelAndSamplesText) {
  const std::string text = write_text_corpus();
  ProgramRun r = run("gpt", "--data " + text + " --devices cpu:0,cpu:1" + kGptArgs);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("DataParallel over cpu:0,cpu:1"), std::string::npos) << r.out;
  const auto v = val_losses(r);
  ASSERT_EQ(v.size(), 3u) << r.out;  // steps 0, 20, 40
  // From about ln(vocabulary) (~3.4 for ~30 characters) to well under it: the sentences repeat.
  EXPECT_GT(v.front().second, 3.0) << r.out;
  EXPECT_LT(v.back().second, v.front().second - 1.0) << r.out;
  const size_t at = r.out.find("---- sample (temperature 0.80, top-k 10) ----\n");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string sample = r.out.substr(at + 46);
  EXPECT_GE(sample.size(), 120u) << r.out;
  EXPECT_NE(sample.find("\n----\n"), std::string::npos) << r.out;
}

TEST_F(Examples, GptUnderDpRunWithDdpTrainsAsDataParallelDoes) {
#ifndef DP_RUN_BIN
  GTEST_SKIP() << "dp-run is not built";
#else
  const std::string text = write_text_corpus();
  const std::string args = "--data " + text + kGptArgs + " --sample 0";
  ProgramRun dp_run = run("gpt", "--devices cpu:0,cpu:1 " + args);
  ASSERT_EQ(dp_run.status, 0) << dp_run.out;
  ProgramRun ddp;
  {
    const std::string cmd = std::string("timeout 120 ") + DP_RUN_BIN + " --nproc-per-node 2 --timeout 60 -- " + example("gpt") + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::array<char, 4096> buf;
    for (size_t k; (k = fread(buf.data(), 1, buf.size(), p)) > 0;) ddp.out.append(buf.data(), k);
    const int rc = pclose(p);
    ddp.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  ASSERT_EQ(ddp.status, 0) << ddp.out;
  EXPECT_NE(ddp.out.find("DistributedDataParallel over 2 processes"), std::string::npos) << ddp.out;
  // The same global batches and the same initial weights: the held-out losses follow the
  // DataParallel run's (gradients are summed in another order, hence not bit for bit).
  const auto a = val_losses(dp_run), b = val_losses(ddp);
  ASSERT_EQ(a.size(), 3u) << dp_run.out;
  ASSERT_EQ(b.size(), a.size()) << ddp.out;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].first, a[i].first);
    EXPECT_NEAR(b[i].second, a[i].second, 2e-3 * a[i].second) << "step " << a[i].first << "\nDataParallel:\n" << dp_run.out << "DDP:\n" << ddp.out;
  }
#endif
}

// "step N  loss L" lines of an rnn_packed run.
std::vector<double> step_losses(const ProgramRun& r) {
  static const std::regex re(R"(^step [0-9]+  loss ([0-9.]+)$)");
  std::vector<double> out;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back(std::stod(m[1]));
  }
  return out;
}

TEST_F(Examples, PackedGruOnTwoDevicesTrainsAsOnOne) {
  const std::string args = " --steps 60 --batch 32 --hidden 16 --min-accuracy 0.9";
  ProgramRun one = run("rnn_packed", "--devices cpu:0" + args);
  ASSERT_EQ(one.status, 0) << one.out;
  ProgramRun two = run("rnn_packed", "--devices cpu:0,cpu:1" + args);
  ASSERT_EQ(two.status, 0) << two.out;
  const auto a = step_losses(one), b = step_losses(two);
  ASSERT_EQ(a.size(), 4u) << one.out;  // steps 1, 20, 40, 60
  ASSERT_EQ(b.size(), a.size()) << two.out;
  // Per-token losses over the whole batch on both: equal up to the printed digits' rounding.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-4) << "one device:\n" << one.out << "two:\n" << two.out;
  EXPECT_LT(a.back(), a.front() - 0.2) << one.out;
}

TEST_F(Examples, PackedGruWithoutTotalLengthNamesTheMistake) {
  ProgramRun r = run("rnn_packed", "--devices cpu:0,cpu:1 --steps 1 --no-total-length 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("total_length"), std::string::npos) << r.out;
}

#endif  // DP_EXAMPLES_DIR

}  // namespace
