// The CPU kernels of the sequence ops (backend/sequence_kernels.h): tril/triu, sort, topk, cumsum,
// multinomial.
//
// Sort and topk order packed integer keys instead of calling a comparator that tests for NaN: each
// value becomes an unsigned key whose integer order is the value order (NaN above +inf, -0.0 equal
// to 0.0), inverted for a descending order, and, for the dtypes of at most 32 bits on rows of at
// most 2^32 elements, key and position share one uint64 (key << 32 | position). std::sort on those
// words is then a stable sort (equal keys fall back to the position) at the speed of an integer
// sort; topk is std::nth_element on them (ties taken in index order) plus a sort of the k chosen.
// float64 and int64 use (key, position) pairs. The values are then read back from the input at the
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

namespace dp::backend {
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

void triangle_cpu(const Tensor& out, const Tensor& a, int64_t diagonal, bool lower) {
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
inline uint32_t order_key(float v) {
  uint32_t u;
  if (std::isnan(v)) {
    u = 0x7FC00000u;
  } else {
    if (v == 0.0f) v = 0.0f;
    std::memcpy(&u, &v, sizeof u);
  }
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline uint64_t order_key(double v) {
  uint64_t u;
  if (std::isnan(v)) {
    u = 0x7FF8000000000000ull;
  } else {
    if (v == 0.0) v = 0.0;
    std::memcpy(&u, &v, sizeof u);
  }
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
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

template <bool Packed, typename E>
inline int64_t position(const E& e) {
  if constexpr (Packed)
    return static_cast<int64_t>(e & 0xFFFFFFFFull);
  else
    return static_cast<int64_t>(e.pos);
}

// Runs row_fn(x_row, values_row, indices_row, in_stride, out_stride, buf) for every row of the
// [outer, n, inner] input, rows split over threads, each thread with its own entry buffer.
// `out_n` is the length of an output row (n for sort, k for topk).
template <bool Packed, typename T, typename RowFn>
void for_rows(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, int64_t out_n, const RowFn& row_fn) {
  using E = std::conditional_t<Packed, uint64_t, WideEntry>;
  const T* x = a.data_ptr<T>();
  T* v = values.data_ptr<T>();
  int64_t* ix = indices.data_ptr<int64_t>();
  const int64_t rows = s.outer * s.inner;
  run_ranges(rows, plan_threads(rows, s.n * 4), [&](int64_t r0, int64_t r1) {
    std::vector<E> buf;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / s.inner, i = r % s.inner;
      row_fn(x + o * s.n * s.inner + i, v + o * out_n * s.inner + i, ix + o * out_n * s.inner + i, buf);
    }
  });
}

template <bool Packed, typename T>
void sort_typed(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, bool descending) {
  const int64_t n = s.n, st = s.inner;
  for_rows<Packed, T>(values, indices, a, s, n, [&](const T* x, T* v, int64_t* ix, auto& buf) {
    fill_entries<Packed>(x, n, st, descending, buf);
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
  for_rows<Packed, T>(values, indices, a, s, k, [&](const T* x, T* v, int64_t* ix, auto& buf) {
    // Ascending keys (inverted for largest): the k first entries are the k wanted ones.
    fill_entries<Packed>(x, n, st, largest, buf);
    if (k < n) std::nth_element(buf.begin(), buf.begin() + k, buf.end());
    if (sorted) std::sort(buf.begin(), buf.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = position<Packed>(buf[j]);
      v[j * st] = x[p * st];
      ix[j * st] = p;
    }
  });
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, bool descending) {
  kernels::dispatch_all(a.dtype(), "sort", [&]<typename T>() {
    if constexpr (kNarrowKey<T>) {
      if (s.n <= int64_t{0xFFFFFFFF}) return sort_typed<true, T>(values, indices, a, s, descending);
    }
    sort_typed<false, T>(values, indices, a, s, descending);
  });
}

void topk_cpu(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit s, int64_t k, bool largest, bool sorted) {
  kernels::dispatch_numeric(a.dtype(), "topk", [&]<typename T>() {
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
          sum += kernels::convert<Acc>(xs[jj * inner]);
          ys[jj * inner] = kernels::convert<T>(sum);
        }
        continue;
      }
      std::fill(acc, acc + w, Acc(0));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t jj = reverse ? n - 1 - j : j;
        const T* xr = xs + jj * inner;
        T* yr = ys + jj * inner;
        for (int64_t c = 0; c < w; ++c) {
          acc[c] += kernels::convert<Acc>(xr[c]);
          yr[c] = kernels::convert<T>(acc[c]);
        }
      }
    }
  });
}

void cumsum_cpu(const Tensor& out, const Tensor& a, DimSplit s, bool reverse) {
  if (out.numel() == 0) return;
  switch (a.dtype()) {
    case kInt64:
      return cumsum_typed<int64_t>(out, a, s, reverse);
    default:
      kernels::dispatch_floating(a.dtype(), "cumsum", [&]<typename T>() { cumsum_typed<T>(out, a, s, reverse); });
  }
}

// ---------------------------------------------------------------- multinomial

bool multinomial_check_cpu(const Tensor& probs, int64_t num_samples, bool replacement, MultinomialProblem& bad) {
  const int64_t R = probs.size(0), C = probs.size(1);
  bool ok = true;
  kernels::dispatch_floating(probs.dtype(), "multinomial", [&]<typename T>() {
    const T* p = probs.data_ptr<T>();
    for (int64_t r = 0; r < R && ok; ++r) {
      double sum = 0;
      int64_t nonzero = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = kernels::convert<double>(p[r * C + c]);
        if (!std::isfinite(v) || v < 0) {
          bad = MultinomialProblem{r, c, v, v < 0 ? 1 : 2};
          ok = false;
          return;
        }
        sum += v;
        nonzero += v > 0;
      }
      if (sum <= 0) {
        bad = MultinomialProblem{r, 0, sum, 3};
        ok = false;
      } else if (!replacement && nonzero < num_samples) {
        bad = MultinomialProblem{r, nonzero, sum, 4};
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

void multinomial_cpu(const Tensor& out, const Tensor& probs, int64_t n, bool replacement, uint64_t seed, uint64_t first) {
  const int64_t R = probs.size(0), C = probs.size(1);
  int64_t* y = out.data_ptr<int64_t>();
  kernels::dispatch_floating(probs.dtype(), "multinomial", [&]<typename T>() {
    const T* p = probs.data_ptr<T>();
    run_ranges(R, plan_threads(R, replacement ? C + n * 8 : C * 4), [&](int64_t r0, int64_t r1) {
      WordStream words(seed, first);
      std::vector<double> cdf;
      std::vector<std::pair<double, int64_t>> race;
      for (int64_t r = r0; r < r1; ++r) {
        const T* pr = p + r * C;
        int64_t* yr = y + r * n;
        if (replacement) {
          // Inverse of the cumulative distribution: category c covers [cdf[c-1], cdf[c]), so a
          // zero-probability category (an empty interval) is never drawn.
          cdf.resize(static_cast<size_t>(C));
          double sum = 0;
          int64_t last_nonzero = 0;
          for (int64_t c = 0; c < C; ++c) {
            const double v = kernels::convert<double>(pr[c]);
            sum += v;
            cdf[c] = sum;
            if (v > 0) last_nonzero = c;
          }
          for (int64_t s = 0; s < n; ++s) {
            const double x = cpu::u53(words.word(r * n + s)) * sum;
            const int64_t c = std::upper_bound(cdf.begin(), cdf.end(), x) - cdf.begin();
            yr[s] = c < C ? c : last_nonzero;  // u * sum rounded up to sum: the last category drawn
          }
        } else {
          // The exponential race: the n largest p / E, E ~ Exp(1) = -log(u), u in (0, 1] (the
          // check made sure that at least n are non-zero).
          race.resize(static_cast<size_t>(C));
          for (int64_t c = 0; c < C; ++c) {
            const double u = static_cast<double>((words.word(r * C + c) >> 11) + 1) * cpu::k2pow53inv;
            const double v = kernels::convert<double>(pr[c]);
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

void register_cpu_sequence_kernels() {
  triangle_kernel.set(DeviceType::CPU, &triangle_cpu);
  sort_kernel.set(DeviceType::CPU, &sort_cpu);
  topk_kernel.set(DeviceType::CPU, &topk_cpu);
  cumsum_kernel.set(DeviceType::CPU, &cumsum_cpu);
  multinomial_kernel.set(DeviceType::CPU, &multinomial_cpu);
  multinomial_check.set(DeviceType::CPU, &multinomial_check_cpu);
}

}  // namespace dp::backend
