// OpenBLAS calls and the process-wide BLAS thread policy.
//
// Facts about the OpenBLAS we link (Debian's 0.3.21, pthreads build, USE_THREAD=1):
//  * The thread count is one global (blas_cpu_number): openblas_set_num_threads() changes it for
//    every thread of the process, and a GEMM reads it when it starts to decide whether to split
//    the work over OpenBLAS's single, shared worker pool.
//  * A call that runs with one thread computes entirely in the calling thread with per-call
//    buffers, so such calls from several threads at once are safe and independent.
//  * A multi-threaded call splits the product into as many equal parts as it has threads, and its
//    pool threads spin (up to 2^28 cycles) waiting for work and for each other. When other
//    processes hold some of the cores, the call waits for its slowest part, whose thread is
//    descheduled, while the others spin and take time from it: measured, a ResNet epoch on 2 cores
//    went from 12.5 s alone to 151-548 s beside two busy loops (11.5 s with one OpenBLAS thread),
//    and a 64x256x784 GEMM from 8.7 ms (one thread) to 68 ms (two) on a machine loaded by builds.
//
// The policy:
//  * OpenBLAS always runs one thread per call: it is set to 1 once, on the first call, and never
//    changed again, so its own pool is never used and any number of calls run at once.
//  * Device workers (cpu:0 ... cpu:N-1, DataParallel replicas) call OpenBLAS directly: N replicas
//    on N cores, each GEMM in its own thread.
//  * A large GEMM from any other (host) thread is cut into tiles (row or column blocks of C), and
//    host_threads() threads take the tiles one at a time from a shared counter: the calling thread
//    and the helpers of dparallel's host GEMM pool, which sleep on a condition variable between
//    calls instead of spinning. A thread that loses its core to another process simply takes fewer
//    tiles, so a loaded machine slows the call down in proportion to the cores it lost, not by an
//    order of magnitude. The tiles are a fixed function of the shape and host_threads(), so results
//    do not depend on which thread ran which tile.
//  * The pool serves one call at a time; a host GEMM that finds it busy (another host thread's
//    GEMM) runs in its own thread, one tile, rather than wait.
#include "backend/cpu/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <iterator>
#include <string>
#include <mutex>
#include <vector>

#include "dp/core/errors.h"
#include "dp/core/worker.h"

namespace dp::backend::cpu::blas {
namespace {

// Host products below this many multiply-adds run in one thread: waking a sleeping helper costs
// tens of microseconds, about what 2^20 multiply-adds take one core.
constexpr double kParallelWork = 1048576.0;
// Tiles are at least this many rows or columns of C, in multiples of it (OpenBLAS's kernels work
// on blocks of 4 to 16; shorter tiles would repack the other operand too often).
constexpr int64_t kTileQuantum = 16;
// Tiles per thread: enough that a thread slowed by another process leaves only a small tail.
constexpr int64_t kTilesPerThread = 4;

// One parallel call: `tasks` independent pieces, taken by index from `next`; `slot` names the
// thread that runs a piece (0: the caller, i + 1: pool helper i). Threads whose slot is `slots` or
// more take no pieces (a call that wants fewer threads than the pool has, without resizing it).
struct Job {
  const std::function<void(int64_t, int)>* run = nullptr;
  int64_t tasks = 0;
  int slots = INT_MAX;
  std::atomic<int64_t> next{0};
  int users = 0;  // pool helpers inside this job (guarded by the pool's mutex)

  void work(int slot) {
    if (slot >= slots) return;
    for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) (*run)(t, slot);
  }
};

// Set while a thread runs a parallel_for task: its BLAS calls and nested parallel_for calls stay
// in that thread.
thread_local bool t_in_parallel_task = false;

// The host GEMM pool: helper threads that sleep until a job is published. Created on the first
// parallel host GEMM, never destroyed (its threads block forever at exit; after fork() the child
// gets a new pool, since the parent's threads do not exist there).
class HostPool {
 public:
  // Runs job.run(0 .. tasks-1) on the calling thread and up to `helpers` pool threads. Returns
  // false, having run nothing, when another call holds the pool.
  bool run(Job& job, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (busy_) return false;
      busy_ = true;
    }
    resize(helpers);  // only the holder of busy_ touches threads_
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    job.work(0);
    {
      std::unique_lock<std::mutex> lock(mu_);
      current_ = nullptr;  // helpers that wake from now on find nothing to do
      done_.wait(lock, [&] { return job.users == 0; });
      busy_ = false;
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  int64_t calls() const { return calls_.load(); }

 private:
  void resize(int helpers) {
    if (static_cast<int>(threads_.size()) == helpers) return;
    if (static_cast<int>(threads_.size()) > helpers) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_above_ = helpers;
      }
      wake_.notify_all();
      for (size_t i = static_cast<size_t>(helpers); i < threads_.size(); ++i) pthread_join(threads_[i], nullptr);
      threads_.resize(static_cast<size_t>(helpers));
      std::lock_guard<std::mutex> lock(mu_);
      stop_above_ = INT_MAX;
      return;
    }
    while (static_cast<int>(threads_.size()) < helpers) {
      auto* arg = new Start{this, static_cast<int>(threads_.size())};
      pthread_t t;
      if (pthread_create(&t, nullptr, &HostPool::start, arg) != 0) {
        delete arg;
        break;  // fewer helpers: the calling thread takes their tiles
      }
      pthread_setname_np(t, "dp-gemm");
      threads_.push_back(t);
    }
  }

  struct Start {
    HostPool* pool;
    int index;
  };
  static void* start(void* p) {
    Start s = *static_cast<Start*>(p);
    delete static_cast<Start*>(p);
    s.pool->helper_loop(s.index);
    return nullptr;
  }

  void helper_loop(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    seen = generation_;
    for (;;) {
      wake_.wait(lock, [&] { return index >= stop_above_ || (current_ != nullptr && generation_ != seen); });
      if (index >= stop_above_) return;
      seen = generation_;
      Job* job = current_;
      ++job->users;
      lock.unlock();
      job->work(index + 1);
      lock.lock();
      if (--job->users == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  bool busy_ = false;
  Job* current_ = nullptr;
  uint64_t generation_ = 0;
  int stop_above_ = INT_MAX;  // helpers with an index at or above it leave
  std::vector<pthread_t> threads_;
  std::atomic<int64_t> calls_{0};
};

HostPool& host_pool() {
  static std::mutex mu;
  static HostPool* pool = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (pool == nullptr || owner != ::getpid()) {
    pool = new HostPool();  // NOLINT: intentionally never freed (see HostPool)
    owner = ::getpid();
  }
  return *pool;
}

class Policy {
 public:
  // Created on the first BLAS call or thread query: the host default is OpenBLAS's own
  // (OPENBLAS_NUM_THREADS, else every core); OpenBLAS itself is set to one thread for good.
  Policy() : host_threads_(std::max(1, openblas_get_num_threads())) { openblas_set_num_threads(1); }

  int wanted_threads() const {
    if (Worker::current() != nullptr || t_in_parallel_task) return 1;
    return host_threads();
  }
  int host_threads() const { return host_threads_.load(std::memory_order_acquire); }
  void set_host_threads(int n) { host_threads_.store(n, std::memory_order_release); }

 private:
  std::atomic<int> host_threads_;
};

Policy& policy() {
  static Policy p;
  return p;
}

// Runs tasks 0 .. tasks-1 over `threads` threads (the caller and the pool's helpers), or all in
// the caller when the pool is busy or threads == 1.
// Returns false, having run nothing, when the pool is busy (or not worth it: one task or thread).
bool run_on_pool(int64_t tasks, int threads, const std::function<void(int64_t, int)>& fn, int slots = INT_MAX) {
  if (tasks <= 1 || threads <= 1 || slots <= 1) return false;
  Job job;
  job.run = &fn;
  job.tasks = tasks;
  job.slots = slots;
  return host_pool().run(job, threads - 1);  // a fixed helper count: no thread churn between calls
}

void run_tasks(int64_t tasks, int threads, const std::function<void(int64_t)>& fn) {
  if (run_on_pool(tasks, threads, [&fn](int64_t t, int) { fn(t); })) return;
  for (int64_t t = 0; t < tasks; ++t) fn(t);
}

// How a dimension of `len` is cut for `threads` threads: tiles of `size` (a multiple of
// kTileQuantum), `count` of them, the last one shorter.
struct Tiling {
  int64_t size, count;
};
Tiling tiling(int64_t len, int threads) {
  const int64_t want = std::min<int64_t>(threads * kTilesPerThread, len / kTileQuantum);
  if (want < 2) return {len, 1};
  int64_t size = (len + want - 1) / want;
  size = (size + kTileQuantum - 1) / kTileQuantum * kTileQuantum;
  return {size, (len + size - 1) / size};
}

blasint to_blasint(int64_t v, const char* what) {
  DP_CHECK(v >= 0 && v <= INT_MAX, ValueError, "blas: ", what, " = ", v, " does not fit OpenBLAS's 32-bit integer interface");
  return static_cast<blasint>(v);
}

struct Dims {
  blasint m, n, k, lda, ldb, ldc;
};

Dims check_dims(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  return Dims{to_blasint(m, "m"), to_blasint(n, "n"), to_blasint(k, "k"), to_blasint(lda, "lda"), to_blasint(ldb, "ldb"), to_blasint(ldc, "ldc")};
}

inline CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

inline void raw_gemm(bool ta, bool tb, const Dims& d, float alpha, const float* a, const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), d.m, d.n, d.k, alpha, a, d.lda, b, d.ldb, beta, c, d.ldc);
}
inline void raw_gemm(bool ta, bool tb, const Dims& d, double alpha, const double* a, const double* b, double beta, double* c) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), d.m, d.n, d.k, alpha, a, d.lda, b, d.ldb, beta, c, d.ldc);
}

// Tiny products (a small model's Linear layers: [30, 5] @ [5, 1]) cost OpenBLAS about 4,000
// instructions of interface, packing and buffer set-up, plus two trips through the policy's mutex,
// for a hundred multiply-adds. Up to kTinyWork multiply-adds they run here instead: one scalar dot
// product per output element, in the calling thread, touching neither OpenBLAS nor the policy (so
// safe from any thread). Each C(i, j) accumulates its k products in order, with fused
// multiply-adds where the CPU has them (as OpenBLAS's kernels do), then C = alpha * acc + beta * C,
// with C not read when beta == 0 (BLAS's rule: NaNs in C vanish). A float reduction is never
// vectorised without -ffast-math, so the loop stays a short scalar one, which is what such sizes want.
constexpr int64_t kTinyWork = 2048;

bool is_tiny(int64_t m, int64_t n, int64_t k) { return m * n * std::max<int64_t>(k, 1) <= kTinyWork; }

template <typename T>
inline T mul_add(T a, T b, T acc) {
#ifdef __FMA__
  return std::fma(a, b, acc);
#else
  return acc + a * b;
#endif
}

// sum_p x[p * incx] * y[p * incy], in order (unrolled by four, one accumulator).
template <bool kUnit, typename T>
inline T ordered_dot(const T* x, int64_t incx, const T* y, int64_t incy, int64_t k) {
  if constexpr (kUnit) incx = incy = 1;
  T acc = T(0);
  int64_t p = 0;
  for (; p + 4 <= k; p += 4, x += 4 * incx, y += 4 * incy) {
    acc = mul_add(x[0], y[0], acc);
    acc = mul_add(x[incx], y[incy], acc);
    acc = mul_add(x[2 * incx], y[2 * incy], acc);
    acc = mul_add(x[3 * incx], y[3 * incy], acc);
  }
  for (; p < k; ++p, x += incx, y += incy) acc = mul_add(*x, *y, acc);
  return acc;
}

template <bool kUnit, typename T>
void tiny_gemm_loop(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row, int64_t b_col,
                    T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    const T* ai = a + i * a_row;
    T* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      const T acc = ordered_dot<kUnit>(ai, a_col, b + j * b_col, b_row, k);
      ci[j] = beta == T(0) ? alpha * acc : mul_add(alpha, acc, beta * ci[j]);
    }
  }
}

template <typename T>
void tiny_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc) {
  // op(A)(i, p) = a[i * a_row + p * a_col], op(B)(p, j) = b[p * b_row + j * b_col] (storage as in blas.h).
  const int64_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
  const int64_t b_row = tb ? 1 : ldb, b_col = tb ? ldb : 1;
  if (a_col == 1 && b_row == 1)
    tiny_gemm_loop<true>(m, n, k, alpha, a, a_row, a_col, b, b_row, b_col, beta, c, ldc);  // x @ w.t()
  else
    tiny_gemm_loop<false>(m, n, k, alpha, a, a_row, a_col, b, b_row, b_col, beta, c, ldc);
}

// Whether a product is worth the pool: from a host thread set to more than one thread, and large.
int threads_for(int64_t m, int64_t n, int64_t k) {
  const int threads = policy().wanted_threads();  // also makes sure OpenBLAS is set to one thread
  return static_cast<double>(m) * n * std::max<int64_t>(k, 1) >= kParallelWork ? threads : 1;
}

// One GEMM's tiles: the longer of C's two dimensions is cut (the shorter operand is repacked by
// every tile, so its cost over the product's shrinks with the tile's length).
struct GemmTiles {
  bool by_rows;
  Tiling t;
};
GemmTiles gemm_tiles(int64_t m, int64_t n, int threads) {
  if (threads <= 1) return {true, {m, 1}};
  const bool by_rows = m > n;
  return {by_rows, tiling(by_rows ? m : n, threads)};
}

// Tile `i` of C = alpha * op(A) @ op(B) + beta * C (op(A)(r, p) is a[r * lda + p] or, transposed,
// a[p * lda + r]; likewise B by columns).
template <typename T>
void gemm_tile(bool ta, bool tb, Dims d, const GemmTiles& g, int64_t i, T alpha, const T* a, const T* b, T beta, T* c) {
  const int64_t lo = i * g.t.size;
  if (g.by_rows) {
    d.m = static_cast<blasint>(std::min<int64_t>(g.t.size, d.m - lo));
    raw_gemm(ta, tb, d, alpha, a + (ta ? lo : lo * d.lda), b, beta, c + lo * d.ldc);
  } else {
    d.n = static_cast<blasint>(std::min<int64_t>(g.t.size, d.n - lo));
    raw_gemm(ta, tb, d, alpha, a, b + (tb ? lo * d.ldb : lo), beta, c + lo);
  }
}

template <typename T>
void gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc) {
  if (m == 0 || n == 0) return;
  Dims d = check_dims(m, n, k, lda, ldb, ldc);
  if (is_tiny(m, n, k)) return tiny_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const int threads = threads_for(m, n, k);
  const GemmTiles g = gemm_tiles(m, n, threads);
  if (g.t.count == 1) return raw_gemm(ta, tb, d, alpha, a, b, beta, c);
  run_tasks(g.t.count, threads, [&](int64_t i) { gemm_tile(ta, tb, d, g, i, alpha, a, b, beta, c); });
}

template <typename T>
void gemm_batched_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* const* a, int64_t lda, const T* const* b, int64_t ldb,
                       T beta, T* const* c, int64_t ldc, int64_t count) {
  if (m == 0 || n == 0 || count == 0) return;
  Dims d = check_dims(m, n, k, lda, ldb, ldc);
  if (is_tiny(m, n, k)) {
    for (int64_t i = 0; i < count; ++i) tiny_gemm(ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
    return;
  }
  // The whole batch decides once: enough products for every thread go one per task; fewer are
  // each cut into tiles as a single GEMM would be.
  const int threads = policy().wanted_threads();
  const bool parallel = threads > 1 && static_cast<double>(m) * n * std::max<int64_t>(k, 1) * count >= kParallelWork;
  const GemmTiles g = gemm_tiles(m, n, parallel && count < threads ? threads : 1);
  if (!parallel) {
    for (int64_t i = 0; i < count; ++i) raw_gemm(ta, tb, d, alpha, a[i], b[i], beta, c[i]);
    return;
  }
  run_tasks(count * g.t.count, threads, [&](int64_t task) {
    gemm_tile(ta, tb, d, g, task % g.t.count, alpha, a[task / g.t.count], b[task / g.t.count], beta, c[task / g.t.count]);
  });
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
          double* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* const* a, int64_t lda, const float* const* b,
                  int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t count) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
}
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* const* a, int64_t lda, const double* const* b,
                  int64_t ldb, double beta, double* const* c, int64_t ldc, int64_t count) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
}

float dot(int64_t n, const float* x, int64_t incx, const float* y, int64_t incy) {
  if (n == 0) return 0.0f;
  blasint bn = to_blasint(n, "n"), ix = to_blasint(incx, "incx"), iy = to_blasint(incy, "incy");
  policy();  // OpenBLAS set to one thread before its first call
  return cblas_sdot(bn, x, ix, y, iy);
}
double dot(int64_t n, const double* x, int64_t incx, const double* y, int64_t incy) {
  if (n == 0) return 0.0;
  blasint bn = to_blasint(n, "n"), ix = to_blasint(incx, "incx"), iy = to_blasint(incy, "incy");
  policy();
  return cblas_ddot(bn, x, ix, y, iy);
}

void set_host_threads(int n) {
  DP_CHECK(n >= 1, ValueError, "set_num_threads: expected a positive number of threads, got ", n);
  policy().set_host_threads(n);
}
int host_threads() { return policy().host_threads(); }
int threads_for_current_thread() { return policy().wanted_threads(); }
int openblas_threads() {
  policy();
  return openblas_get_num_threads();
}
int64_t pool_calls() { return host_pool().calls(); }
int gemm_threads(int64_t m, int64_t n, int64_t k) { return threads_for(m, n, k); }
void run_parallel(int64_t tasks, int threads, const std::function<void(int64_t)>& fn) { run_tasks(tasks, threads, fn); }

int parallel_slots() { return policy().wanted_threads(); }

bool range_is_parallel(int64_t n) { return n >= kRangeMin && policy().wanted_threads() > 1; }

void parallel_range(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (!range_is_parallel(n)) return fn(0, n);
  const int64_t pieces = (n + kRangePiece - 1) / kRangePiece;
  parallel_for(pieces, INT_MAX, [&](int64_t i, int) { fn(i * kRangePiece, std::min(n, (i + 1) * kRangePiece)); });
}

void parallel_for(int64_t tasks, int slots, const std::function<void(int64_t task, int slot)>& fn) {
  if (tasks <= 0) return;
  // In a task, BLAS calls and nested parallel_for calls run in the task's thread.
  struct InTask {
    bool saved = t_in_parallel_task;
    InTask() { t_in_parallel_task = true; }
    ~InTask() { t_in_parallel_task = saved; }
  };
  const int threads = policy().wanted_threads();
  if (threads > 1 && slots > 1) {
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex error_mu;
    const std::function<void(int64_t, int)> guarded = [&](int64_t t, int slot) {
      if (failed.load(std::memory_order_relaxed)) return;  // skip what is left after an error
      InTask in_task;
      try {
        fn(t, slot);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    };
    if (run_on_pool(tasks, threads, guarded, slots)) {
      if (error) std::rethrow_exception(error);
      return;
    }
  }
  InTask in_task;
  for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
}

const char* coretype_suggestion() {
  static const char* suggestion = []() -> const char* {
    const std::string core = openblas_get_corename();
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    // OpenBLAS's x86-64 fallbacks for a CPU it cannot place, and cores older than AVX2.
    static const char* const kOld[] = {"Prescott", "Core2",  "Penryn",     "Dunnington", "Nehalem", "Sandybridge",
                                       "Atom",     "Katmai", "Coppermine", "Northwood",  "Banias"};
    const bool old = std::find(std::begin(kOld), std::end(kOld), core) != std::end(kOld);
    if (avx512 && old) return "SkylakeX";
    if (avx2 && old) return "Haswell";
    return "";
  }();
  return suggestion;
}

}  // namespace dp::backend::cpu::blas
