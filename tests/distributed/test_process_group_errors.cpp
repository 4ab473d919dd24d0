// The gloo process group's errors, ranks as threads: bad arguments (typed, naming the values, the
// group stays usable), a rendezvous with a rank that never comes, monitored_barrier, a rank that
// skips a collective (CollectiveTimeout naming it), a peer that goes away (PeerLostError naming
// it), the group unusable afterwards, destruction with queued work, DP_DISTRIBUTED_DEBUG mismatches,
// and the environment variables. Failure tests use 2 s timeouts.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <chrono>
#include <future>
#include <thread>
#include <gloo/common/error.h>
#include "distributed/gloo_errors.h"
#include "distributed/process_group_ranks.h"
#include "dp/distributed/errors.h"
#include "dp/dp.h"

namespace dp::distributed {
namespace {

using testing::options_with_timeout;
using testing::run_ranks;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kShort{2000};

// Sets an environment variable for one test and restores the previous state.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs fn and returns the exception it throws as E (failing the test if it throws nothing or
// something else); the message is checked by the caller.
template <typename E, typename F>
std::optional<E> thrown(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something else: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "threw nothing";
  return std::nullopt;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ProcessGroupErrors, BadArgumentsAreTypedErrorsNamingTheValuesAndLeaveTheGroupUsable) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    Tensor x = zeros({2, 3}, kFloat32);
    auto shape = thrown<ShapeError>([&] { pg.allgather({zeros({2, 3}), zeros({3, 2})}, x); });
    ASSERT_TRUE(shape);
    EXPECT_TRUE(contains(shape->what(), "output 1 has shape [3, 2]")) << shape->what();
    EXPECT_TRUE(contains(shape->what(), "[2, 3]")) << shape->what();
    auto count = thrown<ValueError>([&] { pg.allgather({zeros({2, 3})}, x); });
    ASSERT_TRUE(count);
    EXPECT_TRUE(contains(count->what(), "1 output tensors given")) << count->what();
    EXPECT_TRUE(contains(count->what(), "needs 2")) << count->what();
    auto dtype = thrown<DTypeError>([&] { pg.allgather({zeros({2, 3}), zeros({2, 3}, kInt64)}, x); });
    ASSERT_TRUE(dtype);
    EXPECT_TRUE(contains(dtype->what(), "output 1 is int64")) << dtype->what();
    auto root = thrown<ValueError>([&] { pg.broadcast(x, 2); });
    ASSERT_TRUE(root);
    EXPECT_TRUE(contains(root->what(), "root 2 is not a rank")) << root->what();
    EXPECT_TRUE(contains(root->what(), "0 to 1")) << root->what();
    auto avg = thrown<ValueError>([&] { pg.allreduce(std::vector<Tensor>{x, zeros({4}, kInt32)}, ReduceOp::Avg); });
    ASSERT_TRUE(avg);
    EXPECT_TRUE(contains(avg->what(), "tensor 1 is int32")) << avg->what();
    auto rs = thrown<ShapeError>([&] { pg.reduce_scatter(zeros({4}), {zeros({4}), zeros({5})}); });
    ASSERT_TRUE(rs);
    EXPECT_TRUE(contains(rs->what(), "input 1 has shape [5]")) << rs->what();
    auto rs_count = thrown<ValueError>([&] { pg.reduce_scatter(zeros({4}), {zeros({4}), zeros({4}), zeros({4})}); });
    ASSERT_TRUE(rs_count);
    EXPECT_TRUE(contains(rs_count->what(), "3 input tensors given")) << rs_count->what();
    auto undefined = thrown<ValueError>([&] { pg.allreduce(std::vector<Tensor>{x, Tensor()}); });
    ASSERT_TRUE(undefined);
    EXPECT_TRUE(contains(undefined->what(), "tensor 1 is an undefined tensor")) << undefined->what();
    auto none = thrown<ValueError>([&] { pg.allreduce(std::vector<Tensor>{}); });
    ASSERT_TRUE(none);
    // None of them used a sequence number, and the group still works.
    EXPECT_EQ(pg.sequence(), 0u);
    Tensor t = full({3}, double(rank + 1), kFloat32);
    pg.allreduce(t)->wait();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 3.0f));
  });
}

TEST(ProcessGroupErrors, MakingAGroupChecksItsArguments) {
  auto store = std::make_shared<HashStore>();
  auto bad_rank = thrown<ValueError>([&] { make_gloo_process_group(store, 2, 2); });
  ASSERT_TRUE(bad_rank);
  EXPECT_TRUE(contains(bad_rank->what(), "rank 2 is not in [0, 2)")) << bad_rank->what();
  auto negative = thrown<ValueError>([&] { make_gloo_process_group(store, -1, 2); });
  ASSERT_TRUE(negative);
  EXPECT_TRUE(contains(negative->what(), "rank -1")) << negative->what();
  auto no_store = thrown<ValueError>([&] { make_gloo_process_group(nullptr, 0, 2); });
  ASSERT_TRUE(no_store);
  EXPECT_TRUE(contains(no_store->what(), "store is null")) << no_store->what();
  auto size = thrown<ValueError>([&] { make_gloo_process_group(store, 0, 0); });
  ASSERT_TRUE(size);
  EXPECT_TRUE(contains(size->what(), "size 0")) << size->what();
  ProcessGroupOptions slash;
  slash.name = "a/b";
  auto name = thrown<ValueError>([&] { make_gloo_process_group(store, 0, 1, slash); });
  ASSERT_TRUE(name);
  EXPECT_TRUE(contains(name->what(), "'a/b'")) << name->what();
}

TEST(ProcessGroupErrors, RendezvousNamesExactlyTheRankThatNeverCame) {
  // Ranks 0 and 1 of 3 come; rank 2 never does.
  auto store = std::make_shared<HashStore>(kShort);
  std::vector<std::optional<RendezvousError>> errors(2);
  std::vector<double> seconds(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      errors[static_cast<size_t>(r)] = thrown<RendezvousError>([&] { make_gloo_process_group(store, r, 3, options_with_timeout(kShort)); });
      seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << "rank " << r;
    const RendezvousError& e = *errors[static_cast<size_t>(r)];
    EXPECT_EQ(e.missing_ranks(), std::vector<int>{2}) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 2 did not arrive within 2000 ms")) << e.what();
    EXPECT_TRUE(contains(e.what(), dp::detail::str("(rank ", r, " of 3)"))) << e.what();
    EXPECT_GE(seconds[static_cast<size_t>(r)], 1.9);
    EXPECT_LE(seconds[static_cast<size_t>(r)], 3.0);
  }
}

TEST(ProcessGroupErrors, MonitoredBarrierNamesTheRankThatDidNotArrive) {
  run_ranks(
      4,
      [&](int rank, ProcessGroup& pg) {
        pg.monitored_barrier(kShort);  // everyone: passes
        if (rank == 3) {
          // Rank 3 skips the second barrier; it waits until the others have failed, keeping its group.
          std::this_thread::sleep_for(milliseconds(3000));
          return;
        }
        const auto start = Clock::now();
        auto e = thrown<RendezvousError>([&] { pg.monitored_barrier(kShort); });
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        ASSERT_TRUE(e) << "rank " << rank;
        EXPECT_EQ(e->missing_ranks(), std::vector<int>{3}) << e->what();
        EXPECT_TRUE(contains(e->what(), "monitored_barrier #1")) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 3 did not arrive within 2000 ms")) << e->what();
        EXPECT_LE(s, 2.8) << "rank " << rank;
      },
      options_with_timeout(std::chrono::seconds(5)));
}

TEST(ProcessGroupErrors, MonitoredBarrierWaitingForAllRanksListsEveryMissingOne) {
  run_ranks(
      4,
      [&](int rank, ProcessGroup& pg) {
        if (rank >= 2) {
          std::this_thread::sleep_for(milliseconds(3000));
          return;
        }
        auto e = thrown<RendezvousError>([&] { pg.monitored_barrier(kShort, /*wait_all_ranks=*/true); });
        ASSERT_TRUE(e) << "rank " << rank;
        EXPECT_EQ(e->missing_ranks(), (std::vector<int>{2, 3})) << e->what();
        EXPECT_TRUE(contains(e->what(), "ranks 2, 3 did not arrive within 2000 ms")) << e->what();
      },
      options_with_timeout(std::chrono::seconds(5)));
}

TEST(ProcessGroupErrors, ARankThatSkipsACollectiveIsNamedInTheTimeoutAndTheGroupIsThenUnusable) {
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = full({8}, 1.0, kFloat32);
        pg.allreduce(t)->wait();     // collective #0: both
        pg.broadcast(t, 0)->wait();  // #1: both
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(3500));  // skips #2; its group lives on meanwhile
          return;
        }
        const auto start = Clock::now();
        auto first = pg.allreduce(t);   // #2: rank 1 never issues it
        auto queued = pg.allreduce(t);  // #3: already queued when #2 fails
        auto e = thrown<CollectiveTimeout>([&] { first->wait(); });
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        ASSERT_TRUE(e);
        EXPECT_EQ(e->ranks_behind(), std::vector<int>{1}) << e->what();
        EXPECT_EQ(e->operation(), "allreduce");
        EXPECT_EQ(e->sequence(), 2u);
        EXPECT_GE(e->waited(), milliseconds(1900));
        EXPECT_GE(s, 1.9);
        EXPECT_LE(s, 3.5);
        EXPECT_TRUE(contains(e->what(), "allreduce #2 (rank 0 of 2, group 'default')")) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 1 is behind")) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 1 is at collective #1 (broadcast, finished")) << e->what();
        EXPECT_TRUE(contains(e->what(), "this rank waited")) << e->what();
        // The queued operation and a new one fail the same way, saying why.
        const std::string prefix = "process group 'default' (rank 0 of 2) is unusable after an earlier error: ";
        auto q = thrown<CollectiveTimeout>([&] { queued->wait(); });
        ASSERT_TRUE(q);
        EXPECT_EQ(std::string(q->what()).rfind(prefix, 0), 0u) << q->what();
        EXPECT_EQ(q->ranks_behind(), std::vector<int>{1});
        auto later = thrown<CollectiveTimeout>([&] { pg.barrier()->wait(); });
        ASSERT_TRUE(later);
        EXPECT_EQ(std::string(later->what()), prefix + e->what());
      },
      options_with_timeout(kShort));
}

// note_progress: the timeout says where the late rank's program is (its step and phase) besides
// its last collective, and where this rank's program was.
TEST(ProcessGroupErrors, TheTimeoutSaysAtWhichStepAndPhaseEachRankIs) {
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = full({4}, 1.0, kFloat32);
        pg.note_progress(41, "forward");
        pg.allreduce(t)->wait();  // #0: both
        if (rank == 1) {
          pg.note_progress(41, "evaluation");  // goes somewhere else instead of the next collective
          std::this_thread::sleep_for(milliseconds(3500));
          return;
        }
        pg.note_progress(41, "backward");
        auto e = thrown<CollectiveTimeout>([&] { pg.allreduce(t)->wait(); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->ranks_behind(), std::vector<int>{1}) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 1 is at step 41 (evaluation), collective #0 (allreduce, finished")) << e->what();
        EXPECT_TRUE(contains(e->what(), "this rank (at step 41 (backward)) waited")) << e->what();
      },
      options_with_timeout(kShort));
}

TEST(ProcessGroupErrors, APeerWhoseGroupGoesAwayIsNamedInAPeerLostError) {
  // Rank 1 destroys its group (its connections close) while rank 0 waits in an allreduce.
  std::promise<void> rank0_waiting;
  auto waiting = rank0_waiting.get_future().share();
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = full({1000}, 1.0, kFloat32);
        pg.allreduce(t)->wait();  // #0: both connected and working
        if (rank == 1) {
          waiting.wait_for(std::chrono::seconds(5));
          std::this_thread::sleep_for(milliseconds(100));
          return;  // run_ranks destroys this rank's group
        }
        auto work = pg.allreduce(t);  // #1
        rank0_waiting.set_value();
        const auto start = Clock::now();
        auto e = thrown<PeerLostError>([&] { work->wait(); });
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        ASSERT_TRUE(e);
        EXPECT_EQ(e->peer_rank(), 1) << e->what();
        EXPECT_EQ(e->operation(), "allreduce");
        EXPECT_EQ(e->sequence(), 1u);
        EXPECT_TRUE(contains(e->what(), "allreduce #1 (rank 0 of 2, group 'default'): lost rank 1 (")) << e->what();
        EXPECT_LE(s, 1.5) << e->what();
        auto next = thrown<PeerLostError>([&] { pg.allreduce(t)->wait(); });
        ASSERT_TRUE(next);
        EXPECT_TRUE(contains(next->what(), "is unusable after an earlier error: allreduce #1")) << next->what();
        EXPECT_EQ(next->peer_rank(), 1);
      },
      options_with_timeout(std::chrono::seconds(10)));
}

TEST(ProcessGroupErrors, DestroyingAGroupFailsItsQueuedOperationsAndReturnsWithinTheTimeout) {
  auto store = std::make_shared<HashStore>(kShort);
  std::vector<WorkPtr> works;
  double destroy_seconds = 0;
  std::promise<void> done;
  auto finished = done.get_future().share();
  std::thread peer([&] {
    auto pg = make_gloo_process_group(store, 1, 2, options_with_timeout(kShort));
    finished.wait_for(std::chrono::seconds(10));  // issues nothing, keeps its connections open
  });
  {
    auto pg = make_gloo_process_group(store, 0, 2, options_with_timeout(kShort));
    Tensor t = zeros({4});
    for (int i = 0; i < 4; ++i) works.push_back(pg->allreduce(t));
    std::this_thread::sleep_for(milliseconds(50));  // #0 is in flight
    const auto start = Clock::now();
    pg.reset();
    destroy_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  done.set_value();
  peer.join();
  EXPECT_LE(destroy_seconds, 3.0);
  ASSERT_EQ(works.size(), 4u);
  auto first = thrown<CollectiveTimeout>([&] { works[0]->wait(); });
  ASSERT_TRUE(first);
  for (int i = 1; i < 4; ++i) {
    ASSERT_TRUE(works[static_cast<size_t>(i)]->is_completed());
    auto e = thrown<DistributedError>([&] { works[static_cast<size_t>(i)]->wait(); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), dp::detail::str("was destroyed before allreduce #", i, " ran"))) << e->what();
  }
}

TEST(ProcessGroupErrors, DebugModeNamesTheRankThatIssuedADifferentCollective) {
  ScopedEnv debug("DP_DISTRIBUTED_DEBUG", "1");
  run_ranks(
      3,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = full({10}, double(rank), kFloat32);
        pg.allreduce(t)->wait();  // #0: the same everywhere, checked and correct
        EXPECT_EQ(t.to_vector<float>(), std::vector<float>(10, 3.0f));
        // #1: rank 1 broadcasts where the others allreduce.
        auto e = thrown<CollectiveMismatch>([&] { (rank == 1 ? pg.broadcast(t, 0) : pg.allreduce(t))->wait(); });
        ASSERT_TRUE(e) << "rank " << rank;
        EXPECT_EQ(e->rank(), 1) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 1 issued broadcast(float32[10]; root 0) as collective #1, rank 0 issued allreduce(float32[10]; sum)"))
            << e->what();
        auto next = thrown<CollectiveMismatch>([&] { pg.barrier()->wait(); });
        ASSERT_TRUE(next);
        EXPECT_TRUE(contains(next->what(), "is unusable after an earlier error")) << next->what();
      },
      options_with_timeout(std::chrono::seconds(5)));
}

TEST(ProcessGroupErrors, DebugModeSeesADifferenceInSizeOrDtype) {
  ScopedEnv debug("DP_DISTRIBUTED_DEBUG", "on");
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        Tensor t = rank == 0 ? zeros({10}, kFloat32) : zeros({11}, kFloat32);
        auto e = thrown<CollectiveMismatch>([&] { pg.allreduce(t)->wait(); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->rank(), 1);
        EXPECT_TRUE(contains(e->what(), "rank 1 issued allreduce(float32[11]; sum) as collective #0, rank 0 issued allreduce(float32[10]; sum)"))
            << e->what();
      },
      options_with_timeout(std::chrono::seconds(5)));
}

TEST(ProcessGroupErrors, EnvironmentVariablesAreParsedOrNamedWhenMalformed) {
  {
    ScopedEnv unset("DP_DIST_TIMEOUT", nullptr);
    EXPECT_EQ(ProcessGroupOptions::default_timeout(), milliseconds(60000));
  }
  {
    ScopedEnv env("DP_DIST_TIMEOUT", "2.5");
    EXPECT_EQ(ProcessGroupOptions::default_timeout(), milliseconds(2500));
    EXPECT_EQ(ProcessGroupOptions().timeout, milliseconds(2500));
  }
  for (const char* bad : {"abc", "10s", "-1", "0", "nan"}) {
    ScopedEnv env("DP_DIST_TIMEOUT", bad);
    auto e = thrown<ValueError>([] { ProcessGroupOptions::default_timeout(); });
    ASSERT_TRUE(e) << bad;
    EXPECT_TRUE(contains(e->what(), dp::detail::str("DP_DIST_TIMEOUT='", bad, "'"))) << e->what();
  }
  {
    ScopedEnv env("DP_DISTRIBUTED_DEBUG", "maybe");
    auto e = thrown<ValueError>([] { make_gloo_process_group(std::make_shared<HashStore>(), 0, 1); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "DP_DISTRIBUTED_DEBUG='maybe'")) << e->what();
  }
  EXPECT_STREQ(reduce_op_name(ReduceOp::Sum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::Avg), "avg");
  EXPECT_STREQ(reduce_op_name(ReduceOp::Min), "min");
  EXPECT_STREQ(reduce_op_name(ReduceOp::Max), "max");
  EXPECT_STREQ(reduce_op_name(ReduceOp::Product), "product");
}

// ---- the translation of gloo's exceptions, on their own ----

TEST(ProcessGroupErrors, GlooPeerAddressesMapToRanksOnlyAsWholeAddresses) {
  detail::PeerAddressBook book;
  book.add("[127.0.0.1]:4123", 1);
  book.add("[127.0.0.1]:41235", 2);
  std::string matched;
  EXPECT_EQ(book.find_in("Connection closed by peer [127.0.0.1]:41235", &matched), 2);
  EXPECT_EQ(matched, "[127.0.0.1]:41235");
  EXPECT_EQ(book.find_in("Read error [127.0.0.1]:4123: Connection reset by peer"), 1);
  EXPECT_EQ(book.find_in("Connection closed by peer [127.0.0.1]:4124"), -1);
  EXPECT_EQ(detail::readable_address("[127.0.0.1]:1437"), "127.0.0.1:40197");  // 0x059d -> 0x9d05
  EXPECT_EQ(detail::readable_address("[::1]:1437"), "[::1]:40197");
  EXPECT_EQ(detail::readable_address("not an address"), "not an address");
  EXPECT_EQ(detail::strip_gloo_location("[/build/gloo/transport/tcp/pair.cc:598] Connection closed by peer [::1]:5"),
            "Connection closed by peer [::1]:5");
}

TEST(ProcessGroupErrors, GlooExceptionsBecomeTypedErrors) {
  detail::PeerAddressBook book;
  book.add("[10.0.0.2]:5000", 3);
  const detail::OpLabel label{"default", 0, 4, "broadcast", 42, ""};
  auto no_progress = [] { return detail::ProgressReport{false, "store gone", {}}; };

  auto lost = detail::translate_operation_error(std::make_exception_ptr(gloo::IoException("[pair.cc:598] Connection closed by peer [10.0.0.2]:5000")),
                                                label, book, milliseconds(3), no_progress);
  auto pl = thrown<PeerLostError>([&] { std::rethrow_exception(lost); });
  ASSERT_TRUE(pl);
  EXPECT_EQ(pl->peer_rank(), 3);
  EXPECT_EQ(pl->sequence(), 42u);
  // gloo prints ports in network byte order: 5000 is 0x1388, the port 0x8813 = 34835.
  EXPECT_EQ(std::string(pl->what()), "broadcast #42 (rank 0 of 4, group 'default'): lost rank 3 (10.0.0.2:34835): Connection closed by peer");
  auto reset = detail::translate_operation_error(
      std::make_exception_ptr(gloo::IoException("[pair.cc:589] Read error [10.0.0.2]:5000: Connection reset by peer")), label, book, milliseconds(3),
      no_progress);
  auto pr = thrown<PeerLostError>([&] { std::rethrow_exception(reset); });
  ASSERT_TRUE(pr);
  EXPECT_EQ(pr->peer_rank(), 3);
  EXPECT_TRUE(contains(pr->what(), "lost rank 3 (10.0.0.2:34835): Read error: Connection reset by peer")) << pr->what();

  auto unknown = detail::translate_operation_error(std::make_exception_ptr(gloo::IoException("Connection closed by peer [10.0.0.9]:1")), label, book,
                                                   milliseconds(3), no_progress);
  auto pu = thrown<PeerLostError>([&] { std::rethrow_exception(unknown); });
  ASSERT_TRUE(pu);
  EXPECT_EQ(pu->peer_rank(), -1);

  // A timeout with progress: ranks 1 and 3 behind (3 never started), rank 2 in the same collective.
  auto progress = [] {
    detail::ProgressReport r;
    r.complete = true;
    for (int k = 0; k < 4; ++k) {
      detail::RankProgress p;
      p.rank = k;
      p.known = k != 3;
      p.sequence = k == 1 ? 40 : 42;
      p.operation = k == 1 ? "allgather" : "broadcast";
      p.finished = k == 1;
      p.unix_ms = std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      r.ranks.push_back(p);
    }
    return r;
  };
  auto timeout = detail::translate_operation_error(
      std::make_exception_ptr(gloo::IoException("[unbound_buffer.cc:81] Timed out waiting 2000ms for recv operation to complete")), label, book,
      milliseconds(2003), progress);
  auto ct = thrown<CollectiveTimeout>([&] { std::rethrow_exception(timeout); });
  ASSERT_TRUE(ct);
  EXPECT_EQ(ct->ranks_behind(), (std::vector<int>{1, 3}));
  EXPECT_EQ(ct->waited(), milliseconds(2003));
  // Every other rank's position: the ranks behind first, then the rest (rank 2, in the same collective).
  EXPECT_TRUE(contains(ct->what(), "ranks 1, 3 are behind; rank 1 is at collective #40 (allgather, finished ")) << ct->what();
  EXPECT_TRUE(contains(ct->what(), " s ago); rank 3 has not started any collective; rank 2 is at collective #42 (broadcast, started ")) << ct->what();
  EXPECT_FALSE(contains(ct->what(), "rank 0 is at")) << "this rank's own position ends the message: " << ct->what();
  EXPECT_FALSE(contains(ct->what(), "more rank")) << ct->what();
  EXPECT_TRUE(contains(ct->what(), "s ago); this rank waited 2003 ms in broadcast #42 (gloo: Timed out waiting 2000ms")) << ct->what();

  // 12 ranks, rank 0 reporting, rank 10 behind at step 6: the first 8 others are listed with their
  // step, phase and collective (rank 10 first), then how many more there are.
  auto twelve = [] {
    detail::ProgressReport r;
    r.complete = true;
    for (int k = 0; k < 12; ++k) {
      detail::RankProgress p;
      p.rank = k;
      p.known = true;
      p.sequence = k == 10 ? 41 : 42;
      p.operation = "broadcast";
      p.finished = k == 10;
      p.step = k == 10 ? 6 : 7;
      p.phase = k == 10 ? "forward" : "backward";
      p.unix_ms = std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      r.ranks.push_back(p);
    }
    return r;
  };
  const detail::OpLabel label12{"default", 0, 12, "broadcast", 42, "step 7 (backward)"};
  auto many = detail::translate_operation_error(std::make_exception_ptr(gloo::IoException("Timed out waiting 2000ms for recv operation to complete")),
                                                label12, book, milliseconds(2001), twelve);
  auto cm = thrown<CollectiveTimeout>([&] { std::rethrow_exception(many); });
  ASSERT_TRUE(cm);
  EXPECT_EQ(cm->ranks_behind(), std::vector<int>{10});
  const std::string m = cm->what();
  EXPECT_TRUE(contains(m, "timed out: rank 10 is behind; rank 10 is at step 6 (forward), collective #41 (broadcast, finished ")) << m;
  size_t at = m.find("rank 10 is at");
  for (int k : {1, 2, 3, 4, 5, 6, 7}) {  // then in rank order, 8 in all
    const size_t next = m.find("; rank " + std::to_string(k) + " is at step 7 (backward), collective #42 (broadcast, started ");
    ASSERT_NE(next, std::string::npos) << "rank " << k << ": " << m;
    EXPECT_GT(next, at) << "rank " << k << " out of order: " << m;
    at = next;
  }
  for (int k : {8, 9, 11}) EXPECT_FALSE(contains(m, "rank " + std::to_string(k) + " is at")) << m;
  EXPECT_TRUE(contains(m, " s ago); and 3 more ranks; this rank (at step 7 (backward)) waited 2001 ms in broadcast #42")) << m;

  auto blind = detail::translate_operation_error(std::make_exception_ptr(gloo::IoException("Timed out waiting 2000ms for recv")), label, book,
                                                 milliseconds(2000), no_progress);
  auto cb = thrown<CollectiveTimeout>([&] { std::rethrow_exception(blind); });
  ASSERT_TRUE(cb);
  EXPECT_TRUE(cb->ranks_behind().empty());
  EXPECT_TRUE(contains(cb->what(), "progress could not be read (store gone)")) << cb->what();

  auto other =
      detail::translate_operation_error(std::make_exception_ptr(gloo::Exception("something odd")), label, book, milliseconds(1), no_progress);
  auto de = thrown<DistributedError>([&] { std::rethrow_exception(other); });
  ASSERT_TRUE(de);
  EXPECT_TRUE(contains(de->what(), "broadcast #42 (rank 0 of 4, group 'default'): gloo error: something odd")) << de->what();
}

}  // namespace
}  // namespace dp::distributed
