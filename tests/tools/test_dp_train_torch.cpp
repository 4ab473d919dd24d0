// dp-train and PyTorch: --init reads weights PyTorch wrote for the same nn.Sequential, --save writes
// weights PyTorch loads with load_state_dict(strict=True), and a few SGD steps on Fashion-MNIST
// end where PyTorch's own steps from the same weights on the same batches end. PyTorch runs as
// /usr/bin/python3 (Debian's python3-torch); without it the tests are skipped. The safetensors
// reading and writing on the Python side is the project's own (tests/golden/check_safetensors.py,
// gen_safetensors.py), since the safetensors package is not in Debian.
#include <map>
#include "tools/test_dp_train_util.h"

namespace {

using namespace dp_train_test;

const char* kScript = R"PY(
import gzip, json, struct, sys
sys.path.insert(0, sys.argv[1])
import torch
from gen_safetensors import write_safetensors
from check_safetensors import read

def model(kind, hidden):
    nn = torch.nn
    if kind == "seed":
        return nn.Sequential(nn.Linear(5, 1), nn.Sigmoid())
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))

def load(path):
    return {name: t for name, t, _, _ in read(path)[1]}

def idx(path, count):
    """The first `count` items of an IDX file (only that much is decompressed)."""
    with gzip.open(path, "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic == 2051:
            f.read(8)  # rows, cols: 28, 28
            return torch.frombuffer(bytearray(f.read(count * 784)), dtype=torch.uint8).reshape(count, 1, 28, 28)
        return torch.frombuffer(bytearray(f.read(count)), dtype=torch.uint8)

cmd = sys.argv[2]
if cmd == "write-init":                       # HIDDEN (PATH KIND)...
    hidden = int(sys.argv[3])
    for path, kind in zip(sys.argv[4::2], sys.argv[5::2]):
        torch.manual_seed(1234)
        m = model(kind, hidden)
        write_safetensors(path, {k: v.detach().contiguous() for k, v in m.state_dict().items()}, {"format": "pt"})
elif cmd == "same":                           # HIDDEN (INIT SAVED KIND)...: SAVED loads strictly and equals INIT bit for bit
    hidden, out = int(sys.argv[3]), {}
    for init_path, saved_path, kind in zip(sys.argv[4::3], sys.argv[5::3], sys.argv[6::3]):
        m = model(kind, hidden)
        m.load_state_dict(load(saved_path), strict=True)
        init = load(init_path)
        out[kind] = {"keys": sorted(m.state_dict().keys()), "differ": [k for k, v in m.state_dict().items() if not torch.equal(v, init[k])]}
    print(json.dumps(out))
elif cmd == "replay":                         # INIT SAVED LOG DATA_DIR HIDDEN BATCH STEPS LR MOMENTUM
    init, saved, log, data_dir = sys.argv[3:7]
    hidden, batch, steps = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    lr, momentum = float(sys.argv[10]), float(sys.argv[11])
    m = model("mlp", hidden)
    m.load_state_dict(load(init), strict=True)
    images = (idx(data_dir + "/train-images-idx3-ubyte.gz", batch * steps).float() / 255 - 0.2860) / 0.3530
    labels = idx(data_dir + "/train-labels-idx1-ubyte.gz", batch * steps).long()
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
    ours = [json.loads(l)["loss"] for l in open(log) if json.loads(l)["event"] == "step"]
    losses = []
    for s in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(images[s * batch:(s + 1) * batch]), labels[s * batch:(s + 1) * batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    final = load(saved)
    m2 = model("mlp", hidden)
    m2.load_state_dict(final, strict=True)
    weight_diff = max((v - final[k]).abs().max().item() for k, v in m.state_dict().items())
    print(json.dumps({"torch_losses": losses, "our_losses": ours, "max_weight_diff": weight_diff}))
)PY";

class DpTrainTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    DP_TRAIN_REQUIRE_BINARY();
    std::string why;
    python_ = torch_python(&why);
    if (python_.empty()) GTEST_SKIP() << why;
    std::ofstream(dir.file("torch_side.py")) << kScript;
  }
  // Runs the script; returns its last output line parsed as JSON.
  nlohmann::json py(const std::vector<std::string>& args) {
    std::string cmd = python_ + " '" + dir.file("torch_side.py") + "' '" + DP_GOLDEN_DIR + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = ::pclose(p);
    EXPECT_EQ(status, 0) << cmd << "\n" << out;
    if (status != 0) return nullptr;
    std::string last;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) last = line;
    if (last.empty() || last.front() != '{') return nullptr;  // commands that print nothing
    try {
      return nlohmann::json::parse(last);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << last << " (" << e.what() << ")";
      return nullptr;
    }
  }
  TempDir dir;
  std::string python_;
};

// Learning rate 0: the weights go through dp-train unchanged, so what PyTorch wrote comes back
// bit for bit, under PyTorch's keys, for each of the three models.
TEST_F(DpTrainTorch, InitFromPyTorchAndSaveReadByPyTorch) {
  const std::vector<std::string> kinds{"seed", "mlp", "cnn"};
  std::vector<std::string> write{"write-init", "16"}, check{"same", "16"};
  for (const auto& kind : kinds) {
    write.insert(write.end(), {dir.file(kind + "-init.safetensors"), kind});
    check.insert(check.end(), {dir.file(kind + "-init.safetensors"), dir.file(kind + "-saved.safetensors"), kind});
  }
  py(write);
  for (const auto& kind : kinds) {
    const std::string init = dir.file(kind + "-init.safetensors");
    Result r =
        run({"--model", kind, "--hidden",    "16",  "--data", "random", "--data-size", "8",  "--batch-size", "4",
             "--steps", "2",  "--optimizer", "sgd", "--lr",   "0",      "--init",      init, "--save",       dir.file(kind + "-saved.safetensors")},
            dir, kind);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("initial weights: " + init), std::string::npos) << r.out;
  }
  nlohmann::json result = py(check);
  ASSERT_TRUE(result.is_object());
  const std::map<std::string, std::vector<std::string>> keys{
      {"seed", {"0.bias", "0.weight"}},
      {"mlp", {"1.bias", "1.weight", "3.bias", "3.weight", "5.bias", "5.weight"}},
      {"cnn", {"0.bias", "0.weight", "3.bias", "3.weight", "7.bias", "7.weight", "9.bias", "9.weight"}}};
  for (const auto& kind : kinds) {
    EXPECT_EQ(result.at(kind).at("keys").get<std::vector<std::string>>(), keys.at(kind)) << kind;
    EXPECT_TRUE(result.at(kind).at("differ").empty()) << kind << ": " << result.dump();
  }
}

// Three SGD steps (momentum 0.9) of the MLP from PyTorch's initial weights on the first 3 x 64
// training images (--no-shuffle), batches split over two CPU devices: each step's loss and the
// final weights match PyTorch's single-process steps to float rounding.
TEST_F(DpTrainTorch, SgdStepsOnFashionMnistMatchPyTorch) {
  DP_TRAIN_REQUIRE_FASHION_MNIST();
  const std::string init = dir.file("init.safetensors"), saved = dir.file("saved.safetensors"), log = dir.file("log.jsonl");
  py({"write-init", "32", init, "mlp"});
  Result r = run({"--model",      "mlp",       "--hidden",    "32",     "--data", "fashion-mnist", "--no-shuffle", "--steps", "3",
                  "--batch-size", "64",        "--optimizer", "sgd",    "--lr",   "0.1",           "--momentum",   "0.9",     "--schedule",
                  "constant",     "--devices", "cpu:0,cpu:1", "--init", init,     "--save",        saved,          "--log",   log},
                 dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  nlohmann::json result = py({"replay", init, saved, log, kFashionDir, "32", "64", "3", "0.1", "0.9"});
  ASSERT_TRUE(result.is_object());
  const auto torch_losses = result.at("torch_losses").get<std::vector<double>>();
  const auto our_losses = result.at("our_losses").get<std::vector<double>>();
  ASSERT_EQ(our_losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(our_losses[i], torch_losses[i], 1e-5) << "step " << i + 1 << ": " << result.dump();
  EXPECT_LT(result.at("max_weight_diff").get<double>(), 1e-5) << result.dump();
  std::printf("PyTorch vs dp-train: losses %s vs %s, max |weight difference| %g\n", result.at("torch_losses").dump().c_str(),
              result.at("our_losses").dump().c_str(), result.at("max_weight_diff").get<double>());
}

}  // namespace
