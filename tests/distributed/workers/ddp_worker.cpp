// ddp_worker: one rank of a multi-process DistributedDataParallel test (test_ddp_processes.cpp
// starts several, as a launcher would). It forms the group with init_process_group() from the
// environment, trains the test's MLP on its share of a fixed global batch for --steps SGD steps
// with forward_loss, and reports on stdout:
//   BOUND <address>             the local address the group's transport bound (after rendezvous)
//   STEP <n> mono_ms=<t>        step n finished (the test acts on it: kill, stop)
//   SAVED <path>                the final parameters were written (dp::save)
//   ERROR <type> mono_ms=<t> :: <message>   a distributed error ended the run (exit status 3)
// Options: --steps N, --rows-of-rank R0,R1,... (each rank's rows; default equal shares of 12),
// --save PATH (rank suffix added), --skip-backward-at N (this rank skips step N's backward and then
// sleeps, as a rank stuck elsewhere; with --then continue it goes on to the next step, as a rank that
// took another branch), --exit-after N (this rank returns after step N).
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/distributed.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "distributed/workers/ddp_worker_model.h"

using namespace dp;
using namespace dp::distributed;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}
int64_t mono_ms() { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
std::string type_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const PeerLostError& x) {
    return "PeerLostError peer=" + std::to_string(x.peer_rank());
  } catch (const CollectiveTimeout& x) {
    std::string behind;
    for (int r : x.ranks_behind()) behind += (behind.empty() ? "" : ",") + std::to_string(r);
    return "CollectiveTimeout behind=" + (behind.empty() ? std::string("-") : behind);
  } catch (const CollectiveMismatch& x) {
    return "CollectiveMismatch rank=" + std::to_string(x.rank());
  } catch (const DistributedError&) {
    return "DistributedError";
  } catch (...) {
    return "other";
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, skip_backward_at = -1, exit_after = -1;
  bool continue_after_skip = false;
  std::vector<int64_t> rows_of_rank;
  std::string save;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string o = argv[i], v = argv[i + 1];
    if (o == "--steps")
      steps = std::stoi(v);
    else if (o == "--save")
      save = v;
    else if (o == "--skip-backward-at")
      skip_backward_at = std::stoi(v);
    else if (o == "--exit-after")
      exit_after = std::stoi(v);
    else if (o == "--then")
      continue_after_skip = v == "continue";
    else if (o == "--rows-of-rank") {
      std::stringstream ss(v);
      for (std::string x; std::getline(ss, x, ',');) rows_of_rank.push_back(std::stoll(x));
    }
  }
  try {
    set_num_threads(1);
    ProcessGroupPtr group = init_process_group();
    const int rank = group->rank(), world = group->size();
    say("BOUND " + group->options().bind_address);
    if (rows_of_rank.empty()) rows_of_rank.assign(static_cast<size_t>(world), 12 / world);
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += rows_of_rank[static_cast<size_t>(r)];
    const int64_t rows = rows_of_rank[static_cast<size_t>(rank)];
    auto model = test::make_ddp_worker_model(rank == 0 ? 42 : 100 + rank);  // DDP copies rank 0's
    nn::DistributedDataParallel<nn::SequentialImpl> ddp(model.ptr(), group);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      auto [x, y] = test::ddp_worker_batch(step);
      opt.zero_grad();
      Tensor loss = ddp->forward_loss(nn::CrossEntropyLoss(), y.narrow(0, offset, rows), x.narrow(0, offset, rows));
      if (step == skip_backward_at) {
        say("SKIPPED " + std::to_string(step));
        if (continue_after_skip) continue;
        std::this_thread::sleep_for(std::chrono::seconds(20));  // the test kills it first
        return 0;
      }
      loss.backward();
      opt.step();
      say("STEP " + std::to_string(step) + " mono_ms=" + std::to_string(mono_ms()));
      if (step == exit_after) return 0;
    }
    if (!save.empty()) {
      const std::string path = save + "." + std::to_string(rank);
      dp::save(ddp->state_dict(), path);
      say("SAVED " + path);
    }
    return 0;
  } catch (const DistributedError& e) {
    say("ERROR " + type_of(std::current_exception()) + " mono_ms=" + std::to_string(mono_ms()) + " :: " + e.what());
    return 3;
  } catch (const std::exception& e) {
    say(std::string("ERROR other :: ") + e.what());
    return 2;
  }
}
