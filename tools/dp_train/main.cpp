// dp-train: data-parallel training of a built-in model on a built-in data set (README.md,
// "The main job: dp-train"). The program is put together from one file per concern:
//   args        the command line (CLI11): run settings vs. this invocation's options
//   devices     --devices / --output-device
//   models      seed, mlp, cnn (PyTorch's state_dict keys) and their losses
//   data        random data / Fashion-MNIST, and per-epoch loaders that resume mid-epoch
//   checkpoint  the resumable checkpoint (one safetensors file, written atomically)
//   trainer     setup, the training loop, evaluation, the summary
//   progress    the terminal bar or plain lines; jsonl_log: --log; plot: --plot (SVG)
//   signals     Ctrl-C / SIGTERM: stop after the current step
// Exit status: 0 done, 1 below --min-accuracy, 2 bad arguments or inputs, 3 an error during
// training, 128 + signal when stopped by SIGINT/SIGTERM (after writing the checkpoint).
#include <cstdio>
#include <exception>
#include <optional>
#include "args.h"
#include "trainer.h"

int main(int argc, char** argv) {
  dp::train::ParseResult parsed = dp::train::parse_args(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  std::optional<dp::train::Trainer> trainer;
  try {
    trainer.emplace(std::move(*parsed.options));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp-train: error: %s\n", e.what());
    return 2;
  }
  try {
    return trainer->run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\ndp-train: error during training: %s\n", e.what());
    return 3;
  }
}
