// dp-train: data-parallel training of a built-in model on a built-in data set (README.md,
// "The main job: dp-train"). The program is put together from one file per concern:
//   args        the command line (CLI11): run settings vs. this invocation's options
//   devices     --devices / --output-device
//   models      seed, mlp, cnn (PyTorch's state_dict keys) and their losses
//   data        random data / Fashion-MNIST, and per-epoch loaders that resume mid-epoch and give
//               each process its share of every batch
//   checkpoint  the resumable checkpoint (one safetensors file, written atomically)
//   trainer     setup, the training loop (DataParallel in one process; DistributedDataParallel
//               across processes, with DataParallel inside each), evaluation, the summary
//   progress    the terminal bar or plain lines; jsonl_log: --log; plot: --plot (SVG)
//   signals     Ctrl-C / SIGTERM: stop after the current step
// Exit status: 0 done, 1 below --min-accuracy, 2 bad arguments or inputs, 3 an error during
// training (across processes also a lost peer, a timeout or a failed rendezvous), 128 + signal
// when stopped by SIGINT/SIGTERM (after writing the checkpoint). Every error is also written to the
// launcher's error file (DP_ERROR_FILE, dp::distributed::record_error), so dp-run can report it.
#include "dp/core/threads.h"
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include "args.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/init.h"
#include "dp/distributed/launch.h"
#include "trainer.h"

namespace {

// "rank 1: " when this process is one of several (the launcher's environment), else "".
std::string who() {
  try {
    std::optional<dp::distributed::Environment> env = dp::distributed::read_environment();
    if (env && env->world_size > 1) return "rank " + std::to_string(env->rank) + ": ";
  } catch (const std::exception&) {
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  dp::reexec_for_blas_kernels(argv);  // OpenBLAS's kernels for this CPU, before it does any work
  dp::train::ParseResult parsed = dp::train::parse_args(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  std::optional<dp::train::Trainer> trainer;
  try {
    trainer.emplace(std::move(*parsed.options));
  } catch (const dp::distributed::DistributedError& e) {  // the group failed to form or broke during setup
    dp::distributed::record_error(e);
    std::fprintf(stderr, "dp-train: %serror: %s\n", who().c_str(), e.what());
    return 3;
  } catch (const std::exception& e) {
    dp::distributed::record_error(e);
    std::fprintf(stderr, "dp-train: %serror: %s\n", who().c_str(), e.what());
    return 2;
  }
  try {
    return trainer->run();
  } catch (const std::exception& e) {
    dp::distributed::record_error(e);
    std::fflush(stdout);
    std::fprintf(stderr, "\ndp-train: %serror during training: %s\n", who().c_str(), e.what());
    return 3;
  }
}
