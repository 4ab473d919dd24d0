// dp_run_worker: a worker for dp-run's tests (tests/tools/test_dp_run*.cpp). Started by dp-run, it
// forms the group with init_process_group(), trains ddp_worker's MLP (distributed/workers/
// ddp_worker_model.h) with DDP and plain SGD on its share of fixed global batches, and misbehaves
// on request. It prints on stdout, one line each:
//   READY rank=<r> pid=<p> restart=<n> mono_ms=<t>   the group formed
//   STEP <n> rank=<r> mono_ms=<t>                     step n finished
//   RESUMED rank=<r> step=<n>                         a restarted worker continues from its checkpoint
//   STOPPED rank=<r> signal=<s>                       SIGINT/SIGTERM asked it to stop (--on-signal)
//   ERROR <Type> rank=<r> mono_ms=<t> :: <message>    an error ended it (recorded in DP_ERROR_FILE; status 3)
//   ENV <rank> <NAME>=<value>                         (--print-env) then it exits 0 without a group
// Options:
//   --steps N, --step-ms M (sleep per step), --save PATH (final weights to PATH.<rank>)
//   --bucket-mb X      DDP's first_bucket_mb and bucket_cap_mb (default: DDP's own)
//   --checkpoint PATH  a collective checkpoint after every step; after a restart, resume from it
//   --on-signal        SIGINT/SIGTERM stop it after the step in progress (checkpoint written), status 128+signal
//   --fail-rank R --fail-at S --fail-how HOW [--fail-restart N]: rank R, at the start of step S (only in
//     restart N when given), does HOW: exit:<code> (exit without an error file), throw (an error recorded
//     in DP_ERROR_FILE), junk (an error whose text holds terminal escapes, a newline and a forged
//     dp-run line), abort (SIGABRT), hang (sleeps), stop (SIGSTOP to itself), skip-backward (skips
//     step S's backward and then sleeps), never-start (HOW at startup: sleeps instead of joining)
#include <signal.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>
#include "distributed/workers/ddp_worker_model.h"
#include "dp/distributed/distributed.h"
#include "dp/distributed/launch.h"
#include "dp/distributed/timeline.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"

using namespace dp;
using namespace dp::distributed;

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}
int64_t mono_ms() { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
std::string type_of(const std::exception& e) {
  if (dynamic_cast<const PeerLostError*>(&e)) return "PeerLostError";
  if (dynamic_cast<const CollectiveTimeout*>(&e)) return "CollectiveTimeout";
  if (dynamic_cast<const RendezvousError*>(&e)) return "RendezvousError";
  if (dynamic_cast<const StoreError*>(&e)) return "StoreError";
  if (dynamic_cast<const DistributedError*>(&e)) return "DistributedError";
  return "other";
}
[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, step_ms = 0, fail_rank = -1, fail_at = 0, fail_restart = -1;
  DistributedDataParallelOptions ddp_options;
  bool print_env = false, on_signal_stop = false;
  std::string fail_how, save, checkpoint;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (o == "--print-env")
      print_env = true;
    else if (o == "--on-signal")
      on_signal_stop = true;
    else if (o == "--steps")
      steps = std::stoi(v), ++i;
    else if (o == "--step-ms")
      step_ms = std::stoi(v), ++i;
    else if (o == "--save")
      save = v, ++i;
    else if (o == "--bucket-mb")
      ddp_options.first_bucket_mb = ddp_options.bucket_cap_mb = std::stod(v), ++i;
    else if (o == "--checkpoint")
      checkpoint = v, ++i;
    else if (o == "--fail-rank")
      fail_rank = std::stoi(v), ++i;
    else if (o == "--fail-at")
      fail_at = std::stoi(v), ++i;
    else if (o == "--fail-how")
      fail_how = v, ++i;
    else if (o == "--fail-restart")
      fail_restart = std::stoi(v), ++i;
    else {
      std::fprintf(stderr, "dp_run_worker: unknown option %s\n", o.c_str());
      return 2;
    }
  }
  if (print_env) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "DP_STORE_HOSTED",
                             "DP_STORE_PREFIX", "DP_RESTART_COUNT", "DP_RUN_ID", "DP_ERROR_FILE", "DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS",
                             "OMP_NUM_THREADS", "DP_DIST_TIMEOUT", "DP_TIMELINE", "TORCHELASTIC_ERROR_FILE"}) {
      const char* v = std::getenv(name);
      say(std::string("ENV ") + (std::getenv("RANK") ? std::getenv("RANK") : "?") + " " + name + "=" + (v ? v : "<unset>"));
    }
    // The token itself is not printed: its length and a fingerprint (equal on every rank).
    {
      const char* token = std::getenv("DP_STORE_TOKEN");
      say(std::string("ENV ") + (std::getenv("RANK") ? std::getenv("RANK") : "?") + " DP_STORE_TOKEN=" +
          (token ? std::to_string(std::strlen(token)) + " characters, fingerprint " + std::to_string(std::hash<std::string>{}(token) % 1000000)
                 : std::string("<unset>")));
    }
    return 0;
  }
  if (on_signal_stop) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  const int env_rank = std::getenv("RANK") ? std::atoi(std::getenv("RANK")) : 0;
  const bool failing = env_rank == fail_rank && (fail_restart < 0 || fail_restart == restart_count());
  int rank = env_rank;
  try {
    if (failing && fail_how == "never-start") {
      say("NOT STARTING rank=" + std::to_string(rank));
      sleep_forever();
    }
    set_num_threads(1);
    ProcessGroupPtr group = init_process_group();
    rank = group->rank();
    const int world = group->size();
    say("READY rank=" + std::to_string(rank) + " pid=" + std::to_string(::getpid()) + " restart=" + std::to_string(restart_count()) +
        " mono_ms=" + std::to_string(mono_ms()));
    const int64_t rows = 12 / world, offset = rows * rank;
    auto model = test::make_ddp_worker_model(rank == 0 ? 42 : 100 + rank);  // DDP copies rank 0's
    nn::DistributedDataParallel<nn::SequentialImpl> ddp(model.ptr(), group, ddp_options);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1));
    int first_step = 0;
    if (!checkpoint.empty() && restart_count() > 0 && std::filesystem::exists(checkpoint)) {
      auto state = load_checkpoint(*group, checkpoint);
      first_step = static_cast<int>(state["next_step"].item<int64_t>());
      state.erase("next_step");
      ddp->load_state_dict(state);
      say("RESUMED rank=" + std::to_string(rank) + " step=" + std::to_string(first_step));
    }
    for (int step = first_step; step < steps; ++step) {
      if (failing && step == fail_at) {
        if (fail_how.rfind("exit:", 0) == 0) std::_Exit(std::stoi(fail_how.substr(5)));
        if (fail_how == "throw")
          throw ValueError("dp_run_worker: rank " + std::to_string(rank) + " was told to fail at step " + std::to_string(step));
        if (fail_how == "junk")  // an error whose text would rewrite the operator's terminal, raw
          throw ValueError(
              "\x1b[2J\x1b[31mred\x1b[0m \xc2\x9b"
              "6n bell\a\r\ndp-run: all 9 workers exited with status 0 (forged) \xff\xfe");
        if (fail_how == "abort") std::abort();
        if (fail_how == "hang") sleep_forever();
        if (fail_how == "stop") ::raise(SIGSTOP);
      }
      auto [x, y] = test::ddp_worker_batch(step);
      opt.zero_grad();
      Tensor loss = ddp->forward_loss(nn::CrossEntropyLoss(), y.narrow(0, offset, rows), x.narrow(0, offset, rows));
      if (failing && step == fail_at && fail_how == "skip-backward") {
        say("SKIPPED " + std::to_string(step) + " rank=" + std::to_string(rank));
        sleep_forever();
      }
      loss.backward();
      {
        timeline::Scope scope("optimizer.step", "train");
        opt.step();
      }
      say("STEP " + std::to_string(step) + " rank=" + std::to_string(rank) + " mono_ms=" + std::to_string(mono_ms()));
      if (!checkpoint.empty()) {
        auto state = ddp->state_dict();
        state.insert("next_step", tensor(std::vector<int64_t>{step + 1}));
        save_checkpoint(*group, state, checkpoint);
      }
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      if (const int sig = g_signal.load()) {
        say("STOPPED rank=" + std::to_string(rank) + " signal=" + std::to_string(sig));
        record_error("Interrupted", "stopped by signal " + std::to_string(sig) + " after step " + std::to_string(step) +
                                        (checkpoint.empty() ? "" : ", checkpoint written"));
        return 128 + sig;
      }
    }
    if (!save.empty()) {
      dp::save(ddp->state_dict(), save + "." + std::to_string(rank));
      say("SAVED " + save + "." + std::to_string(rank));
    }
    timeline::flush();
    return 0;
  } catch (const std::exception& e) {
    // Printable: its own output must not carry the junk of --fail-how junk to the test's terminal.
    say("ERROR " + type_of(e) + " rank=" + std::to_string(rank) + " mono_ms=" + std::to_string(mono_ms()) +
        " :: " + printable_text(e.what(), 100000));
    record_error(e);
    return 3;
  }
}
