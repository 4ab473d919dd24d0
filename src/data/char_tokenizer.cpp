// CharTokenizer: UTF-8 decoding with byte offsets, a sorted code-point vocabulary, JSON save/load.
#include "dp/data/char_tokenizer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <nlohmann/json.hpp>
#include "dp/core/json_check.h"
#include "dp/core/serialize.h"
#include "dp/ops/factory.h"

namespace dp::data {

namespace {

constexpr const char* kFormat = "dparallel.CharTokenizer";
constexpr int kVersion = 1;
constexpr uint64_t kMaxVocabFileBytes = uint64_t{64} << 20;  // every code point fits in ~12 MB of JSON

// Where a text comes from, for messages: a file (IOError naming it) or a string (ValueError).
struct Source {
  const char* op;
  std::string path;  // empty: a string argument
  [[noreturn]] void fail(const std::string& what) const {
    if (path.empty()) throw ValueError(std::string(op) + ": the text " + what);
    throw IOError(std::string(op) + ": '" + path + "' " + what);
  }
};

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// The code point at s[i] and the length of its UTF-8 sequence (1-4), or 0 when the bytes there are
// not a valid sequence (Unicode's table 3-7: no overlong forms, no surrogates, nothing past
// U+10FFFF, no sequence cut short by the end).
size_t utf8_next(const unsigned char* s, size_t n, size_t i, char32_t& cp) {
  const unsigned char b = s[i];
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  size_t len;
  char32_t c;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (b >= 0xc2 && b <= 0xdf) {
    len = 2, c = b & 0x1f;
  } else if (b >= 0xe0 && b <= 0xef) {
    len = 3, c = b & 0x0f;
    if (b == 0xe0) lo = 0xa0;  // overlong
    if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4, c = b & 0x07;
    if (b == 0xf0) lo = 0x90;  // overlong
    if (b == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (n - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char t = s[i + k];
    if (k == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xbf)) return 0;
    c = (c << 6) | (t & 0x3f);
  }
  cp = c;
  return len;
}

// Why the bytes at offset i are not UTF-8 (the few bytes there, in hex: never the raw bytes).
[[noreturn]] void fail_utf8(const Source& src, const unsigned char* s, size_t n, size_t i) {
  std::string bytes;
  for (size_t k = i; k < std::min(n, i + 4); ++k) {
    if (k > i) bytes += ' ';
    bytes += hex_byte(s[k]);
  }
  const unsigned char b = s[i];
  const size_t want = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
  if (b >= 0xc2 && b <= 0xf4 && n - i < want) {
    bool prefix_ok = true;
    for (size_t k = i + 1; k < n; ++k) prefix_ok = prefix_ok && (s[k] & 0xc0) == 0x80;
    if (prefix_ok)
      src.fail("is not valid UTF-8 text: it ends in the middle of a character (a " + std::to_string(want) +
               "-byte sequence starting at byte offset " + std::to_string(i) + ": " + bytes + ")");
  }
  src.fail("is not valid UTF-8 text: invalid byte sequence at byte offset " + std::to_string(i) + " (" + bytes +
           (b >= 0x80 && b <= 0xbf ? ": a continuation byte without a lead byte)" : ")") + "; a binary file, or text in another encoding");
}

[[noreturn]] void fail_nul(const Source& src, size_t i) {
  src.fail("contains a NUL byte at byte offset " + std::to_string(i) + ": binary data, not text");
}

void append_utf8(std::string& out, char32_t c) {
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
}

// Characters a terminal would act on or not show: C0/C1 controls, DEL, and the invisible format
// characters (soft hyphen, zero-width and bidi controls, line/paragraph separators, BOM, tags).
bool needs_escape(char32_t c) {
  return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xad || (c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
         (c >= 0x2060 && c <= 0x206f) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe0000 && c <= 0xe007f);
}

// "U+00E9".
std::string code_point(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

// 'x' (U+0078), '\n' (U+000A), '\u{202e}' (U+202E): safe to print.
std::string quote_char(char32_t c) {
  std::string out = "'";
  char buf[24];
  if (c == '\n') {
    out += "\\n";
  } else if (c == '\t') {
    out += "\\t";
  } else if (c == '\r') {
    out += "\\r";
  } else if (c == '\'' || c == '\\') {
    out += '\\';
    out += static_cast<char>(c);
  } else if (c < 0x80 && needs_escape(c)) {
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
    out += buf;
  } else if (needs_escape(c)) {
    std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(c));
    out += buf;
  } else {
    append_utf8(out, c);
  }
  return out + "' (" + code_point(c) + ")";
}

// `text` fit to print: invalid UTF-8 bytes as \xNN, characters that need it escaped as quote_char
// does (a parser's message may quote what it read).
std::string sanitize(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::string out;
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    char32_t c = 0;
    const size_t len = utf8_next(s, text.size(), i, c);
    if (len == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", s[i]);
      out += buf;
      ++i;
      continue;
    }
    if (needs_escape(c)) {
      std::snprintf(buf, sizeof buf, c < 0x80 ? "\\x%02x" : "\\u{%04x}", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

// Calls f(code point, byte offset) for every character of a text that must be valid UTF-8 without
// NUL bytes; fails naming the source otherwise. ASCII bytes take the short path.
template <typename F>
void for_each_char(std::string_view text, const Source& src, F&& f) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      if (b == 0) fail_nul(src, i);
      f(char32_t{b}, i);
      ++i;
      continue;
    }
    char32_t c;
    const size_t len = utf8_next(s, n, i, c);
    if (len == 0) fail_utf8(src, s, n, i);
    f(c, i);
    i += len;
  }
}

std::vector<char32_t> vocabulary_of(std::string_view text, const Source& src) {
  if (text.empty()) src.fail("is empty: a vocabulary needs at least one character");
  std::vector<uint64_t> seen(0x110000 / 64, 0);  // one bit per code point
  for_each_char(text, src, [&](char32_t c, size_t) { seen[c >> 6] |= uint64_t{1} << (c & 63); });
  std::vector<char32_t> chars;
  for (size_t w = 0; w < seen.size(); ++w)
    for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1)
      chars.push_back(static_cast<char32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
  return chars;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// The whole of a regular file (a FIFO or device is refused without blocking), at most max_bytes.
std::string read_file(const std::string& path, const char* op, uint64_t max_bytes, const char* too_big) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw IOError(::dp::detail::str(op, ": cannot open '", path, "': ", errno_text(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    throw IOError(::dp::detail::str(op, ": cannot stat '", path, "': ", errno_text(err)));
  }
  DP_CHECK(S_ISREG(st.st_mode), IOError, op, ": '", path, "' is not a regular file (",
           S_ISDIR(st.st_mode)    ? "a directory"
           : S_ISFIFO(st.st_mode) ? "a FIFO"
                                  : "a device or socket",
           ")");
  const auto size = static_cast<uint64_t>(st.st_size);
  DP_CHECK(size <= max_bytes, IOError, op, ": '", path, "' has ", size, " bytes, more than ", too_big);
  std::string out;
  try {
    out.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(::dp::detail::str(op, ": '", path, "': not enough memory to read its ", size, " bytes"));
  }
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw IOError(::dp::detail::str(op, ": cannot read '", path, "': ", errno_text(err)));
    }
    if (r == 0) break;  // the file shrank while read: take what is there
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<char32_t> chars) : chars_(std::move(chars)), ascii_(128, -1) {
  DP_CHECK(!chars_.empty(), ValueError, "CharTokenizer: the vocabulary is empty");
  for (size_t i = 0; i < chars_.size(); ++i) {
    const char32_t c = chars_[i];
    DP_CHECK(c != 0 && c <= 0x10ffff && !(c >= 0xd800 && c <= 0xdfff), ValueError, "CharTokenizer: vocabulary entry ", i, " is ", code_point(c),
             ", not a character a text can hold (NUL, a surrogate or past U+10FFFF)");
    DP_CHECK(i == 0 || chars_[i - 1] < c, ValueError, "CharTokenizer: vocabulary entry ", i, ", ", quote_char(c), ", does not come after entry ",
             i - 1, ", ", quote_char(chars_[i - 1]), ": the characters must be sorted by code point and distinct");
    if (c < 128) ascii_[c] = static_cast<int32_t>(i);
  }
}

CharTokenizer CharTokenizer::from_text(std::string_view text) { return CharTokenizer(vocabulary_of(text, Source{"CharTokenizer::from_text", ""})); }

CharTokenizer CharTokenizer::from_file(const std::string& path) {
  const std::string text = read_file(path, "CharTokenizer::from_file", UINT64_MAX, "");
  return CharTokenizer(vocabulary_of(text, Source{"CharTokenizer::from_file", path}));
}

int64_t CharTokenizer::id_of(char32_t c) const {
  if (c < 128) return ascii_[c];
  const auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
  return it != chars_.end() && *it == c ? it - chars_.begin() : -1;
}

std::string CharTokenizer::token(int64_t id) const {
  DP_CHECK(id >= 0 && id < vocab_size(), IndexError, "CharTokenizer::token: id ", id, " is out of range for a vocabulary of ", vocab_size(),
           " characters");
  std::string out;
  append_utf8(out, chars_[static_cast<size_t>(id)]);
  return out;
}

Tensor CharTokenizer::encode(std::string_view text) const {
  // Exactly one byte of every character is not a continuation byte: that counts the output.
  int64_t n = 0;
  for (const char ch : text) n += (static_cast<unsigned char>(ch) & 0xc0) != 0x80;
  Tensor out = empty({n}, kInt64);
  int64_t* ids = out.data_ptr<int64_t>();
  int64_t k = 0;
  const Source src{"CharTokenizer::encode", ""};
  for_each_char(text, src, [&](char32_t c, size_t offset) {
    const int64_t id = id_of(c);
    DP_CHECK(id >= 0, ValueError, "CharTokenizer::encode: character ", quote_char(c), " at byte offset ", offset, " is not in the vocabulary (",
             vocab_size(), " characters)");
    ids[k++] = id;  // k < n: a valid character has one lead byte, counted above
  });
  return out;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    DP_CHECK(id >= 0 && id < vocab_size(), IndexError, "CharTokenizer::decode: id ", id, " at position ", i, " is out of range for a vocabulary of ",
             vocab_size(), " characters");
    append_utf8(out, chars_[static_cast<size_t>(id)]);
  }
  return out;
}

std::string CharTokenizer::decode(const Tensor& ids) const {
  DP_CHECK(ids.defined(), ValueError, "CharTokenizer::decode: the ids are an undefined tensor");
  DP_CHECK(is_integral(ids.dtype(), /*include_bool=*/false), DTypeError, "CharTokenizer::decode: expected integer ids, got a tensor of dtype ",
           dtype_name(ids.dtype()));
  DP_CHECK(ids.dim() <= 1, ShapeError, "CharTokenizer::decode: expected a 0- or 1-dimensional tensor of ids, got shape ", ids.size_str(),
           " (decode each row on its own)");
  Tensor host = ids.detach();
  if (!host.device().is_cpu()) host = host.to(Device::cpu());
  if (host.dtype() != kInt64) host = host.to(kInt64);
  return decode(host.reshape({-1}).to_vector<int64_t>());
}

void CharTokenizer::save(const std::string& path) const {
  nlohmann::json chars = nlohmann::json::array();
  for (const char32_t c : chars_) {
    std::string s;
    append_utf8(s, c);
    chars.push_back(std::move(s));
  }
  const nlohmann::json doc = {{"format", kFormat}, {"version", kVersion}, {"vocab_size", chars_.size()}, {"chars", std::move(chars)}};
  ::dp::detail::write_file_atomic(path, doc.dump() + "\n", "CharTokenizer::save");
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  const char* op = "CharTokenizer::load";
  const std::string text = read_file(path, op, kMaxVocabFileBytes, "a vocabulary file can have (64 MiB): not a CharTokenizer vocabulary");
  auto fail = [&](const std::string& what) -> void { throw IOError(::dp::detail::str(op, ": '", path, "' ", what)); };
  if (const std::string problem = ::dp::detail::json_problem(text, 8); !problem.empty()) fail(sanitize(problem));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // json_problem accepted it: not expected
    fail("is not valid JSON (" + sanitize(e.what()) + ")");
  }
  const char* expected = " (expected what CharTokenizer::save writes: {\"format\": \"dparallel.CharTokenizer\", \"version\": 1, \"chars\": [...]})";
  if (!doc.is_object() || !doc.contains("format") || doc.at("format") != kFormat) fail(std::string("is not a CharTokenizer vocabulary") + expected);
  if (!doc.contains("version") || !doc.at("version").is_number_integer() || doc.at("version") != kVersion)
    fail(std::string("has an unsupported version ") + (doc.contains("version") ? doc.at("version").dump(-1, ' ', true).substr(0, 40) : "(none)") +
         expected);
  if (!doc.contains("chars") || !doc.at("chars").is_array() || doc.at("chars").empty())
    fail(std::string("has no characters (\"chars\" must be a non-empty list)") + expected);
  const nlohmann::json& list = doc.at("chars");
  std::vector<char32_t> chars;
  chars.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    if (!e.is_string()) fail("has a vocabulary entry " + std::to_string(i) + " that is not a string");
    const std::string& s = e.get_ref<const std::string&>();
    char32_t c = 0;
    const size_t len = s.empty() ? 0 : utf8_next(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0, c);
    if (len == 0 || len != s.size())
      fail("has a vocabulary entry " + std::to_string(i) + " that is not exactly one character (" + std::to_string(s.size()) + " bytes)");
    if (c == 0) fail("has a vocabulary entry " + std::to_string(i) + " that is NUL, which no text holds");
    if (!chars.empty() && chars.back() >= c)
      fail("has vocabulary entry " + std::to_string(i) + ", " + quote_char(c) + ", after " + quote_char(chars.back()) +
           ": the characters must be sorted by code point and distinct");
    chars.push_back(c);
  }
  if (doc.contains("vocab_size") && !(doc.at("vocab_size").is_number_unsigned() && doc.at("vocab_size").get<uint64_t>() == chars.size()))
    fail("says vocab_size " + doc.at("vocab_size").dump(-1, ' ', true).substr(0, 40) + " but lists " + std::to_string(chars.size()) + " characters");
  return CharTokenizer(std::move(chars));
}

int64_t CharTokenizer::write_token_file(const std::string& text_path, const std::string& token_path) const {
  const char* op = "CharTokenizer::write_token_file";
  const std::string text = read_file(text_path, op, UINT64_MAX, "");
  const Source src{op, text_path};
  if (text.empty()) src.fail("is empty: there is nothing to encode");
  const size_t width = token_dtype_size(token_dtype());
  // An upper bound (a character is at least one byte), cut to what was written.
  std::string bytes(text.size() * width, '\0');
  size_t n = 0;
  for_each_char(text, src, [&](char32_t c, size_t offset) {
    const int64_t id = id_of(c);
    if (id < 0)
      src.fail("has character " + quote_char(c) + " at byte offset " + std::to_string(offset) + ", which is not in the vocabulary (" +
               std::to_string(chars_.size()) + " characters)");
    // Native byte order is little-endian (TokenFileDataset's static_assert), the file's order.
    if (width == 2) {
      const auto v = static_cast<uint16_t>(id);
      std::memcpy(bytes.data() + n * 2, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(id);
      std::memcpy(bytes.data() + n * 4, &v, 4);
    }
    ++n;
  });
  bytes.resize(n * width);
  ::dp::detail::write_file_atomic(token_path, bytes, op);
  return static_cast<int64_t>(n);
}

}  // namespace dp::data
