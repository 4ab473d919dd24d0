// DP_DISTRIBUTED_DEBUG's collective fingerprints (gloo_fingerprint.h).
#include "distributed/gloo_fingerprint.h"
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include "dp/core/errors.h"
#include "dp/distributed/errors.h"

namespace dp::distributed::detail {
namespace {

// Fixed-size records: a 64-bit hash of the whole description (so that a difference beyond the
// text kept is still seen), then as much of the text as fits.
constexpr size_t kRecordBytes = 512;
constexpr size_t kTextBytes = kRecordBytes - 8;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string text_of(const uint8_t* record) {
  const char* text = reinterpret_cast<const char*>(record + 8);
  return std::string(text, strnlen(text, kTextBytes));
}

}  // namespace

bool distributed_debug_enabled() {
  const char* env = std::getenv("DP_DISTRIBUTED_DEBUG");
  if (env == nullptr) return false;
  std::string v(env);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "on" || v == "true" || v == "detail") return true;
  if (v.empty() || v == "0" || v == "off" || v == "false") return false;
  throw ValueError(dp::detail::str("DP_DISTRIBUTED_DEBUG='", env, "' is not one of 1, on, true, detail, 0, off, false"));
}

std::string describe_tensors(const std::vector<Tensor>& tensors) {
  std::string out;
  for (size_t i = 0; i < tensors.size(); ++i) out += dp::detail::str(i ? ", " : "", dtype_name(tensors[i].dtype()), '[', tensors[i].numel(), ']');
  return out;
}

void check_same_collective(const GlooCall& call, const OpLabel& label, const std::string& description) {
  const int size = label.size;
  if (size == 1) return;
  std::array<uint8_t, kRecordBytes> mine{};
  const uint64_t hash = fnv1a(description);
  std::memcpy(mine.data(), &hash, 8);
  std::memcpy(mine.data() + 8, description.data(), std::min(description.size(), kTextBytes - 1));
  std::vector<uint8_t> all(kRecordBytes * static_cast<size_t>(size));
  GlooCall fingerprint = call;
  fingerprint.tag = call.tag | 0x80000000u;
  gloo_allgather(fingerprint, mine.data(), all.data(), kRecordBytes);
  const uint8_t* first = all.data();
  for (int r = 1; r < size; ++r) {
    const uint8_t* other = all.data() + static_cast<size_t>(r) * kRecordBytes;
    if (std::memcmp(first, other, kRecordBytes) == 0) continue;
    throw CollectiveMismatch(dp::detail::str(label.str(), ": ranks issued different collectives (DP_DISTRIBUTED_DEBUG): rank ", r, " issued ",
                                             text_of(other), " as collective #", label.sequence, ", rank 0 issued ", text_of(first)),
                             r);
  }
}

}  // namespace dp::distributed::detail
