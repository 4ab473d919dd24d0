// load_file(): the safetensors reader. The header is read and validated completely (the same rules as
// the reference reader, plus duplicate names) before any tensor memory is allocated, so a corrupt file
// can't make it allocate absurd amounts; then each tensor's bytes are read with one pread straight
// into its own storage (no staging buffer, no second copy for CPU devices).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <unordered_set>
#include <system_error>
#include <vector>
#include <nlohmann/json.hpp>
#include "dp/core/device_registry.h"
#include "dp/core/serialize.h"

namespace dp {

namespace {

using nlohmann::json;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

struct Info {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// One tensor entry of the header as parsed (checked by Reader::parse_entry).
struct HeaderEntry {
  std::string name;
  std::string dtype;  // when dtype_ok
  bool has_dtype = false, dtype_ok = false;
  bool has_shape = false, shape_ok = false;
  bool has_offsets = false, offsets_ok = false;
  std::vector<uint64_t> shape, offsets;
  std::string dtype_text, shape_text, offsets_text;  // clipped JSON, for messages
};

struct Header {
  std::vector<HeaderEntry> entries;
  std::map<std::string, std::string> metadata;
};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is rejected below; no effect on files).
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) io_error("cannot open the file", errno);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) io_error("cannot stat the file", errno);
    if (!S_ISREG(st.st_mode)) throw IOError(prefix() + (S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file"));
    size_ = static_cast<uint64_t>(st.st_size);
#ifdef POSIX_FADV_SEQUENTIAL
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  ~Reader() {
    if (fd_ >= 0) ::close(fd_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  SafetensorsFile read(Device device);

 private:
  std::string prefix() const { return "load_file: '" + path_ + "': "; }
  [[noreturn]] void io_error(const std::string& what, int err) const {
    throw IOError(detail::str(prefix(), what, ": ", errno_text(err), " (errno ", err, ")"));
  }
  [[noreturn]] void truncated(const std::string& what) const { throw IOError(prefix() + "file is truncated: " + what); }
  [[noreturn]] void bad(const std::string& what) const { throw ValueError(prefix() + what); }

  // Exactly n bytes at `offset`, or an IOError (a file shrinking under us reads short).
  void pread_full(void* dst, uint64_t n, uint64_t offset) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t(1) << 30));
      ssize_t r = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        io_error(detail::str("read of ", n, " bytes at offset ", offset, " failed"), errno);
      }
      if (r == 0) truncated(detail::str("unexpected end of file at offset ", offset, " (the file shrank while being read)"));
      p += r;
      n -= static_cast<uint64_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

  Header parse_header(const std::string& text) const;
  Info parse_entry(const HeaderEntry& e) const;
  void check_layout(std::vector<Info>& infos, uint64_t data_size) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as Rust's from_utf8
// demands; returns the offset of the first bad byte or npos.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else
      return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string::npos;
}

// Input text in a message: at most kClip bytes of it (cut on a character boundary), so a hostile
// file's 100 MB name or value never ends up in an exception.
constexpr size_t kClip = 200;
std::string clip(const std::string& s) {
  if (s.size() <= kClip) return s;
  size_t n = kClip;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;  // not inside a UTF-8 sequence
  return s.substr(0, n) + "... (" + std::to_string(s.size()) + " bytes)";
}

// Deeper nesting than this is refused (the format needs 3: {name: {"shape": [..]}}); serde_json, the
// reference reader's parser, stops at 128 as well. nlohmann's SAX parser is iterative, and nothing
// here recurses, so any depth below it is safe and deeper input stops the parse.
constexpr int kMaxDepth = 128;

// The header, parsed with nlohmann's SAX interface straight into what the reader needs: the tensor
// entries (dtype, shape, data_offsets) and the "__metadata__" strings. Values of fields we ignore
// (a tensor entry's unknown keys, which the reference ignores too) are skipped without being stored,
// so a 100 MB header costs about its own size, not a DOM several times larger. Values that end up in
// a message are recorded as compact JSON text, clipped. The first content error is kept and the
// parse goes on (a syntax error later in the header wins: it says more about the file).
class HeaderParser {
 public:
  using json = nlohmann::json;
  using Entry = HeaderEntry;
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  std::string error;         // the first content error (message after the file prefix)
  std::string syntax_error;  // the parser's, clipped
  bool root_object = false;

  bool null() { return scalar("null"); }
  bool boolean(bool v) { return scalar(v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) { return scalar(std::to_string(v), Num::Negative, 0); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(std::to_string(v), Num::Unsigned, v); }
  bool number_float(json::number_float_t, const json::string_t& s) { return scalar(s); }
  bool string(json::string_t& v) {
    if (skipping() || capture_.active) return scalar(quoted(v));
    if (depth_ == 2 && ctx_ == Ctx::Metadata) {
      if (!failed()) metadata.emplace(key_, std::move(v));
      return true;
    }
    if (depth_ == 2 && ctx_ == Ctx::Entry && field_ == Field::Dtype) {
      if (!failed()) {
        entry_.dtype = v;
        entry_.dtype_ok = true;
      }
      return true;
    }
    return scalar(quoted(v));
  }
  bool binary(json::binary_t&) { return scalar("<binary>"); }

  bool start_object(std::size_t) {
    if (!open()) return false;
    if (capture_.active) return capture_open('{');
    if (depth_ == 1) {  // the header itself
      root_object = true;
      return true;
    }
    if (depth_ == 2 && !skip_depth_) {  // a top-level value: the metadata or a tensor entry
      ctx_ = top_key_ == "__metadata__" ? Ctx::Metadata : Ctx::Entry;
      if (ctx_ == Ctx::Entry) {
        entry_ = Entry{};
        entry_.name = top_key_;
      }
      return true;
    }
    if (!skip_depth_) begin_nested('{');
    return true;
  }
  bool end_object() {
    if (capture_.active) capture_close('}');
    if (depth_ == 2 && ctx_ == Ctx::Entry && !skip_depth_ && !failed()) entries.push_back(std::move(entry_));
    if (depth_ == 2) ctx_ = Ctx::None;
    return close();
  }
  bool start_array(std::size_t) {
    if (!open()) return false;
    if (capture_.active) return capture_open('[');
    if (depth_ == 1) return true;  // the header is an array: refused after the parse
    if (!skip_depth_) begin_nested('[');
    return true;
  }
  bool end_array() {
    if (capture_.active) capture_close(']');
    return close();
  }
  bool key(json::string_t& k) {
    if (capture_.active) {
      capture_key(k);
      return true;
    }
    if (skipping()) return true;
    if (depth_ == 1) {
      if (!seen_.insert(k).second) fail(detail::str("header names '", clip(k), "' more than once"));
      top_key_ = k;
      return true;
    }
    if (depth_ == 2 && ctx_ == Ctx::Metadata) {
      key_ = k;
      return true;
    }
    if (depth_ == 2 && ctx_ == Ctx::Entry) {
      field_ = k == "dtype" ? Field::Dtype : k == "shape" ? Field::Shape : k == "data_offsets" ? Field::Offsets : Field::Other;
      bool* has = field_ == Field::Dtype     ? &entry_.has_dtype
                  : field_ == Field::Shape   ? &entry_.has_shape
                  : field_ == Field::Offsets ? &entry_.has_offsets
                                             : nullptr;
      if (has && *has) fail(detail::str("tensor '", clip(entry_.name), "': \"", k, "\" is given more than once"));
      if (has) *has = true;
      return true;
    }
    return true;
  }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    syntax_error = clip(ex.what());
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool failed() const { return !error.empty(); }

 private:
  enum class Ctx { None, Metadata, Entry };
  enum class Field { Dtype, Shape, Offsets, Other };
  enum class Num { No, Negative, Unsigned };
  // A value being recorded as text: anything that may end up in a message, and the lists
  // (shape, data_offsets) whose numbers are collected on the way.
  struct Capture {
    bool active = false;
    int depth = 0;  // depth_ when the value began (outside it)
    std::string text;
    bool clipped = false;
    std::vector<char> first;  // per open container inside the value: no element yet
    bool after_key = false;
    bool is_list = false, list_ok = true;
    std::vector<uint64_t> items;  // unsigned numbers directly inside the list
  };

  static std::string quoted(const std::string& s) {
    // The text only goes into messages; invalid UTF-8 can't occur (checked before the parse).
    try {
      return json(s.size() > kClip ? s.substr(0, kClip) : s).dump();
    } catch (const json::exception&) {
      return "\"?\"";
    }
  }

  bool open() {
    if (++depth_ > kMaxDepth) {
      too_deep_ = true;
      return false;  // stops the parse
    }
    return true;
  }
  bool close() {
    if (capture_.active && depth_ - 1 == capture_.depth) finish_capture();
    if (skip_depth_ && depth_ == skip_depth_) skip_depth_ = 0;
    --depth_;
    return true;
  }
  bool skipping() const { return skip_depth_ != 0; }

  void fail(const std::string& message) {
    if (error.empty()) error = message;
  }

  // ---- where a value goes, by depth: 1 inside the header, 2 inside a tensor entry or the metadata
  // A container value starting at the current depth_ (already incremented).
  void begin_nested(char bracket) {
    const int outer = depth_ - 1;
    if (outer == 1 || (outer == 2 && (ctx_ == Ctx::Metadata || field_ != Field::Other))) {
      start_capture(outer, bracket == '[' && outer == 2 && (field_ == Field::Shape || field_ == Field::Offsets));
      capture_open_first(bracket);
      return;
    }
    skip_depth_ = depth_;  // an ignored field's value (or something inside a list): skip it
  }
  bool scalar(const std::string& text, Num num = Num::No, uint64_t u = 0) {
    if (skipping()) return true;
    if (capture_.active) {
      if (capture_.is_list && depth_ == capture_.depth + 1) {
        if (num == Num::Unsigned)
          capture_.items.push_back(u);
        else
          capture_.list_ok = false;
      }
      capture_append_value(text);
      return true;
    }
    if (depth_ == 1 || (depth_ == 2 && (ctx_ == Ctx::Metadata || field_ != Field::Other))) {
      start_capture(depth_, false);
      capture_append_value(text);
      finish_capture();
    }
    return true;
  }

  void start_capture(int depth, bool list) {
    capture_ = Capture{};
    capture_.active = true;
    capture_.depth = depth;
    capture_.is_list = list;
  }
  void append(const std::string& s) {
    if (capture_.clipped) return;
    capture_.text += s;
    if (capture_.text.size() > kClip) {
      capture_.text.resize(kClip);
      capture_.text += "...";
      capture_.clipped = true;
    }
  }
  void capture_append_value(const std::string& text) {
    if (!capture_.first.empty()) {
      if (capture_.after_key)
        capture_.after_key = false;
      else if (!capture_.first.back())
        append(",");
      capture_.first.back() = 0;
    }
    append(text);
  }
  void capture_open_first(char bracket) {
    append(std::string(1, bracket));
    capture_.first.push_back(1);
  }
  bool capture_open(char bracket) {
    if (capture_.is_list && depth_ == capture_.depth + 2) capture_.list_ok = false;  // a list inside the list
    capture_append_value(std::string(1, bracket));
    capture_.first.push_back(1);
    return true;
  }
  void capture_close(char bracket) {
    append(std::string(1, bracket));
    if (!capture_.first.empty()) capture_.first.pop_back();
  }
  void capture_key(const std::string& k) {
    if (!capture_.first.empty()) {
      if (!capture_.first.back()) append(",");
      capture_.first.back() = 0;
    }
    append(quoted(k) + ":");
    capture_.after_key = true;
  }

  // A recorded value is complete: file it where it belongs.
  void finish_capture() {
    Capture c = std::move(capture_);
    capture_ = Capture{};
    if (failed()) return;
    if (c.depth == 1) {
      if (top_key_ == "__metadata__")
        fail("\"__metadata__\" is not an object of strings: " + c.text);
      else
        fail(detail::str("tensor '", clip(top_key_), "': entry is not an object: ", c.text));
      return;
    }
    if (ctx_ == Ctx::Metadata) {
      fail(detail::str("\"__metadata__\" value of '", clip(key_), "' is not a string: ", c.text));
      return;
    }
    switch (field_) {
      case Field::Dtype:
        entry_.dtype_text = c.text;
        break;
      case Field::Shape:
        entry_.shape_text = c.text;
        entry_.shape_ok = c.is_list && c.list_ok;
        entry_.shape = std::move(c.items);
        break;
      case Field::Offsets:
        entry_.offsets_text = c.text;
        entry_.offsets_ok = c.is_list && c.list_ok;
        entry_.offsets = std::move(c.items);
        break;
      case Field::Other:
        break;
    }
  }

  int depth_ = 0;       // containers open
  int skip_depth_ = 0;  // > 0: inside an ignored value that began at this depth
  bool too_deep_ = false;
  Ctx ctx_ = Ctx::None;
  Field field_ = Field::Other;
  std::string top_key_, key_;
  Entry entry_;
  Capture capture_;
  std::unordered_set<std::string> seen_;
};

Header Reader::parse_header(const std::string& text) const {
  if (size_t at = invalid_utf8_at(text); at != std::string::npos) bad(detail::str("header is not valid UTF-8 (byte ", at, " of the header)"));
  if (text.empty() || text[0] != '{') bad("header does not start with '{' (not a safetensors file?)");
  // A NUL is never valid JSON (nor the format's padding, which is spaces), and would end nlohmann's
  // input early, hiding what follows.
  if (size_t nul = text.find('\0'); nul != std::string::npos) bad(detail::str("header is not valid JSON: NUL byte at byte ", nul, " of the header"));
  HeaderParser sax;
  try {
    json::sax_parse(text, &sax);        // trailing spaces (the alignment padding) are whitespace
  } catch (const json::exception& e) {  // not expected from a handler that never throws; never let one escape
    bad(detail::str("header is not valid JSON: ", clip(e.what())));
  }
  if (sax.too_deep()) bad(detail::str("header is not a safetensors header: its JSON nests deeper than ", kMaxDepth, " levels"));
  if (!sax.syntax_error.empty()) bad(detail::str("header is not valid JSON: ", sax.syntax_error));
  if (!sax.root_object) bad("header is not a JSON object");
  if (sax.failed()) bad(sax.error);
  return Header{std::move(sax.entries), std::move(sax.metadata)};
}

Info Reader::parse_entry(const HeaderEntry& e) const {
  const std::string what = "tensor '" + clip(e.name) + "'";
  if (!e.has_dtype) bad(what + ": missing \"dtype\"");
  if (!e.has_shape) bad(what + ": missing \"shape\"");
  if (!e.has_offsets) bad(what + ": missing \"data_offsets\"");
  Info info;
  info.name = e.name;
  if (!e.dtype_ok) bad(what + ": \"dtype\" is not a string: " + e.dtype_text);
  info.dtype = detail::safetensors_dtype_from_name(clip(e.dtype), prefix() + what);

  if (!e.shape_text.empty() && e.shape_text[0] != '[') bad(what + ": bad shape " + e.shape_text + " (not a list)");
  for (uint64_t s : e.shape)
    if (s > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(what + ": bad shape " + e.shape_text + " (dimensions must be non-negative integers)");
  if (!e.shape_ok) bad(what + ": bad shape " + e.shape_text + " (dimensions must be non-negative integers)");
  for (uint64_t s : e.shape) info.shape.push_back(static_cast<int64_t>(s));
  // The check every new tensor gets (sizes_fit): independent of the order of the dimensions.
  int64_t numel = 0, nbytes_signed = 0;
  if (!sizes_fit(info.shape, element_size(info.dtype), &numel, &nbytes_signed))
    bad(what + ": bad shape " + e.shape_text + " (the element count or byte size overflows)");
  const uint64_t nbytes = static_cast<uint64_t>(nbytes_signed);

  if (!e.offsets_ok || e.offsets.size() != 2) bad(what + ": bad data_offsets " + e.offsets_text + " (must be [begin, end], non-negative integers)");
  info.begin = e.offsets[0];
  info.end = e.offsets[1];
  if (info.end < info.begin) bad(detail::str(what, ": bad data_offsets [", info.begin, ", ", info.end, "] (end before begin)"));
  if (info.end - info.begin != nbytes)
    bad(detail::str(what, ": size mismatch: shape ", shape_str(info.shape), " of dtype ", e.dtype, " needs ", nbytes, " bytes but data_offsets [",
                    info.begin, ", ", info.end, "] span ", info.end - info.begin));
  return info;
}

// Sorted by offset, the tensors must tile [0, data_size) exactly: the reference's rule.
void Reader::check_layout(std::vector<Info>& infos, uint64_t data_size) const {
  std::stable_sort(infos.begin(), infos.end(), [](const Info& a, const Info& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  for (const Info& i : infos)
    if (i.end > data_size)
      truncated(detail::str("tensor '", clip(i.name), "' data_offsets [", i.begin, ", ", i.end, "] are out of range: the data buffer has only ",
                            data_size, " bytes (file size ", size_, ")"));
  uint64_t pos = 0;
  const Info* prev = nullptr;
  for (const Info& i : infos) {
    if (i.begin < pos)
      bad(detail::str("tensor '", clip(i.name), "' data_offsets [", i.begin, ", ", i.end, "] overlap tensor '", clip(prev->name), "' [", prev->begin,
                      ", ", prev->end, "]"));
    if (i.begin > pos)
      bad(detail::str("hole in the data buffer: bytes [", pos, ", ", i.begin, ") belong to no tensor (",
                      prev ? "between tensor '" + clip(prev->name) + "' and " : "before ", "tensor '", clip(i.name), "')"));
    pos = i.end;
    prev = &i;
  }
  if (pos != data_size)
    bad(detail::str("trailing garbage: the tensors cover ", pos, " bytes of the data buffer but the file holds ", data_size, " (", data_size - pos,
                    " bytes after the last tensor belong to no tensor)"));
}

SafetensorsFile Reader::read(Device device) {
  check_device(device);
  if (size_ < 8) truncated(detail::str("it has ", size_, " bytes, fewer than the 8-byte header length"));
  unsigned char len[8];
  pread_full(len, 8, 0);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > detail::kSafetensorsMaxHeader)
    bad(detail::str("header length ", n, " is over the limit of ", detail::kSafetensorsMaxHeader, " bytes (not a safetensors file?)"));
  if (n > size_ - 8) truncated(detail::str("header length ", n, " is larger than the ", size_ - 8, " bytes after the length field"));
  std::string text(static_cast<size_t>(n), '\0');
  pread_full(text.data(), n, 8);
  Header header = parse_header(text);
  text = std::string();  // the header text is no longer needed: free it before the tensors are allocated

  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  std::vector<Info> infos;
  infos.reserve(header.entries.size());
  for (const HeaderEntry& e : header.entries) infos.push_back(parse_entry(e));
  header.entries.clear();
  const uint64_t data_start = 8 + n;
  check_layout(infos, size_ - data_start);

  // CPU devices share host memory: read straight into the tensor. Others are staged on the host.
  const Device host = device.is_cpu() ? device : Device::cpu();
  for (const Info& i : infos) {
    Tensor t = make_empty(i.shape, i.dtype, host);
    const uint64_t nbytes = i.end - i.begin;
    if (nbytes > 0) pread_full(t.data_ptr(), nbytes, data_start + i.begin);
    if (i.dtype == kBool) {  // any non-zero byte is true; a bool must hold exactly 0 or 1
      auto* p = static_cast<unsigned char*>(t.data_ptr());
      for (uint64_t k = 0; k < nbytes; ++k) p[k] = p[k] != 0;
    }
    if (host != device) t = t.to(device);
    out.tensors.insert(i.name, std::move(t));
  }
  return out;
}

}  // namespace

SafetensorsFile load_file(const std::string& path, Device device) {
  Reader reader(path);
  return reader.read(device);
}

OrderedDict<std::string, Tensor> load(const std::string& path, Device device) { return load_file(path, device).tensors; }

}  // namespace dp
