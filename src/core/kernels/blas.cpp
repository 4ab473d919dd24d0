// OpenBLAS calls and the process-wide BLAS thread policy.
//
// Facts about the OpenBLAS we link (Debian's 0.3.21, pthreads build, USE_THREAD=1):
//  * The thread count is one global (blas_cpu_number): openblas_set_num_threads() changes it for
//    every thread of the process, and a GEMM reads it when it starts to decide whether to split
//    the work over OpenBLAS's single, shared worker pool.
//  * A call that runs with one thread (thread count 1, or a problem below OpenBLAS's own
//    threshold) computes entirely in the calling thread with per-call buffers, so such calls from
//    several threads at once are safe and independent.
//  * Several threads each issuing a *multi-threaded* call at once all queue on the one pool; that
//    oversubscribes the cores at best, and several OpenBLAS releases shipped races there. Its FAQ
//    says an application that is multi-threaded itself should run OpenBLAS with one thread.
//  * Changing the global count while another thread is inside a BLAS call races with that call.
//
// The policy, chosen to be safe first:
//  * Device workers (cpu:0 … cpu:N-1, DataParallel replicas) always call with 1 thread: N
//    replicas on N cores, no shared pool, no oversubscription.
//  * The host thread calls with host_threads() (all cores by default), but a multi-threaded call
//    is *exclusive*: it waits until no other BLAS call is in flight, and no other call starts
//    until it returns. Single-threaded calls are *shared*: any number run at once.
//  * The global count only changes while nothing is in flight (an exclusive call, or a shared one
//    that first waits for the others to drain), and only when it differs from what is needed.
//  * A host call too small for OpenBLAS to split (m*n*k <= 4 * 65536, OpenBLAS's own
//    GEMM_MULTITHREAD_THRESHOLD) takes the shared path when the count already is 1, so small
//    host GEMMs do not serialise with the workers' GEMMs.
// The exclusive/shared gate is a phase-fair reader-writer lock: a waiting exclusive call holds
// new shared calls back (no writer starvation), and the shared calls that were waiting when an
// exclusive call ended go before the next exclusive one (no reader starvation).
#include "core/kernels/blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "dp/core/errors.h"
#include "dp/core/worker.h"

namespace dp::kernels::blas {
namespace {

constexpr double kSerialWork = 4.0 * 65536.0;  // m*n*k at or below which OpenBLAS runs one thread

class Policy {
 public:
  // Created on the first BLAS call or thread query, before this policy ever changed OpenBLAS's
  // count: the host default is OpenBLAS's own (OPENBLAS_NUM_THREADS, else every core).
  Policy() : host_threads_(std::max(1, openblas_get_num_threads())) {}

  // Blocks until this call may run, with OpenBLAS set to the thread count it needs.
  // Returns true for an exclusive (multi-threaded) call.
  bool enter(double work) {
    const int want = wanted_threads();
    std::unique_lock<std::mutex> lock(mu_);
    if (want > 1 && !(work <= kSerialWork && openblas_get_num_threads() == 1)) {
      ++writers_waiting_;
      cv_.wait(lock, [&] { return !writer_ && readers_ == 0 && admit_ == 0 && switching_ == 0; });
      --writers_waiting_;
      writer_ = true;
      set_locked(want);
      return true;
    }
    ++readers_waiting_;
    cv_.wait(lock, [&] { return !writer_ && (writers_waiting_ == 0 || admit_ > 0); });
    if (admit_ > 0) --admit_;
    --readers_waiting_;
    if (openblas_get_num_threads() != 1) {
      // Switching to 1 thread: only while no call is in flight (no shared call can be, since the
      // count is not 1); exclusive calls that arrive meanwhile wait for the switch.
      ++switching_;
      cv_.wait(lock, [&] { return !writer_ && readers_ == 0; });
      --switching_;
      set_locked(1);
    }
    ++readers_;
    return false;
  }

  void leave(bool exclusive) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (exclusive) {
        writer_ = false;
        admit_ = readers_waiting_;
      } else {
        --readers_;
      }
    }
    cv_.notify_all();
  }

  int wanted_threads() {
    if (Worker::current() != nullptr) return 1;
    return host_threads();
  }

  int host_threads() const { return host_threads_.load(std::memory_order_acquire); }

  void set_host_threads(int n) { host_threads_.store(n, std::memory_order_release); }
  int64_t switches() const { return switches_.load(); }

 private:
  void set_locked(int n) {
    if (openblas_get_num_threads() == n) return;
    openblas_set_num_threads(n);
    switches_.fetch_add(1);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int readers_ = 0;          // shared calls in flight
  int readers_waiting_ = 0;
  int writers_waiting_ = 0;
  int admit_ = 0;            // shared calls let past waiting writers after an exclusive call ended
  int switching_ = 0;        // shared calls waiting to set the count back to 1
  bool writer_ = false;      // an exclusive call is in flight
  std::atomic<int> host_threads_;
  std::atomic<int64_t> switches_{0};
};

Policy& policy() {
  static Policy p;
  return p;
}

class Guard {
 public:
  explicit Guard(double work) : exclusive_(policy().enter(work)) {}
  ~Guard() { policy().leave(exclusive_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool exclusive_;
};

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
void tiny_gemm_loop(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row,
                    int64_t b_col, T beta, T* c, int64_t ldc) {
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
void tiny_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
               T* c, int64_t ldc) {
  // op(A)(i, p) = a[i * a_row + p * a_col], op(B)(p, j) = b[p * b_row + j * b_col] (storage as in blas.h).
  const int64_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
  const int64_t b_row = tb ? 1 : ldb, b_col = tb ? ldb : 1;
  if (a_col == 1 && b_row == 1) tiny_gemm_loop<true>(m, n, k, alpha, a, a_row, a_col, b, b_row, b_col, beta, c, ldc);  // x @ w.t()
  else tiny_gemm_loop<false>(m, n, k, alpha, a, a_row, a_col, b, b_row, b_col, beta, c, ldc);
}

template <typename T>
void gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
               T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  Dims d = check_dims(m, n, k, lda, ldb, ldc);
  if (is_tiny(m, n, k)) return tiny_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  Guard g(static_cast<double>(m) * n * std::max<int64_t>(k, 1));
  raw_gemm(ta, tb, d, alpha, a, b, beta, c);
}

template <typename T>
void gemm_batched_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* const* a, int64_t lda, const T* const* b,
                       int64_t ldb, T beta, T* const* c, int64_t ldc, int64_t count) {
  if (m == 0 || n == 0 || count == 0) return;
  Dims d = check_dims(m, n, k, lda, ldb, ldc);
  if (is_tiny(m, n, k)) {
    for (int64_t i = 0; i < count; ++i) tiny_gemm(ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
    return;
  }
  // Each GEMM decides on its own threads inside OpenBLAS; the policy is taken once for the batch.
  Guard g(static_cast<double>(m) * n * std::max<int64_t>(k, 1));
  for (int64_t i = 0; i < count; ++i) raw_gemm(ta, tb, d, alpha, a[i], b[i], beta, c[i]);
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
          double beta, double* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* const* a, int64_t lda,
                  const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t count) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
}
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* const* a, int64_t lda,
                  const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc, int64_t count) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
}

float dot(int64_t n, const float* x, int64_t incx, const float* y, int64_t incy) {
  if (n == 0) return 0.0f;
  blasint bn = to_blasint(n, "n"), ix = to_blasint(incx, "incx"), iy = to_blasint(incy, "incy");
  Guard g(static_cast<double>(n));
  return cblas_sdot(bn, x, ix, y, iy);
}
double dot(int64_t n, const double* x, int64_t incx, const double* y, int64_t incy) {
  if (n == 0) return 0.0;
  blasint bn = to_blasint(n, "n"), ix = to_blasint(incx, "incx"), iy = to_blasint(incy, "incy");
  Guard g(static_cast<double>(n));
  return cblas_ddot(bn, x, ix, y, iy);
}

void set_host_threads(int n) {
  DP_CHECK(n >= 1, ValueError, "set_num_threads: expected a positive number of threads, got ", n);
  policy().set_host_threads(n);
}
int host_threads() { return policy().host_threads(); }
int threads_for_current_thread() { return policy().wanted_threads(); }
int openblas_threads() { return openblas_get_num_threads(); }
int64_t thread_switches() { return policy().switches(); }

}  // namespace dp::kernels::blas
