// bfloat16 GEMMs on oneDNN's matmul primitive (onednn.h).
//
// Facts about the oneDNN we link (Debian's libdnnl 2.6, the one PyTorch 1.13 uses):
//  * Its CPU threading is OpenMP (libgomp). A primitive reads omp_get_max_threads() of the
//    calling thread when it is created (to plan its partition) and when it runs; with one thread it
//    computes entirely in the caller, without starting an OpenMP team. That count is an OpenMP
//    per-thread setting (ICV), so holding it at one around each call bounds that call alone.
//  * On Linux it asks the kernel for the AMX tile state itself (arch_prctl(ARCH_REQ_XCOMP_PERM,
//    XFEATURE_XTILEDATA)) the first time it checks for AMX; ONEDNN_VERBOSE=1 prints the kernel a
//    matmul runs ("brg:avx512_core_amx_bf16" on a Sapphire Rapids).
//  * Creating a primitive costs far more than a small product (it generates code), so every
//    shape's primitive is made once and cached. A primitive may run in several threads at once
//    when each call brings its own scratchpad (scratchpad_mode::user): each call allocates it from
//    dparallel's host allocator, which recycles the block.
//  * Its AMX kernels ("brg:...amx") take dense matrices only. A leading dimension larger than the
//    matrix (a tile of a larger matrix, a column slice) makes it choose "gemm:jit", an AVX-512
//    kernel measured 2-4 times slower here; so an operand that is not dense is first copied into a
//    dense block (one pass over it, cheaper than the product), C computed there and copied back.
//
// Threads (blas.h's policy): oneDNN's own OpenMP team is never used (measured on this loaded
// 2-core machine: its 2-thread products were slower than tiles on the pool, several times so for
// small ones, whose OpenMP threads wait on each other). A call from a device worker, or a small
// one, computes in the calling thread. A large call from a host thread is cut into tiles along the
// longer of C's dimensions (each tile one single-thread oneDNN call with a primitive of its own
// shape: at most two shapes per product), which the caller and the sleeping helpers of the host
// GEMM pool take one by one, as OpenBLAS's tiles are: a thread that loses its core to another
// process takes fewer tiles instead of stalling the product. Cutting the longer dimension keeps
// the operand every tile re-reads small (weights are repacked once per tile: a row tile of a
// [256, 50257] product would repack the whole [768, 50257] weight). The tiles are a fixed function
// of the shape and the thread count. A batch of evenly spaced products (bmm, attention's heads) is
// one primitive over a chunk of the batch per task.
//
// The OpenMP thread count is set through omp_get_max_threads / omp_set_num_threads looked up at run
// time (dlsym): they bind to the OpenMP runtime the process loaded for libdnnl, whichever it is,
// without dparallel linking one of its own. Without them (a oneDNN built sequential) nothing is set.
#include "backend/cpu/onednn.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "backend/cpu/blas.h"
#include "dp/core/allocator.h"
#include "dp/core/device.h"
#include "dp/core/errors.h"

#if DP_HAVE_ONEDNN
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace dp::backend::cpu::onednn {
namespace {

std::atomic<int64_t> g_calls{0}, g_created{0};

bool default_enabled() {
  const char* v = std::getenv("DP_ONEDNN");
  return v == nullptr || std::strcmp(v, "0") != 0;
}
std::atomic<bool>& switch_state() {
  static std::atomic<bool> on{default_enabled()};
  return on;
}

}  // namespace

void set_enabled(bool on) { switch_state().store(on); }
bool enabled() { return switch_state().load(); }
int64_t calls() { return g_calls.load(); }
int64_t primitives_created() { return g_created.load(); }

#if !DP_HAVE_ONEDNN

bool compiled() { return false; }
bool active() { return false; }
const char* implementation() { return ""; }
bool gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t, const BFloat16*, int64_t, float, BFloat16*, int64_t,
               const BFloat16*) {
  return false;
}
bool gemm_bf16_batched(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16* const*, int64_t, const BFloat16* const*, int64_t, float,
                       BFloat16* const*, int64_t, int64_t) {
  return false;
}

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Host products below this many multiply-adds run in one thread. A bfloat16 AMX product is about
// six times faster than a float32 one, so the size at which waking a helper pays off is that much
// larger than blas.cpp's 2^20.
constexpr double kParallelWork = 8.0 * 1048576.0;
// Tiles are multiples of this many rows or columns of C (oneDNN's AMX kernels work on blocks of 16
// rows and 64 columns; shorter tiles would repack the other operand too often).
constexpr int64_t kTileQuantum = 64;
// Tiles per thread: enough that a thread slowed by another process leaves only a small tail, few
// enough that the operand every tile repacks is repacked rarely.
constexpr int64_t kTilesPerThread = 2;
// A bound on the cache (a program with ever-new shapes does not grow it without end).
constexpr size_t kMaxPrimitives = 1024;

// The OpenMP runtime's thread-count ICV of the calling thread, set to one for a scope.
class OneThread {
 public:
  OneThread() {
    static const Fns fns = lookup();
    set_ = fns.set;
    if (fns.get != nullptr && fns.set != nullptr) {
      saved_ = fns.get();
      if (saved_ != 1) set_(1);
    }
  }
  ~OneThread() {
    if (saved_ != 1) set_(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  struct Fns {
    int (*get)() = nullptr;
    void (*set)(int) = nullptr;
  };
  static Fns lookup() {
    Fns f;
    f.get = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    f.set = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    return f;
  }
  void (*set_)(int) = nullptr;
  int saved_ = 1;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// One product's shape as a primitive sees it (a tile is a product of its own shape).
struct Key {
  bool ta, tb, bias;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  // A batch of products in one primitive: element strides between A's, B's and C's matrices
  // (0: the operand is broadcast).
  int64_t batch = 1, sa = 0, sb = 0, sc = 0;
  bool operator<(const Key& o) const {
    return std::tie(ta, tb, bias, m, n, k, lda, ldb, ldc, alpha, beta, batch, sa, sb, sc) <
           std::tie(o.ta, o.tb, o.bias, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta, o.batch, o.sa, o.sb, o.sc);
  }
};

struct Prim {
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratch;
};

// A rows x cols matrix (trans: stored transposed, ld its leading dimension); with batch > 1, a
// [batch, rows, cols] stack of them `stride` elements apart ([1, rows, cols] when stride is 0: the
// same matrix for every product, which oneDNN broadcasts).
memory::desc matrix_desc(int64_t rows, int64_t cols, bool trans, int64_t ld, int64_t batch = 1, int64_t stride = 0) {
  const memory::dims s2 = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  if (batch <= 1) return memory::desc({rows, cols}, memory::data_type::bf16, s2);
  const int64_t extent = (trans ? cols : rows) * ld;  // a valid stride for a batch dim of one
  return memory::desc({stride == 0 ? 1 : batch, rows, cols}, memory::data_type::bf16, {stride == 0 ? extent : stride, s2[0], s2[1]});
}

// The primitive of `key`, created on first use; nullptr when oneDNN has no kernel for it (or only
// its reference loops, far slower than the float32 path).
std::shared_ptr<const Prim> make_prim(const Key& key) {
  auto p = std::make_shared<Prim>();
  p->a = matrix_desc(key.m, key.k, key.ta, key.lda, key.batch, key.sa);
  p->b = matrix_desc(key.k, key.n, key.tb, key.ldb, key.batch, key.sb);
  p->c = matrix_desc(key.m, key.n, false, key.ldc, key.batch, key.sc);
  if (key.bias) p->bias = memory::desc({1, key.n}, memory::data_type::bf16, Tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    OneThread one;  // the partition is planned for the thread count at creation
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->bias, p->c), attr, cpu_engine());
    const char* impl = pd.impl_info_str();
    if (impl == nullptr || std::strncmp(impl, "ref", 3) == 0) return nullptr;
    p->scratch = pd.scratchpad_desc();
    p->matmul = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return nullptr;
  }
  g_created.fetch_add(1, std::memory_order_relaxed);
  return p;
}

std::shared_ptr<const Prim> prim(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Prim> > cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto p = make_prim(key);  // outside the lock: creation generates code (milliseconds)
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxPrimitives) cache.clear();
  return cache.emplace(key, std::move(p)).first->second;
}

// A scratchpad for one call, from the host allocator (recycled between calls).
struct Scratch {
  explicit Scratch(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) ptr_ = allocator_for(Device::cpu()).allocate(bytes_);
  }
  ~Scratch() {
    if (ptr_ != nullptr) allocator_for(Device::cpu()).deallocate(ptr_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

void run(const Prim& p, const BFloat16* a, const BFloat16* b, BFloat16* c, const BFloat16* bias) {
  OneThread one;
  dnnl::engine& e = cpu_engine();
  const size_t scratch_bytes = p.scratch.get_size();
  Scratch scratch(scratch_bytes);
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SRC, memory(p.a, e, const_cast<BFloat16*>(a)));
  args.emplace(DNNL_ARG_WEIGHTS, memory(p.b, e, const_cast<BFloat16*>(b)));
  args.emplace(DNNL_ARG_DST, memory(p.c, e, c));
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(p.bias, e, const_cast<BFloat16*>(bias)));
  if (scratch_bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, e, scratch.get()));
  try {
    p.matmul.execute(thread_stream(), args);
    thread_stream().wait();
  } catch (const dnnl::error& err) {
    throw Error(std::string("bfloat16 matrix product: oneDNN failed (") + err.what() + ")");
  }
}

// How one product (or tile) is handed to oneDNN. Its AMX kernels take dense matrices only: a
// leading dimension larger than the matrix (a tile of a larger one, a column slice) sends oneDNN
// to a kernel without AMX, several times slower. Such an operand is first copied into a dense
// block (A and B in the orientation they are stored in; C computed there and copied back), which costs one pass over
// it, less than the product.
struct Plan {
  bool copy_a, copy_b, copy_c;
  Key key;  // of the product on the operands as oneDNN sees them
};
Plan plan(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, bool bias, float alpha, float beta) {
  Plan p{};
  p.copy_a = m > 1 && k > 1 && (ta ? lda != m : lda != k);
  p.copy_b = k > 1 && n > 1 && (tb ? ldb != k : ldb != n);
  p.copy_c = m > 1 && ldc != n;
  // A copied operand keeps its orientation (a transposed one stays transposed, dense): the copy is
  // then one memcpy per stored row, where transposing it was an element-by-element loop.
  p.key = Key{ta, tb, bias, m, n, k, p.copy_a ? (ta ? m : k) : lda, p.copy_b ? (tb ? k : n) : ldb, p.copy_c ? n : ldc, alpha, beta};
  return p;
}

// dst [rows, cols] dense = the rows of src [rows, cols] that lie ld elements apart.
void copy_matrix(int64_t rows, int64_t cols, const BFloat16* src, int64_t ld, BFloat16* dst) {
  for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * cols, src + i * ld, static_cast<size_t>(cols) * sizeof(BFloat16));
}

void dense_run(const Prim& p, const Plan& pl, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* b,
               int64_t ldb, float beta, BFloat16* c, int64_t ldc, const BFloat16* bias) {
  const size_t e = sizeof(BFloat16);
  Scratch sa(pl.copy_a ? static_cast<size_t>(m * k) * e : 0), sb(pl.copy_b ? static_cast<size_t>(k * n) * e : 0),
      sc(pl.copy_c ? static_cast<size_t>(m * n) * e : 0);
  // Each operand as stored: op(A) = A [m, k], or A^T with A stored [k, m]; likewise B.
  if (pl.copy_a) copy_matrix(ta ? k : m, ta ? m : k, a, lda, static_cast<BFloat16*>(sa.get()));
  if (pl.copy_b) copy_matrix(tb ? n : k, tb ? k : n, b, ldb, static_cast<BFloat16*>(sb.get()));
  BFloat16* cd = pl.copy_c ? static_cast<BFloat16*>(sc.get()) : c;
  if (pl.copy_c && beta != 0.0f) copy_matrix(m, n, c, ldc, cd);
  run(p, pl.copy_a ? static_cast<const BFloat16*>(sa.get()) : a, pl.copy_b ? static_cast<const BFloat16*>(sb.get()) : b, cd, bias);
  if (pl.copy_c)
    for (int64_t i = 0; i < m; ++i) std::memcpy(c + i * ldc, cd + i * n, static_cast<size_t>(n) * e);
}

// Whether p[0 .. count) are `stride` elements apart (stride >= 0; any stride for one pointer).
bool evenly_spaced(const BFloat16* const* p, int64_t count, int64_t& stride) {
  stride = count > 1 ? p[1] - p[0] : 0;
  if (stride < 0) return false;
  for (int64_t i = 2; i < count; ++i)
    if (p[i] - p[0] != i * stride) return false;
  return true;
}

}  // namespace

bool compiled() { return true; }

const char* implementation() {
  static const std::string impl = [] {
    try {
      OneThread one;
      const memory::desc a({64, 64}, memory::data_type::bf16, Tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), cpu_engine());
      const char* s = pd.impl_info_str();
      return std::string(s != nullptr && std::strncmp(s, "ref", 3) != 0 ? s : "");
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return impl.c_str();
}

bool active() { return enabled() && implementation()[0] != '\0'; }

bool gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
               float beta, BFloat16* c, int64_t ldc, const BFloat16* bias) {
  // Non-finite scalars take the float32 path (they would also be keys of the primitive cache).
  if (!active() || m <= 0 || n <= 0 || k <= 0 || (bias != nullptr && alpha != 1.0f) || !std::isfinite(alpha) || !std::isfinite(beta)) return false;
  const bool has_bias = bias != nullptr;
  int threads = static_cast<double>(m) * n * k >= kParallelWork ? blas::gemm_threads(m, n, k) : 1;
  const bool by_rows = m > n;  // the longer of C's dimensions is cut
  const int64_t len = by_rows ? m : n;
  const int64_t want = std::min<int64_t>(threads * kTilesPerThread, len / kTileQuantum);
  if (threads <= 1 || want < 2) {
    const Plan pl = plan(ta, tb, m, n, k, lda, ldb, ldc, has_bias, alpha, beta);
    auto p = prim(pl.key);
    if (!p) return false;
    dense_run(*p, pl, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, bias);
    g_calls.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  int64_t size = (len + want - 1) / want;
  size = (size + kTileQuantum - 1) / kTileQuantum * kTileQuantum;
  const int64_t count = (len + size - 1) / size, last = len - (count - 1) * size;
  auto tile_plan = [&](int64_t l) {
    return by_rows ? plan(ta, tb, l, n, k, lda, ldb, ldc, has_bias, alpha, beta) : plan(ta, tb, m, l, k, lda, ldb, ldc, has_bias, alpha, beta);
  };
  const Plan full_plan = tile_plan(size), tail_plan = tile_plan(last);
  auto full = prim(full_plan.key);
  auto tail = last == size ? full : prim(tail_plan.key);
  if (!full || !tail) return false;
  blas::run_parallel(count, threads, [&](int64_t i) {
    const int64_t lo = i * size;
    const bool is_tail = i == count - 1;
    const Prim& p = is_tail ? *tail : *full;
    const Plan& pl = is_tail ? tail_plan : full_plan;
    const int64_t l = is_tail ? last : size;
    if (by_rows)
      dense_run(p, pl, ta, tb, l, n, k, a + (ta ? lo : lo * lda), lda, b, ldb, beta, c + lo * ldc, ldc, bias);
    else
      dense_run(p, pl, ta, tb, m, l, k, a, lda, b + (tb ? lo * ldb : lo), ldb, beta, c + lo, ldc, bias == nullptr ? nullptr : bias + lo);
  });
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool gemm_bf16_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* const* a, int64_t lda,
                       const BFloat16* const* b, int64_t ldb, float beta, BFloat16* const* c, int64_t ldc, int64_t count) {
  if (!active() || m <= 0 || n <= 0 || k <= 0 || !std::isfinite(alpha) || !std::isfinite(beta)) return false;
  if (count <= 0) return true;
  const int threads = static_cast<double>(m) * n * k * count >= kParallelWork ? blas::gemm_threads(m, n, k * count) : 1;  // the batch's work
  if (threads > 1 && count < threads) {  // few large products: each one cut into tiles
    if (!gemm_bf16(ta, tb, m, n, k, alpha, a[0], lda, b[0], ldb, beta, c[0], ldc)) return false;
    for (int64_t i = 1; i < count; ++i) {
      const bool ok = gemm_bf16(ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
      DP_CHECK(ok, Error, "onednn: a bfloat16 GEMM that ran once could not run again (", m, "x", n, "x", k, ")");
    }
    return true;
  }
  // Matrices evenly spaced in memory (bmm on contiguous or strided batches, attention's heads):
  // chunks of the batch, one primitive call each, spread over the threads; calling a primitive
  // costs microseconds, a small product (64 x 64 x 64) less than one.
  // Matrices that are not dense themselves (heads sliced out of a wider tensor) go one by one,
  // each copied to a dense block first (see Plan).
  const Plan pl = plan(ta, tb, m, n, k, lda, ldb, ldc, false, alpha, beta);
  const bool dense = !pl.copy_a && !pl.copy_b && !pl.copy_c;
  int64_t sa = 0, sb = 0, sc = 0;
  const bool even = evenly_spaced(a, count, sa) && evenly_spaced(b, count, sb) && evenly_spaced(c, count, sc) && sc >= m * ldc;
  if (even && dense && count > 1) {
    const int64_t chunks = std::min<int64_t>(count, threads > 1 ? threads * kTilesPerThread : 1);
    const int64_t size = (count + chunks - 1) / chunks, used = (count + size - 1) / size, last = count - (used - 1) * size;
    auto chunk_key = [&](int64_t len) { return Key{ta, tb, false, m, n, k, lda, ldb, ldc, alpha, beta, len, sa, sb, sc}; };
    auto full = prim(chunk_key(size));
    auto tail = last == size ? full : prim(chunk_key(last));
    if (!full || !tail) return false;
    blas::run_parallel(used, threads, [&](int64_t i) { run(i == used - 1 ? *tail : *full, a[i * size], b[i * size], c[i * size], nullptr); });
    g_calls.fetch_add(count, std::memory_order_relaxed);
    return true;
  }
  auto p = prim(pl.key);
  if (!p) return false;
  blas::run_parallel(count, threads, [&](int64_t i) { dense_run(*p, pl, ta, tb, m, n, k, a[i], lda, b[i], ldb, beta, c[i], ldc, nullptr); });
  g_calls.fetch_add(count, std::memory_order_relaxed);
  return true;
}

#endif

}  // namespace dp::backend::cpu::onednn
