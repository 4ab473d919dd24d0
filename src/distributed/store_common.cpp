#include "distributed/store_common.h"
#include <charconv>
#include "dp/core/errors.h"

namespace dp::distributed {

int64_t parse_counter(const std::string& key, const Bytes& value) {
  int64_t v = 0;
  const char* b = reinterpret_cast<const char*>(value.data());
  const char* e = b + value.size();
  auto [p, ec] = std::from_chars(b, e, v);
  DP_CHECK(ec == std::errc() && p == e && !value.empty(), ValueError, "Store::add: the value of key '", key, "' is not a decimal integer (",
           value.size(), " bytes); add() only works on keys it wrote");
  return v;
}

Bytes counter_bytes(int64_t value) {
  std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

void throw_store_timeout(const std::string& store, const std::vector<std::string>& missing, std::chrono::milliseconds waited) {
  std::string keys;
  for (size_t i = 0; i < missing.size(); ++i) keys += (i ? ", '" : "'") + missing[i] + "'";
  throw StoreTimeout(detail::str(store, ": timed out after ", waited.count(), " ms waiting for key(s) ", keys), missing);
}

}  // namespace dp::distributed
