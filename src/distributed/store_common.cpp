#include "distributed/store_common.h"
#include <algorithm>
#include <charconv>
#include "dp/distributed/errors.h"
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
  for (size_t i = 0; i < missing.size() && i < 8; ++i) keys += (i ? ", '" : "'") + printable_text(missing[i]) + "'";
  if (missing.size() > 8) keys += detail::str(" and ", missing.size() - 8, " more");
  throw StoreTimeout(detail::str(store, ": timed out after ", waited.count(), " ms waiting for key(s) ", keys), missing);
}

namespace {

// The length of the UTF-8 sequence at p (1-4) if it is valid and not a C1 control, else 0.
size_t utf8_length(const unsigned char* p, size_t left) {
  const unsigned char c = p[0];
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (left < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  // Overlong forms, surrogates, beyond U+10FFFF, and the C1 controls U+0080-U+009F are refused.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp <= 0x9F)) return 0;
  return n;
}

}  // namespace

std::string printable_text(std::string_view text, size_t max_bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && i < max_bytes) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t len = c >= 0x80 ? utf8_length(p + i, n - i) : 0;
    if (len > 0 && i + len <= max_bytes) {
      out.append(reinterpret_cast<const char*>(p + i), len);
      i += len;
      continue;
    }
    if (len > 0) break;  // a character that does not fit whole
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
    ++i;
  }
  if (i < n) out += detail::str("... (", n, " bytes)");
  return out;
}

}  // namespace dp::distributed
