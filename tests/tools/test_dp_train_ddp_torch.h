#pragma once
// dp-train's SGD steps on two processes against PyTorch's single-process steps, for the tests that
// start the ranks themselves (test_dp_train_ddp.cpp) and through dp-run (test_dp_train_ddp_run.cpp):
// the same runs and the same comparison, only how the two processes are started differs.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "tools/test_dp_train_ddp_util.h"

namespace dp_train_ddp_test {

// PyTorch's side: initial weights, and the single-process SGD steps replayed on the same batches.
inline const char* kTorchSgdScript = R"PY(
import gzip, json, struct, sys
sys.path.insert(0, sys.argv[1])
import torch
from gen_safetensors import write_safetensors
from check_safetensors import read

def mlp(hidden):
    nn = torch.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))

def load(path):
    return {name: t for name, t, _, _ in read(path)[1]}

def idx(path, count):
    with gzip.open(path, "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic == 2051:
            f.read(8)
            return torch.frombuffer(bytearray(f.read(count * 784)), dtype=torch.uint8).reshape(count, 1, 28, 28)
        return torch.frombuffer(bytearray(f.read(count)), dtype=torch.uint8)

cmd = sys.argv[2]
if cmd == "write-init":                       # HIDDEN PATH
    torch.manual_seed(1234)
    m = mlp(int(sys.argv[3]))
    write_safetensors(sys.argv[4], {k: v.detach().contiguous() for k, v in m.state_dict().items()}, {"format": "pt"})
elif cmd == "replay":                         # INIT SAVED LOG DATA_DIR HIDDEN BATCH STEPS LR MOMENTUM
    init, saved, log, data_dir = sys.argv[3:7]
    hidden, batch, steps = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    lr, momentum = float(sys.argv[10]), float(sys.argv[11])
    m = mlp(hidden)
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
    weight_diff = max((v - final[k]).abs().max().item() for k, v in m.state_dict().items())
    print(json.dumps({"torch_losses": losses, "our_losses": ours, "max_weight_diff": weight_diff}))
)PY";

// The returned JSON of the script's last line (null when it printed none or failed).
inline nlohmann::json py(const std::string& python, const TempDir& dir, const std::vector<std::string>& args) {
  std::string cmd = python + " '" + dir.file("torch_side.py") + "' '" + DP_GOLDEN_DIR + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  std::string last;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) last = line;
  if (status != 0 || last.empty() || last.front() != '{') return nullptr;
  return nlohmann::json::parse(last);
}

// Starts `dp-train ARGS` on two processes with `env` added to their environment, and returns when
// they are done: each process's exit status and output (dp-run counts as one process).
using TwoProcessRun = std::function<Ranks(const std::vector<std::string>& args, const std::vector<std::string>& env)>;

// Three SGD steps (momentum 0.9) of the MLP from PyTorch's initial weights on the first 3 x 64
// training images (--no-shuffle), each batch split 32+32 over two processes (and, on the second
// run, 33+32 of a batch of 65 over two processes with two devices each): each step's loss and the
// final weights match PyTorch's single-process steps to float rounding. `python` imports torch;
// `how` names the way the processes were started in the printed result.
inline void expect_sgd_steps_match_pytorch(const std::string& python, const TempDir& dir, const TwoProcessRun& run_two, const std::string& how) {
  std::ofstream(dir.file("torch_side.py")) << kTorchSgdScript;
  const std::string init = dir.file("init.safetensors");
  py(python, dir, {"write-init", "32", init});
  ASSERT_TRUE(std::filesystem::exists(init));
  for (const char* batch : {"64", "65"}) {
    SCOPED_TRACE(std::string("batch ") + batch);
    const std::string saved = dir.file(std::string("saved") + batch + ".safetensors"), log = dir.file(std::string("log") + batch + ".jsonl");
    std::vector<std::string> args{"--model", "mlp",        "--hidden",     "32",         "--data",      "fashion-mnist", "--no-shuffle",
                                  "--steps", "3",          "--batch-size", batch,        "--optimizer", "sgd",           "--lr",
                                  "0.1",     "--momentum", "0.9",          "--schedule", "constant",    "--init",        init,
                                  "--save",  saved,        "--log",        log};
    std::vector<std::string> env;
    if (std::string(batch) == "65") {
      args = concat(args, {"--devices", "cpu:0,cpu:1"});
      env.push_back("DP_CPU_DEVICES=2");
    }
    Ranks r = run_two(args, env);
    for (int s : r.status) ASSERT_EQ(s, 0) << r.all();
    nlohmann::json result = py(python, dir, {"replay", init, saved, log, kFashionDir, "32", batch, "3", "0.1", "0.9"});
    ASSERT_TRUE(result.is_object());
    const auto torch_losses = result.at("torch_losses").get<std::vector<double>>();
    const auto our_losses = result.at("our_losses").get<std::vector<double>>();
    ASSERT_EQ(our_losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(our_losses[i], torch_losses[i], 1e-5) << "step " << i + 1 << ": " << result.dump();
    EXPECT_LT(result.at("max_weight_diff").get<double>(), 1e-5) << result.dump();
    std::printf("batch %s on 2 processes (%s), PyTorch vs dp-train: losses %s vs %s, max |weight difference| %g\n", batch, how.c_str(),
                result.at("torch_losses").dump().c_str(), result.at("our_losses").dump().c_str(), result.at("max_weight_diff").get<double>());
  }
}

}  // namespace dp_train_ddp_test
