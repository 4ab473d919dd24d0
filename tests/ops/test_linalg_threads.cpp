// GEMMs from several threads at once: plain threads, device workers (cpu:0, cpu:1) and the host
// mixed with workers all get correct results; the BLAS thread policy (1 thread on a worker, the
// dp::set_num_threads setting on the host, OpenBLAS itself always at one thread), the host GEMM
// pool's tiling over every operand layout, and its API.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <future>
#include <thread>
#include <vector>

#include "backend/cpu/blas.h"
#include "dp/core/threads.h"
#include "support/forked_child.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;

struct Problem {
  Tensor a, b, expected;
};

// A product big enough for OpenBLAS to split over threads, with a float64 reference.
Problem make_problem(int64_t n, uint64_t seed) {
  Generator g(seed);
  Problem p;
  p.a = randn({n, n + 3}, kFloat32, &g);
  p.b = randn({n + 3, n - 5}, kFloat32, &g);
  p.expected = mm(p.a.to(kFloat64), p.b.to(kFloat64));
  return p;
}

::testing::AssertionResult matches(const Tensor& got, const Problem& p) { return all_close(got, p.expected, 1e-4, 1e-3); }

TEST(BlasThreads, ApiSetAndGet) {
  const int before = get_num_threads();
  EXPECT_GE(before, 1);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  EXPECT_THROW(set_num_threads(0), ValueError);
  EXPECT_THROW(set_num_threads(-2), ValueError);
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
}

TEST(BlasThreads, HostUsesSettingWorkerUsesOne) {
  const int before = get_num_threads();
  set_num_threads(2);
  EXPECT_EQ(backend::cpu::blas::threads_for_current_thread(), 2);
  Problem p = make_problem(128, 1);  // 2 million multiply-adds: above the pool's threshold
  const int64_t calls = backend::cpu::blas::pool_calls();
  EXPECT_TRUE(matches(mm(p.a, p.b), p));
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1);  // the host GEMM ran on the pool
  EXPECT_EQ(backend::cpu::blas::openblas_threads(), 1);    // and OpenBLAS itself on one thread
  Worker* w = worker_for(Device("cpu:0"));
  auto fut = w->submit([&] {
    int policy = backend::cpu::blas::threads_for_current_thread();
    Tensor out = mm(p.a, p.b);
    return std::make_pair(policy, matches(out, p) ? 0 : 1);
  });
  auto [policy, bad] = fut.get();
  EXPECT_EQ(policy, 1);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1);  // not the worker's
  set_num_threads(1);
  mm(p.a, p.b);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1);  // one host thread: no pool
  set_num_threads(before);
}

// Every operand layout and odd sizes: the tiled product (3 and 4 threads, tiles by rows when C is
// tall, by columns when wide) equals the one-thread product, and both the float64 reference.
TEST(BlasThreads, TilesCoverEveryLayoutAndShape) {
  const int before = get_num_threads();
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{517, 37, 61}, {29, 611, 83}, {300, 301, 17}, {1024, 16, 64}, {16, 1024, 64}};
  Generator g(11);
  for (const Shape& s : shapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = ta ? randn({s.k, s.m}, kFloat32, &g).t() : randn({s.m, s.k}, kFloat32, &g);
        Tensor b = tb ? randn({s.n, s.k}, kFloat32, &g).t() : randn({s.k, s.n}, kFloat32, &g);
        Tensor bias = randn({s.m, s.n}, kFloat32, &g);
        const Tensor ref = addmm(bias.to(kFloat64), a.to(kFloat64), b.to(kFloat64), 0.5, 2.0);
        set_num_threads(1);
        const Tensor one = addmm(bias, a, b, 0.5, 2.0);
        for (int threads : {3, 4}) {
          set_num_threads(threads);
          const int64_t calls = backend::cpu::blas::pool_calls();
          const Tensor tiled = addmm(bias, a, b, 0.5, 2.0);
          EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1) << s.m << "x" << s.n << "x" << s.k;
          EXPECT_TRUE(all_close(tiled, ref, 1e-4, 1e-3)) << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb;
          EXPECT_TRUE(all_close(tiled, one, 1e-5, 1e-5)) << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb;
        }
      }
    }
  }
  // A batch of products: fewer than the threads (each cut into tiles), and more (one per task).
  for (int64_t batch : {2, 9}) {
    Tensor a = randn({batch, 200, 70}, kFloat32, &g), b = randn({batch, 70, 90}, kFloat32, &g);
    const Tensor ref = matmul(a.to(kFloat64), b.to(kFloat64));
    set_num_threads(4);
    const int64_t calls = backend::cpu::blas::pool_calls();
    EXPECT_TRUE(all_close(matmul(a, b), ref, 1e-4, 1e-3)) << "batch " << batch;
    EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1) << "batch " << batch;
  }
  set_num_threads(before);
}

// The pool's helper count follows the setting up and down between calls.
TEST(BlasThreads, PoolFollowsTheSetting) {
  const int before = get_num_threads();
  Problem p = make_problem(160, 12);
  for (int threads : {2, 5, 1, 3, 2}) {
    set_num_threads(threads);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(matches(mm(p.a, p.b), p)) << threads << " threads";
  }
  set_num_threads(before);
}

// A child forked after the pool started has none of its threads: its host GEMMs still finish (the
// calling thread takes every tile of the first call) and are right.
TEST(BlasThreads, ForkedChildAfterThePoolStarted) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork (it "
                  "dies there by design); the address-sanitizer and plain builds run this test";
#endif
  const int before = get_num_threads();
  set_num_threads(2);
  Problem p = make_problem(160, 13);
  ASSERT_TRUE(matches(mm(p.a, p.b), p));  // the parent's pool exists now
  test::ForkedChild child([&] {
    for (int i = 0; i < 3; ++i)
      if (!matches(mm(p.a, p.b), p)) return 1;
    return 0;
  });
  EXPECT_EQ(child.wait(std::chrono::seconds(60)), 0);
  set_num_threads(before);
}

TEST(BlasThreads, TwoPlainThreadsConcurrently) {
  Problem p1 = make_problem(160, 2), p2 = make_problem(128, 3);
  std::atomic<int> failures{0};
  auto body = [&](const Problem& p) {
    for (int i = 0; i < 60; ++i) {
      Tensor out = (i % 2) ? mm(p.a, p.b) : matmul(p.a.unsqueeze(0), p.b).squeeze(0);
      if (!matches(out, p)) failures.fetch_add(1);
    }
  };
  std::thread t1(body, std::cref(p1)), t2(body, std::cref(p2));
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(BlasThreads, TwoDeviceWorkersConcurrently) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  Problem p0 = make_problem(160, 4), p1 = make_problem(144, 5);
  // Inputs live on the device that computes with them.
  auto on = [](const Problem& p, Device d) {
    Problem q;
    q.a = p.a.to(d);
    q.b = p.b.to(d);
    q.expected = p.expected;
    return q;
  };
  Problem q0 = on(p0, Device("cpu:0")), q1 = on(p1, Device("cpu:1"));
  auto job = [](const Problem& q) {
    int bad = 0;
    for (int i = 0; i < 60; ++i) {
      Tensor out = linear(q.a, q.b.t());  // w = b^T: out = a @ b
      if (!matches(out, q)) ++bad;
      if (out.device() != q.a.device()) ++bad;
      if (backend::cpu::blas::threads_for_current_thread() != 1) ++bad;
    }
    return bad;
  };
  auto f0 = worker_for(Device("cpu:0"))->submit([&] { return job(q0); });
  auto f1 = worker_for(Device("cpu:1"))->submit([&] { return job(q1); });
  EXPECT_EQ(f0.get(), 0);
  EXPECT_EQ(f1.get(), 0);
}

TEST(BlasThreads, HostMultiThreadedGemmsInterleavedWithWorkers) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  const int before = get_num_threads();
  set_num_threads(std::max(2, before));  // the host's GEMMs run on the pool
  Problem ph = make_problem(192, 6), p0 = make_problem(112, 7), p1 = make_problem(120, 8);
  std::atomic<bool> go{false};
  auto worker_job = [&](const Problem& p) {
    while (!go.load()) std::this_thread::yield();
    int bad = 0;
    for (int i = 0; i < 30; ++i)
      if (!matches(mm(p.a, p.b), p)) ++bad;
    return bad;
  };
  auto f0 = worker_for(Device("cpu:0"))->submit([&] { return worker_job(p0); });
  auto f1 = worker_for(Device("cpu:1"))->submit([&] { return worker_job(p1); });
  go.store(true);
  int host_bad = 0;
  for (int i = 0; i < 15; ++i)
    if (!matches(mm(ph.a, ph.b), ph)) ++host_bad;
  EXPECT_EQ(host_bad, 0);
  EXPECT_EQ(f0.get(), 0);
  EXPECT_EQ(f1.get(), 0);
  set_num_threads(before);
}

TEST(BlasThreads, FourWorkersAndTheHostAtOnce) {
  if (cpu_device_count() < 4) set_cpu_device_count(4);
  std::vector<Problem> ps;
  for (int d = 0; d < 5; ++d) ps.push_back(make_problem(80 + 16 * d, 20 + d));
  std::atomic<bool> go{false};
  auto job = [&go](const Problem& p) {
    while (!go.load()) std::this_thread::yield();
    int bad = 0;
    for (int i = 0; i < 40; ++i) {
      // a mix of shapes: batched with broadcasting, folded, transposed operands
      Tensor out = (i % 3 == 0)   ? matmul(p.a.unsqueeze(0).expand({2, -1, -1}), p.b).select(0, 1)
                   : (i % 3 == 1) ? mm(p.a.t().contiguous().t(), p.b)
                                  : linear(p.a, p.b.t());
      if (!matches(out, p)) ++bad;
    }
    return bad;
  };
  std::vector<std::future<int>> futs;
  for (int d = 0; d < 4; ++d) futs.push_back(worker_for(Device::cpu(d))->submit([&, d] { return job(ps[d]); }));
  go.store(true);
  EXPECT_EQ(job(ps[4]), 0);  // the host thread too
  for (auto& f : futs) EXPECT_EQ(f.get(), 0);
}

TEST(BlasThreads, OpenBlasStaysOnOneThread) {
  const int before = get_num_threads();
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  Problem p = make_problem(160, 9);
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    mm(p.a, p.b);
    worker_for(Device("cpu:1"))->submit([&] { return mm(p.a, p.b).numel(); }).get();
    EXPECT_EQ(backend::cpu::blas::openblas_threads(), 1) << threads << " host threads";
  }
  set_num_threads(before);
}

// The kernel suggestion names a core only when OpenBLAS runs a fallback and the CPU can do better,
// and never overrides a user's OPENBLAS_CORETYPE.
TEST(BlasThreads, CoretypeSuggestion) {
  const std::string suggestion = backend::cpu::blas::coretype_suggestion();
  EXPECT_TRUE(suggestion.empty() || suggestion == "SkylakeX" || suggestion == "Haswell") << suggestion;
  if (suggestion == "SkylakeX") {
    EXPECT_TRUE(__builtin_cpu_supports("avx512f"));
  }
  if (suggestion == "Haswell") {
    EXPECT_TRUE(__builtin_cpu_supports("avx2"));
  }
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = user ? user : "";
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  EXPECT_EQ(blas_coretype_suggestion(), "");
  if (user)
    ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    ::unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(blas_coretype_suggestion(), user ? "" : suggestion);
}

}  // namespace
}  // namespace dp
