#include "text.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace dp::train {
namespace {

// Characters a terminal acts on or does not show (as dp::data::CharTokenizer escapes in its
// messages): C0/C1 controls, DEL, soft hyphen, zero-width and bidi controls, line/paragraph
// separators, invisible operators, BOM, interlinear annotation controls, tags.
bool needs_escape(char32_t c) {
  return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xad || (c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
         (c >= 0x2060 && c <= 0x206f) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe0000 && c <= 0xe007f);
}

std::string escaped(char32_t c) {
  char buf[24];
  if (c < 0x80)
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
  else
    std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(c));
  return buf;
}

// The code point at s[i] and its length in bytes, or 0 for bytes that are not UTF-8 (overlong
// forms, surrogates, past U+10FFFF, cut short).
size_t utf8_next(std::string_view s, size_t i, char32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  size_t len;
  char32_t c;
  unsigned char lo = 0x80, hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) {
    len = 2, c = b & 0x1f;
  } else if (b >= 0xe0 && b <= 0xef) {
    len = 3, c = b & 0x0f;
    if (b == 0xe0) lo = 0xa0;
    if (b == 0xed) hi = 0x9f;
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4, c = b & 0x07;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto t = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xbf)) return 0;
    c = (c << 6) | (t & 0x3f);
  }
  cp = c;
  return len;
}

std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
  return out;
}

// "'a' (U+0061), 'b' (U+0062) and 3 more".
std::string some(const std::vector<char32_t>& chars) {
  constexpr size_t kNamed = 5;
  std::string out;
  for (size_t i = 0; i < chars.size() && i < kNamed; ++i) out += (i == 0 ? "" : ", ") + quote_char(chars[i]);
  if (chars.size() > kNamed) out += " and " + std::to_string(chars.size() - kNamed) + " more";
  return out;
}

}  // namespace

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t c = 0;
    const size_t len = utf8_next(text, i, c);
    if (len == 0) {
      out += escaped(static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (c != '\n' && c != '\t' && needs_escape(c))
      out += escaped(c);
    else
      out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::string quote_char(char32_t c) {
  std::string out = "'";
  if (c == '\n')
    out += "\\n";
  else if (c == '\t')
    out += "\\t";
  else if (c == '\r')
    out += "\\r";
  else if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff) || needs_escape(c))
    out += escaped(c);
  else
    out += utf8(c);
  char buf[16];
  std::snprintf(buf, sizeof buf, "' (U+%04X)", static_cast<unsigned>(c));
  return out + buf;
}

std::string vocabulary_difference(const std::vector<char32_t>& first, const std::vector<char32_t>& second, const std::string& first_name,
                                  const std::string& second_name) {
  std::vector<char32_t> only_first, only_second;
  std::set_difference(first.begin(), first.end(), second.begin(), second.end(), std::back_inserter(only_first));
  std::set_difference(second.begin(), second.end(), first.begin(), first.end(), std::back_inserter(only_second));
  std::string out;
  if (!only_first.empty()) out += some(only_first) + (only_first.size() == 1 ? " is" : " are") + " only in " + first_name;
  if (!only_second.empty())
    out += (out.empty() ? "" : "; ") + some(only_second) + (only_second.size() == 1 ? " is" : " are") + " only in " + second_name;
  return out.empty() ? "the same characters" : out;
}

}  // namespace dp::train
