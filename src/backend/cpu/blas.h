#pragma once
// The only door to OpenBLAS (the one file that includes cblas.h is blas.cpp). Every call goes
// through a process-wide thread policy; see blas.cpp for the reasoning.
//
//   - OpenBLAS itself always runs one thread per call (its own spinning pool is never used), so
//     calls from any number of threads run at once.
//   - A call from a device worker thread (Worker::current() != nullptr) runs in that thread, so
//     replicas on cpu:0 ... cpu:N-1 each keep to their own core.
//   - A large call from any other thread (the host) is cut into tiles that host_threads() threads
//     take one by one: the caller and the helpers of dparallel's host GEMM pool (default:
//     OPENBLAS_NUM_THREADS, else all cores; dp::set_num_threads changes it). Helpers sleep
//     between calls; a thread that loses its core to another process takes fewer tiles.

// Matrices are row-major. trans = the operand is stored transposed (its memory holds op(X)^T
// row-major, leading dimension ld), which is how a transposed view (x.t()) is passed without a copy.
#include <cstdint>
#include <functional>

namespace dp::backend::cpu::blas {

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C. With beta == 0, C need not be initialised.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
          double beta, double* c, int64_t ldc);

// `count` GEMMs of one shape under one policy decision: C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i].
void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* const* a, int64_t lda, const float* const* b,
                  int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t count);
void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* const* a, int64_t lda,
                  const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc, int64_t count);

// sum_i x[i*incx] * y[i*incy] (incx, incy >= 1).
float dot(int64_t n, const float* x, int64_t incx, const float* y, int64_t incy);
double dot(int64_t n, const double* x, int64_t incx, const double* y, int64_t incy);

// Threads a large call from a host (non-worker) thread uses: the caller and n - 1 pool helpers. n >= 1.
void set_host_threads(int n);
int host_threads();
// Threads a large BLAS call made by the calling thread would use now (1 on a device worker).
int threads_for_current_thread();
// Runs fn(task, slot) for every task in [0, tasks), for kernels that split their own work (the
// fused attention kernels). From a host thread, up to `slots` threads (at most host_threads()) take
// the tasks one at a time from a shared counter: the caller and the helpers of the host GEMM pool,
// so no threads are started per call (and a smaller `slots` leaves the pool's size alone). From a
// device worker, inside another parallel_for task, when the pool is busy with another host
// thread's call, or with one slot, every task runs in the calling thread, in order. `slot`
// (0 <= slot < slots) names the thread running the task, for per-thread scratch memory: two tasks
// with one slot never run at once. BLAS calls made inside fn run single-threaded in fn's thread.
// After an exception in fn the tasks not yet started are skipped and the first exception is
// rethrown here once all threads have left.
void parallel_for(int64_t tasks, int slots, const std::function<void(int64_t task, int slot)>& fn);
// The slots a parallel_for issued by the calling thread would use now: host_threads() on a host
// thread, 1 on a device worker or inside a parallel_for task. Size per-thread scratch with it.
int parallel_slots();
// Memory-bound passes over large arrays (element-wise kernels, copies, fills, optimizer updates,
// norms): fn(begin, end) for pieces that cover [0, n) once, run by parallel_slots() threads as
// parallel_for runs its tasks. Pieces start at multiples of kRangeAlign elements (whole cache lines
// and vectors for every element type, so a piece's vector loop covers what a single call's would)
// and hold about kRangePiece elements; below kRangeMin elements, or with one slot, fn(0, n) runs
// in the calling thread. Every element is computed exactly as by one call over [0, n).
constexpr int64_t kRangeAlign = 64;
constexpr int64_t kRangePiece = int64_t{1} << 16;
constexpr int64_t kRangeMin = int64_t{1} << 18;
static_assert(kRangePiece % kRangeAlign == 0, "pieces start at multiples of kRangeAlign");
void parallel_range(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);
// Whether parallel_range(n, ...) from the calling thread would use more than one thread.
bool range_is_parallel(int64_t n);
// The OPENBLAS_CORETYPE for this CPU's best kernels when OpenBLAS chose older ones, else "".
const char* coretype_suggestion();
// The thread count OpenBLAS is set to: always 1 (for tests).
int openblas_threads();
// How many calls the host GEMM pool has run in this process (for tests).
int64_t pool_calls();

// The same policy for the other GEMM library behind it (onednn.h): the threads a product of
// m x n x k issued by the calling thread uses now (1 on a device worker, or when it is too small
// for a helper to pay off; else host_threads()), and fn(0) ... fn(tasks - 1) run by the caller and
// threads - 1 helpers of the host GEMM pool, taking tasks one by one (all in the caller when the
// pool is busy or threads == 1).
int gemm_threads(int64_t m, int64_t n, int64_t k);
void run_parallel(int64_t tasks, int threads, const std::function<void(int64_t)>& fn);

}  // namespace dp::backend::cpu::blas
