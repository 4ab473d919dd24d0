// pg_worker: one rank of a multi-process process-group test (test_process_group_processes.cpp
// starts several, as a launcher would). It forms the default group with init_process_group() from
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DP_STORE_HOSTED and DP_DIST_TIMEOUT, runs one
// scenario and reports on stdout, one line per event, for the test to parse:
//   PASS <what>                      a checked result was right
//   FAIL <what>                      ... or wrong (exit status 1)
//   READY                            the scenario reached the point where the test acts on it
//   ENTER mono_ms=<t>                about to wait in the collective the test is about
//   ERROR <type> <fields> mono_ms=<t> :: <message>     the collective failed (steady clock, ms)
//   NEXT <type> <fields> :: <message>                  ... and the operation after it
//   BENCH <numbers>                  timings (scenario bench)
// Scenarios: collectives, survivor, idle, skip_to_barrier, mismatch, bench <iterations>.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/errors.h"
#include "dp/distributed/init.h"
#include "dp/dp.h"

using namespace dp;
using namespace dp::distributed;

namespace {

int failures = 0;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t mono_ms() { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void check(bool ok, const std::string& what) {
  say((ok ? "PASS " : "FAIL ") + what);
  if (!ok) ++failures;
}

// "<type> <typed fields>" of an exception, for ERROR/NEXT lines.
std::string describe(const std::exception_ptr& error, std::string* message) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerLostError& e) {
    *message = e.what();
    return dp::detail::str("PeerLostError peer=", e.peer_rank(), " op=", e.operation(), " seq=", e.sequence());
  } catch (const CollectiveTimeout& e) {
    *message = e.what();
    std::string behind;
    for (int r : e.ranks_behind()) behind += (behind.empty() ? "" : ",") + std::to_string(r);
    return dp::detail::str("CollectiveTimeout op=", e.operation(), " seq=", e.sequence(), " waited_ms=", e.waited().count(),
                           " behind=", behind.empty() ? "-" : behind);
  } catch (const CollectiveMismatch& e) {
    *message = e.what();
    return dp::detail::str("CollectiveMismatch rank=", e.rank());
  } catch (const RendezvousError& e) {
    *message = e.what();
    return "RendezvousError";
  } catch (const DistributedError& e) {
    *message = e.what();
    return "DistributedError";
  } catch (const std::exception& e) {
    *message = e.what();
    return "Other";
  }
}

// Waits for work; on failure prints `tag` <type> ... and returns false.
bool wait_or_report(const WorkPtr& work, const char* tag) {
  try {
    work->wait();
    return true;
  } catch (...) {
    const int64_t when = mono_ms();
    std::string message;
    const std::string type = describe(std::current_exception(), &message);
    say(dp::detail::str(tag, ' ', type, " mono_ms=", when, " :: ", message));
    return false;
  }
}

void collectives(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  Tensor a = full({1000}, double(r + 1), kFloat32);
  pg.allreduce(a)->wait();
  check(a.to_vector<float>() == std::vector<float>(1000, float(n * (n + 1) / 2)), "allreduce sum float32");
  Tensor h = full({7}, double(r + 1), kFloat16);
  pg.allreduce(h, ReduceOp::Avg)->wait();
  check(h.to_vector<float>() == std::vector<float>(7, float(n * (n + 1) / 2) * float(1.0 / n)), "allreduce avg float16");
  Tensor m = tensor(std::vector<int64_t>{r, -r, 5}, {3}, kInt64);
  pg.allreduce(m, ReduceOp::Max)->wait();
  check(m.to_vector<int64_t>() == std::vector<int64_t>{n - 1, 0, 5}, "allreduce max int64");
  for (int root = 0; root < n; ++root) {
    Tensor b = full({2, 3}, r == root ? 100.0 + root : -1.0, kFloat64);
    pg.broadcast(b, root)->wait();
    check(b.to_vector<double>() == std::vector<double>(6, 100.0 + root), dp::detail::str("broadcast from ", root));
  }
  std::vector<Tensor> gathered;
  for (int k = 0; k < n; ++k) gathered.push_back(zeros({4}, kInt32));
  pg.allgather(gathered, full({4}, double(10 * r), kInt32))->wait();
  bool ok = true;
  for (int k = 0; k < n; ++k) ok = ok && gathered[static_cast<size_t>(k)].to_vector<int32_t>() == std::vector<int32_t>(4, 10 * k);
  check(ok, "allgather int32");
  std::vector<Tensor> inputs;
  for (int k = 0; k < n; ++k) inputs.push_back(full({5}, double(k * 100 + r), kFloat32));
  Tensor out = zeros({5}, kFloat32);
  pg.reduce_scatter(out, inputs)->wait();
  check(out.to_vector<float>() == std::vector<float>(5, float(n * r * 100 + n * (n - 1) / 2)), "reduce_scatter sum float32");
  pg.barrier()->wait();
  check(true, "barrier");
}

// Two collectives with everyone, then READY; then one more that the others may not join.
void survivor(ProcessGroup& pg) {
  Tensor t = full({100'000}, 1.0, kFloat32);
  pg.allreduce(t)->wait();
  pg.broadcast(t, 0)->wait();
  say("READY");
  auto work = pg.allreduce(t);
  say(dp::detail::str("ENTER mono_ms=", mono_ms()));
  if (wait_or_report(work, "ERROR")) {
    say("FAIL the last collective succeeded");
    ++failures;
    return;
  }
  if (wait_or_report(pg.barrier(), "NEXT")) {
    say("FAIL the operation after an error succeeded");
    ++failures;
  }
  // Stay connected a moment, so that other survivors see the lost rank, not this one leaving.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

// The same two collectives, READY, then nothing (the test kills, stops or waits for this rank).
void idle(ProcessGroup& pg) {
  Tensor t = full({100'000}, 1.0, kFloat32);
  pg.allreduce(t)->wait();
  pg.broadcast(t, 0)->wait();
  say("READY");
  std::this_thread::sleep_for(std::chrono::seconds(30));
}

// Skips the third collective (the survivors' allreduce) and goes on to a barrier.
void skip_to_barrier(ProcessGroup& pg) {
  Tensor t = full({100'000}, 1.0, kFloat32);
  pg.allreduce(t)->wait();
  pg.broadcast(t, 0)->wait();
  say("READY");
  wait_or_report(pg.barrier(), "ERROR");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

// Rank 1 broadcasts where everyone else allreduces (run with DP_DISTRIBUTED_DEBUG=1).
void mismatch(ProcessGroup& pg) {
  Tensor t = full({10}, 1.0, kFloat32);
  pg.allreduce(t)->wait();
  say("READY");
  wait_or_report(pg.rank() == 1 ? pg.broadcast(t, 0) : pg.allreduce(t), "ERROR");
}

// The DDP MLP's gradient bucket: 1,863,690 float32 (7.45 MB) allreduced `iterations` times after
// 5 warm-up rounds; rank 0 prints every time in ms.
void bench(ProcessGroup& pg, int iterations) {
  Tensor t = full({1'863'690}, 1.0, kFloat32);
  for (int i = 0; i < 5; ++i) pg.allreduce(t)->wait();
  std::string times;
  for (int i = 0; i < iterations; ++i) {
    pg.barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    pg.allreduce(t)->wait();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    times += dp::detail::str(" ", ms);
  }
  if (pg.rank() == 0) say("BENCH" + times);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: pg_worker collectives|survivor|idle|skip_to_barrier|mismatch|bench <n>\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    ProcessGroupPtr pg = init_process_group();
    if (scenario == "collectives") {
      collectives(*pg);
    } else if (scenario == "survivor") {
      survivor(*pg);
    } else if (scenario == "idle") {
      idle(*pg);
    } else if (scenario == "skip_to_barrier") {
      skip_to_barrier(*pg);
    } else if (scenario == "mismatch") {
      mismatch(*pg);
    } else if (scenario == "bench") {
      bench(*pg, argc > 2 ? std::atoi(argv[2]) : 20);
    } else {
      std::fprintf(stderr, "pg_worker: unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    say(std::string("FATAL ") + e.what());
    return 3;
  }
  return failures == 0 ? 0 : 1;
}
