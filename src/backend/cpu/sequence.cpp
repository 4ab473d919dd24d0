// The CPU kernels of the sequence ops (backend/sequence_kernels.h): tril/triu, sort, topk, cumsum,
// multinomial.
//
// Sort and topk order packed integer keys instead of calling a comparator that tests for NaN: each
// value becomes an unsigned key whose integer order is the value order (NaN above +inf, -0.0 equal
// to 0.0), inverted for a descending order, and, for the dtypes of at most 32 bits on rows of at
// most 2^32 elements, key and position share one uint64 (key << 32 | position). std::sort on those
// words is then a stable sort (equal keys fall back to the position) at the speed of an integer
// sort: std::sort on short rows, an LSD radix sort of the keys on long ones (a radix sort is stable,
// and positions come in ascending). float64 and int64 use (key, position) pairs. topk is
// std::nth_element on the same entries (ties taken in index order) plus a sort of the k chosen. The values are then read back from the input at the
// chosen positions, so they are bit for bit the input's (NaN payloads and the sign of zero kept).
//
// Rows are independent: large inputs are split over threads by rows (not from a device worker,
// where DataParallel's replicas already use the cores).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include "backend/cpu/random_blocks.h"
#include "backend/dispatch.h"
#include "backend/sequence_kernels.h"
#include "dp/core/generator.h"
#include "dp/core/worker.h"

namespace dp::backend::cpu {
namespace {

// ---------------------------------------------------------------- threads

// Below this many elements of work a call stays on the calling thread (a thread start costs tens
// of microseconds).
constexpr int64_t kParallelMinWork = int64_t{1} << 17;

// How many threads to split `items` items of `work_per_item` elements each over.
int64_t plan_threads(int64_t items, int64_t work_per_item) {
  if (items < 2 || Worker::current() != nullptr) return 1;
  const int64_t total = items * std::max<int64_t>(1, work_per_item);
  if (total < 2 * kParallelMinWork) return 1;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::min<int64_t>({hw, 8, total / kParallelMinWork, items});
}

// Calls f(begin, end) for `threads` contiguous ranges of [0, items), the first on the caller. f
// must not throw.
template <typename F>
void run_ranges(int64_t items, int64_t threads, const F& f) {
  if (threads <= 1) {
    f(int64_t{0}, items);
    return;
  }
  const int64_t chunk = (items + threads - 1) / threads;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b0 = t * chunk, b1 = std::min(items, b0 + chunk);
    if (b0 < b1) pool.emplace_back([&f, b0, b1] { f(b0, b1); });
  }
  f(int64_t{0}, std::min(items, chunk));
  for (std::thread& th : pool) th.join();
}

// ---------------------------------------------------------------- tril / triu

void triangle_kernel(const Tensor& out, const Tensor& a, int64_t diagonal, bool lower) {
  const int64_t R = a.size(-2), C = a.size(-1);
  if (out.numel() == 0) return;
  const int64_t rows = a.numel() / C;
  const size_t es = a.element_size();
  // Kept columns of row i: [0, i + d + 1) (lower) or [i + d, C) (upper), clamped to [0, C]; the
  // diagonal is clamped first so that i + d cannot overflow.
  const int64_t d = std::clamp<int64_t>(diagonal, -(R + 1), C + 1);
  const char* src = static_cast<const char*>(a.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  run_ranges(rows, plan_threads(rows, C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % R;
      const int64_t lo = lower ? 0 : std::clamp<int64_t>(i + d, 0, C);
      const int64_t hi = lower ? std::clamp<int64_t>(i + d + 1, 0, C) : C;
      char* o = dst + r * C * es;
      const char* s = src + r * C * es;
      if (lo > 0) std::memset(o, 0, lo * es);  // all-zero bytes are 0 in every dtype
      if (hi > lo) std::memcpy(o + lo * es, s + lo * es, (hi - lo) * es);
      if (hi < C) std::memset(o + hi * es, 0, (C - hi) * es);
    }
  });
}

// ---------------------------------------------------------------- order keys

// An unsigned key whose integer order is the value order: NaN (any payload) above +inf, -0.0 equal
// to 0.0. 32 bits for the dtypes of at most 32 bits, 64 for float64 and int64.
// Branch-free (the sort and topk loops vectorise): one NaN, -0.0 as 0.0, then the sign flip.
inline uint32_t order_key(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  u = v != v ? 0x7FC00000u : u;
  u = u == 0x80000000u ? 0u : u;
  return u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
}
inline uint64_t order_key(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  u = v != v ? 0x7FF8000000000000ull : u;
  u = u == 0x8000000000000000ull ? 0ull : u;
  return u ^ (static_cast<uint64_t>(static_cast<int64_t>(u) >> 63) | 0x8000000000000000ull);
}
inline uint32_t order_key(Half v) { return order_key(static_cast<float>(v)); }
inline uint32_t order_key(BFloat16 v) { return order_key(static_cast<float>(v)); }
inline uint32_t order_key(int32_t v) { return static_cast<uint32_t>(v) ^ 0x80000000u; }
inline uint64_t order_key(int64_t v) { return static_cast<uint64_t>(v) ^ 0x8000000000000000ull; }
inline uint32_t order_key(uint8_t v) { return v; }
inline uint32_t order_key(bool v) { return v ? 1u : 0u; }

template <typename T>
inline constexpr bool kNarrowKey = std::is_same_v<decltype(order_key(std::declval<T>())), uint32_t>;

// A key and its position, ordered by key, then position.
struct WideEntry {
  uint64_t key;
  uint64_t pos;
  bool operator<(const WideEntry& o) const { return key < o.key || (key == o.key && pos < o.pos); }
};

// One row of n elements, element j at x[j * stride]. The entries (key ^ flip, j) in `buf`: packed
// words when `Packed`, WideEntry otherwise.
template <bool Packed, typename T, typename E>
void fill_entries(const T* x, int64_t n, int64_t stride, bool flip, std::vector<E>& buf) {
  buf.resize(static_cast<size_t>(n));
  if constexpr (Packed) {
    const uint64_t f = flip ? 0xFFFFFFFFull : 0;
    for (int64_t j = 0; j < n; ++j) buf[j] = ((static_cast<uint64_t>(order_key(x[j * stride])) ^ f) << 32) | static_cast<uint64_t>(j);
  } else {
    const uint64_t f = flip ? ~uint64_t{0} : 0;
    for (int64_t j = 0; j < n; ++j) buf[j] = WideEntry{static_cast<uint64_t>(order_key(x[j * stride])) ^ f, static_cast<uint64_t>(j)};
  }
}

// The entry of element j (value v).
template <bool Packed, typename T>
inline auto make_entry(T v, int64_t j, bool flip) {
  if constexpr (Packed)
    return ((static_cast<uint64_t>(order_key(v)) ^ (flip ? 0xFFFFFFFFull : 0)) << 32) | static_cast<uint64_t>(j);
  else
    return WideEntry{static_cast<uint64_t>(order_key(v)) ^ (flip ? ~uint64_t{0} : 0), static_cast<uint64_t>(j)};
}

template <bool Packed, typename E>
inline int64_t position(const E& e) {
  if constexpr (Packed)
    return static_cast<int64_t>(e & 0xFFFFFFFFull);
  else
    return static_cast<int64_t>(e.pos);
}

// Runs row_fn(x_row, values_row, indices_row, buf, tmp) for every row of the [outer, n, inner]
// input (element j of a row at j * inner), rows split over threads, each thread with its own
// buffers.
// `out_n` is the length of an output row (n for sort, k for topk).
template <bool Packed, typename T, typename RowFn>
void for_rows(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, int64_t out_n, const RowFn& row_fn) {
  using E = std::conditional_t<Packed, uint64_t, WideEntry>;
  const T* x = a.data_ptr<T>();
  T* v = values.data_ptr<T>();
  int64_t* ix = indices.data_ptr<int64_t>();
  const int64_t rows = s.outer * s.inner;
  run_ranges(rows, plan_threads(rows, s.n * 4), [&](int64_t r0, int64_t r1) {
    std::vector<E> buf, tmp;  // tmp: the radix sort's second buffer
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / s.inner, i = r % s.inner;
      row_fn(x + o * s.n * s.inner + i, v + o * out_n * s.inner + i, ix + o * out_n * s.inner + i, buf, tmp);
    }
  });
}

// Sorts entries (positions ascending on entry) by key, stably: an LSD radix sort of the keys in
// passes of 11 bits (a pass is skipped when every key has the same digit there, as the high bits
// of similar floats often do). O(n) per row against std::sort's O(n log n) compares; for short
// rows std::sort is faster.
constexpr int64_t kRadixMinRow = 1024;

inline uint64_t key_of(uint64_t packed) { return packed >> 32; }
inline uint64_t key_of(const WideEntry& e) { return e.key; }

template <typename E>
void radix_sort(std::vector<E>& a, std::vector<E>& tmp) {
  constexpr int kBits = 11, kDigits = 1 << kBits;
  constexpr int kPasses = std::is_same_v<E, uint64_t> ? 3 : 6;  // 32- or 64-bit keys
  const size_t n = a.size();
  tmp.resize(n);
  std::vector<uint32_t> hist(static_cast<size_t>(kPasses) * kDigits, 0);
  for (const E& x : a) {
    const uint64_t k = key_of(x);
    for (int p = 0; p < kPasses; ++p) ++hist[p * kDigits + ((k >> (p * kBits)) & (kDigits - 1))];
  }
  E* src = a.data();
  E* dst = tmp.data();
  for (int p = 0; p < kPasses; ++p) {
    const int shift = p * kBits;
    uint32_t* h = hist.data() + p * kDigits;
    if (h[(key_of(src[0]) >> shift) & (kDigits - 1)] == n) continue;  // one digit for all: nothing moves
    uint32_t sum = 0;
    for (int d = 0; d < kDigits; ++d) {
      const uint32_t c = h[d];
      h[d] = sum;  // the digit's first slot
      sum += c;
    }
    for (size_t i = 0; i < n; ++i) dst[h[(key_of(src[i]) >> shift) & (kDigits - 1)]++] = src[i];
    std::swap(src, dst);
  }
  if (src != a.data()) std::copy(src, src + n, a.data());
}

template <bool Packed, typename T>
void sort_typed(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, bool descending) {
  const int64_t n = s.n, st = s.inner;
  for_rows<Packed, T>(values, indices, a, s, n, [&](const T* x, T* v, int64_t* ix, auto& buf, auto& tmp) {
    fill_entries<Packed>(x, n, st, descending, buf);
    if (n >= kRadixMinRow && n <= int64_t{0xFFFFFFFF})  // (32-bit digit counts)
      radix_sort(buf, tmp);
    else
      std::sort(buf.begin(), buf.end());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = position<Packed>(buf[j]);
      v[j * st] = x[p * st];
      ix[j * st] = p;
    }
  });
}

template <bool Packed, typename T>
void topk_typed(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, int64_t k, bool largest, bool sorted) {
  const int64_t n = s.n, st = s.inner;
  // Small k: one pass that keeps only the entries below the current k-th smallest (a threshold that
  // tightens as the buffer of candidates fills and is cut back to k), instead of writing an entry
  // for every element.
  const bool streaming = k > 0 && k <= n / 16;
  const size_t cap = static_cast<size_t>(2 * k + 64);
  for_rows<Packed, T>(values, indices, a, s, k, [&](const T* x, T* v, int64_t* ix, auto& buf, auto&) {
    // Ascending entries (keys inverted for largest): the k first entries are the k wanted ones.
    if (streaming) {
      buf.clear();
      buf.reserve(cap);
      const int64_t stride = st;  // locals: the loop's stores into buf cannot alias them
      const bool flip = largest;
      for (int64_t j = 0; j < k; ++j) buf.push_back(make_entry<Packed>(x[j * stride], j, flip));
      auto worst = *std::max_element(buf.begin(), buf.end());
      // Adds e (below the threshold); when the buffer is full, cuts it back to the k best.
      auto keep = [&](const auto& e) {
        buf.push_back(e);
        if (buf.size() == cap) {
          std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end());
          buf.resize(static_cast<size_t>(k));
          worst = buf[k - 1];
        }
      };
      for (int64_t j = k; j < n; ++j) {
        const auto e = make_entry<Packed>(x[j * stride], j, flip);
        if (e < worst) [[unlikely]]
          keep(e);
      }
      std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end());
    } else {
      fill_entries<Packed>(x, n, st, largest, buf);
      if (k < n) std::nth_element(buf.begin(), buf.begin() + k, buf.end());
    }
    if (sorted) std::sort(buf.begin(), buf.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = position<Packed>(buf[j]);
      v[j * st] = x[p * st];
      ix[j * st] = p;
    }
  });
}

void sort_kernel(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, bool descending) {
  backend::dispatch_all(a.dtype(), "sort", [&]<typename T>() {
    if constexpr (kNarrowKey<T>) {
      if (s.n <= int64_t{0xFFFFFFFF}) return sort_typed<true, T>(values, indices, a, s, descending);
    }
    sort_typed<false, T>(values, indices, a, s, descending);
  });
}

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, int64_t k, bool largest, bool sorted) {
  backend::dispatch_numeric(a.dtype(), "topk", [&]<typename T>() {
    if constexpr (kNarrowKey<T>) {
      if (s.n <= int64_t{0xFFFFFFFF}) return topk_typed<true, T>(values, indices, a, s, k, largest, sorted);
    }
    topk_typed<false, T>(values, indices, a, s, k, largest, sorted);
  });
}

// ---------------------------------------------------------------- cumsum

// Running sums along n of an [outer, n, inner] block. Work items: (o, a block of up to kBlock
// columns of inner); each keeps its sums in an accumulator array (float64 for floating types, as
// PyTorch's CPU kernel, int64 for int64), so the inner loop runs over contiguous columns.
template <typename T>
void cumsum_typed(const Tensor& out, const Tensor& a, DimSplit s, bool reverse) {
  using Acc = std::conditional_t<std::is_same_v<T, int64_t>, int64_t, double>;
  constexpr int64_t kBlock = 256;
  const T* x = a.data_ptr<T>();
  T* y = out.data_ptr<T>();
  const int64_t n = s.n, inner = s.inner;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t items = s.outer * blocks;
  run_ranges(items, plan_threads(items, n * std::min(inner, kBlock)), [&](int64_t t0, int64_t t1) {
    Acc acc[kBlock];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kBlock, w = std::min(kBlock, inner - c0);
      const T* xs = x + o * n * inner + c0;
      T* ys = y + o * n * inner + c0;
      if (w == 1) {  // a row along the last dim: one running sum
        Acc sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t jj = reverse ? n - 1 - j : j;
          sum += backend::convert<Acc>(xs[jj * inner]);
          ys[jj * inner] = backend::convert<T>(sum);
        }
        continue;
      }
      std::fill(acc, acc + w, Acc(0));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t jj = reverse ? n - 1 - j : j;
        const T* xr = xs + jj * inner;
        T* yr = ys + jj * inner;
        for (int64_t c = 0; c < w; ++c) {
          acc[c] += backend::convert<Acc>(xr[c]);
          yr[c] = backend::convert<T>(acc[c]);
        }
      }
    }
  });
}

void cumsum_kernel(const Tensor& out, const Tensor& a, DimSplit s, bool reverse) {
  if (out.numel() == 0) return;
  switch (a.dtype()) {
    case kInt64:
      return cumsum_typed<int64_t>(out, a, s, reverse);
    default:
      backend::dispatch_floating(a.dtype(), "cumsum", [&]<typename T>() { cumsum_typed<T>(out, a, s, reverse); });
  }
}

// ---------------------------------------------------------------- multinomial

bool multinomial_check_kernel(const Tensor& probs, int64_t num_samples, bool replacement, MultinomialProblem& bad) {
  const int64_t R = probs.size(0), C = probs.size(1);
  bool ok = true;
  backend::dispatch_floating(probs.dtype(), "multinomial", [&]<typename T>() {
    const T* p = probs.data_ptr<T>();
    for (int64_t r = 0; r < R && ok; ++r) {
      const T* pr = p + r * C;
      // One pass of flags (no early exit, so it vectorises); the first bad entry is looked up only
      // when there is one. All entries non-negative: the row sums to zero iff none is positive.
      using F = std::conditional_t<std::is_same_v<T, double>, double, float>;  // 16-bit floats: exactly as float
      int32_t nonzero = 0, invalid = 0;                                        // C <= 2^24 (the op checks)
      for (int64_t c = 0; c < C; ++c) {
        const F v = backend::convert<F>(pr[c]);
        invalid += !((v >= F(0)) & (v <= std::numeric_limits<F>::max()));
        nonzero += v > F(0);
      }
      if (invalid > 0) {
        for (int64_t c = 0; c < C; ++c) {
          const double v = backend::convert<double>(pr[c]);
          if (!(v >= 0 && std::isfinite(v))) {
            bad = MultinomialProblem{r, c, v, v < 0 ? 1 : 2};
            break;
          }
        }
        ok = false;
      } else if (nonzero == 0) {
        bad = MultinomialProblem{r, 0, 0.0, 3};
        ok = false;
      } else if (!replacement && nonzero < num_samples) {
        bad = MultinomialProblem{r, nonzero, 0.0, 4};
        ok = false;
      }
    }
  });
  return ok;
}

// The 64-bit word of element e of a stream of two words per Philox block, the block cached while
// consecutive elements share it.
class WordStream {
 public:
  WordStream(uint64_t seed, uint64_t first) : seed_(seed), first_(first) {}
  uint64_t word(int64_t e) {
    const uint64_t b = static_cast<uint64_t>(e / 2);
    if (b != block_) {
      philox4x32(seed_, first_ + b, w_);
      block_ = b;
    }
    return cpu::word64(w_, static_cast<int>(e % 2));
  }

 private:
  uint64_t seed_, first_;
  uint64_t block_ = ~uint64_t{0};
  uint32_t w_[4] = {};
};

constexpr int64_t kSampleBlock = 64;

void multinomial_kernel(const Tensor& out, const Tensor& probs, int64_t n, bool replacement, uint64_t seed, uint64_t first) {
  const int64_t R = probs.size(0), C = probs.size(1);
  int64_t* y = out.data_ptr<int64_t>();
  backend::dispatch_floating(probs.dtype(), "multinomial", [&]<typename T>() {
    const T* p = probs.data_ptr<T>();
    run_ranges(R, plan_threads(R, replacement ? C + n * 8 : C * 4), [&](int64_t r0, int64_t r1) {
      WordStream words(seed, first);
      std::vector<double> block_end;
      std::vector<std::pair<double, int64_t>> race;
      for (int64_t r = r0; r < r1; ++r) {
        const T* pr = p + r * C;
        int64_t* yr = y + r * n;
        if (replacement) {
          // Inverse of the cumulative distribution: category c covers [S(c-1), S(c)), so a
          // zero-probability category (an empty interval) is never drawn. The row is cut into
          // blocks of 64 whose sums (eight independent lanes: vectorised) give the cumulative sum
          // at each block's end; a draw binary-searches the blocks, then walks one block.
          const int64_t nb = (C + kSampleBlock - 1) / kSampleBlock;
          block_end.resize(static_cast<size_t>(nb));
          double sum = 0;
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t c0 = b * kSampleBlock, c1 = std::min(C, c0 + kSampleBlock);
            double lane[8] = {};
            int64_t c = c0;
            for (; c + 8 <= c1; c += 8)
              for (int l = 0; l < 8; ++l) lane[l] += backend::convert<double>(pr[c + l]);
            for (; c < c1; ++c) lane[0] += backend::convert<double>(pr[c]);
            sum += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
            block_end[b] = sum;
          }
          // The last category with a non-zero probability in [c0, c1) (one exists where called).
          auto last_nonzero = [&](int64_t c0, int64_t c1) {
            for (int64_t c = c1 - 1; c > c0; --c)
              if (backend::convert<double>(pr[c]) > 0) return c;
            return c0;
          };
          for (int64_t s = 0; s < n; ++s) {
            const double x = cpu::u53(words.word(r * n + s)) * sum;
            const int64_t b = std::upper_bound(block_end.begin(), block_end.end(), x) - block_end.begin();
            if (b == nb) {  // u * sum rounded up to sum
              yr[s] = last_nonzero(0, C);
              continue;
            }
            const int64_t c0 = b * kSampleBlock, c1 = std::min(C, c0 + kSampleBlock);
            double acc = b > 0 ? block_end[b - 1] : 0.0;
            int64_t chosen = -1;
            for (int64_t c = c0; c < c1 && chosen < 0; ++c) {
              acc += backend::convert<double>(pr[c]);
              if (x < acc) chosen = c;
            }
            // A walk that rounds differently from the block sum and ends below x: the block's last
            // non-zero category (the block holds x, so it has one).
            yr[s] = chosen >= 0 ? chosen : last_nonzero(c0, c1);
          }
        } else {
          // The exponential race: the n largest p / E, E ~ Exp(1) = -log(u), u in (0, 1] (the
          // check made sure that at least n are non-zero).
          race.resize(static_cast<size_t>(C));
          for (int64_t c = 0; c < C; ++c) {
            const double u = philox::u53_open_zero(words.word(r * C + c));
            const double v = backend::convert<double>(pr[c]);
            race[c] = {v > 0 ? v / -std::log(u) : -1.0, c};  // u == 1 gives +inf; a zero never wins
          }
          auto later = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
            return a.first > b.first || (a.first == b.first && a.second < b.second);
          };
          if (n < C) std::nth_element(race.begin(), race.begin() + n, race.end(), later);
          std::sort(race.begin(), race.begin() + n, later);
          for (int64_t s = 0; s < n; ++s) yr[s] = race[s].second;
        }
      }
    });
  });
}

}  // namespace

void register_sequence_kernels() {
  DP_REGISTER_KERNEL(CPU, triangle_kernel);
  DP_REGISTER_KERNEL(CPU, sort_kernel);
  DP_REGISTER_KERNEL(CPU, topk_kernel);
  DP_REGISTER_KERNEL(CPU, cumsum_kernel);
  DP_REGISTER_KERNEL(CPU, multinomial_kernel);
  DP_REGISTER_KERNEL(CPU, multinomial_check_kernel);
}

}  // namespace dp::backend::cpu
