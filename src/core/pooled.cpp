#include "dp/core/pooled.h"

#include <new>

namespace dp::detail {
namespace {

constexpr size_t kGranule = 16;
constexpr size_t kMaxPooled = 512;
constexpr size_t kClasses = kMaxPooled / kGranule;
constexpr int kPerClass = 256;

size_t class_of(size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }  // 1..16 -> 0

struct Bins {
  void* blocks[kClasses][kPerClass];
  int count[kClasses] = {};
  ~Bins();
};
// Trivially destructible flags: blocks freed after this thread's bins are gone (static
// destruction at exit) go straight to operator delete.
constinit thread_local bool tls_bins_alive = false;
constinit thread_local bool tls_bins_dead = false;
thread_local Bins tls_bins;

Bins::~Bins() {
  tls_bins_alive = false;
  tls_bins_dead = true;
  for (size_t c = 0; c < kClasses; ++c)
    for (int i = 0; i < count[c]; ++i) ::operator delete(blocks[c][i]);
}

Bins* bins() {
  if (!tls_bins_alive) {
    if (tls_bins_dead) return nullptr;
    tls_bins_alive = true;
  }
  return &tls_bins;
}

}  // namespace

void* pooled_allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxPooled) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (Bins* b = bins(); b != nullptr && b->count[c] > 0) return b->blocks[c][--b->count[c]];
  return ::operator new((c + 1) * kGranule);
}

void pooled_deallocate(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes == 0 || bytes > kMaxPooled) {
    ::operator delete(p);
    return;
  }
  const size_t c = class_of(bytes);
  if (Bins* b = bins(); b != nullptr && b->count[c] < kPerClass) {
    b->blocks[c][b->count[c]++] = p;
    return;
  }
  ::operator delete(p);
}

}  // namespace dp::detail
