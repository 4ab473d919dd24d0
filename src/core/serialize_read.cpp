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

  json parse_header(const std::string& text) const;
  Info parse_entry(const std::string& name, const json& v) const;
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
    if (c < 0x80) { ++i; continue; }
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) { len = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string::npos;
}

// nlohmann's DOM builder, plus a check that no top-level name appears twice (it would silently keep
// the last one). Not its callback parser: that rescans every sibling at each object's end, which is
// quadratic in the number of tensors.
class DuplicateCheckingParser {
 public:
  using Dom = nlohmann::detail::json_sax_dom_parser<json>;
  explicit DuplicateCheckingParser(json& out) : dom_(out) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { ++depth_; return dom_.start_object(n); }
  bool end_object() { --depth_; return dom_.end_object(); }
  bool start_array(std::size_t n) { ++depth_; return dom_.start_array(n); }
  bool end_array() { --depth_; return dom_.end_array(); }
  bool key(json::string_t& k) {
    if (depth_ == 1 && !seen_.insert(k).second && duplicate.empty()) duplicate = k;
    return dom_.key(k);
  }
  template <typename Exception>
  bool parse_error(std::size_t pos, const std::string& token, const Exception& ex) { return dom_.parse_error(pos, token, ex); }

  std::string duplicate;  // the first name seen twice at the top level

 private:
  Dom dom_;
  int depth_ = 0;
  std::unordered_set<std::string> seen_;
};

json Reader::parse_header(const std::string& text) const {
  if (size_t at = invalid_utf8_at(text); at != std::string::npos) bad(detail::str("header is not valid UTF-8 (byte ", at, " of the header)"));
  if (text.empty() || text[0] != '{') bad("header does not start with '{' (not a safetensors file?)");
  // A NUL is never valid JSON (nor the format's padding, which is spaces), and would end nlohmann's
  // input early, hiding what follows.
  if (size_t nul = text.find('\0'); nul != std::string::npos) bad(detail::str("header is not valid JSON: NUL byte at byte ", nul, " of the header"));
  json j;
  DuplicateCheckingParser sax(j);
  try {
    json::sax_parse(text, &sax);  // trailing spaces (the alignment padding) are whitespace
  } catch (const json::parse_error& e) {
    bad(detail::str("header is not valid JSON: ", e.what()));
  }
  const std::string& duplicate = sax.duplicate;
  if (!duplicate.empty()) bad(detail::str("header names '", duplicate, "' more than once"));
  if (!j.is_object()) bad("header is not a JSON object");
  return j;
}

bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) { out = v.get<uint64_t>(); return true; }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) { out = static_cast<uint64_t>(v.get<int64_t>()); return true; }
  return false;
}

Info Reader::parse_entry(const std::string& name, const json& v) const {
  const std::string what = "tensor '" + name + "'";
  if (!v.is_object()) bad(what + ": entry is not an object: " + v.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) bad(detail::str(what, ": missing \"", field, "\""));
  Info info;
  info.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) bad(what + ": \"dtype\" is not a string: " + dt.dump());
  info.dtype = detail::safetensors_dtype_from_name(dt.get<std::string>(), prefix() + what);

  const json& shape = v["shape"];
  if (!shape.is_array()) bad(what + ": bad shape " + shape.dump() + " (not a list)");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape) {
    uint64_t s;
    if (!as_u64(d, s) || s > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(what + ": bad shape " + shape.dump() + " (dimensions must be non-negative integers)");
    info.shape.push_back(static_cast<int64_t>(s));
    overflow |= __builtin_mul_overflow(numel, s, &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(element_size(info.dtype)), &nbytes);
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(what + ": bad shape " + shape.dump() + " (the element count overflows)");

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_u64(off[0], info.begin) || !as_u64(off[1], info.end))
    bad(what + ": bad data_offsets " + off.dump() + " (must be [begin, end], non-negative integers)");
  if (info.end < info.begin) bad(detail::str(what, ": bad data_offsets [", info.begin, ", ", info.end, "] (end before begin)"));
  if (info.end - info.begin != nbytes)
    bad(detail::str(what, ": size mismatch: shape ", shape_str(info.shape), " of dtype ", dt.get<std::string>(), " needs ", nbytes,
                    " bytes but data_offsets [", info.begin, ", ", info.end, "] span ", info.end - info.begin));
  return info;
}

// Sorted by offset, the tensors must tile [0, data_size) exactly: the reference's rule.
void Reader::check_layout(std::vector<Info>& infos, uint64_t data_size) const {
  std::stable_sort(infos.begin(), infos.end(), [](const Info& a, const Info& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  for (const Info& i : infos)
    if (i.end > data_size)
      truncated(detail::str("tensor '", i.name, "' data_offsets [", i.begin, ", ", i.end, "] are out of range: the data buffer has only ", data_size,
                            " bytes (file size ", size_, ")"));
  uint64_t pos = 0;
  const Info* prev = nullptr;
  for (const Info& i : infos) {
    if (i.begin < pos)
      bad(detail::str("tensor '", i.name, "' data_offsets [", i.begin, ", ", i.end, "] overlap tensor '", prev->name, "' [", prev->begin, ", ",
                      prev->end, "]"));
    if (i.begin > pos)
      bad(detail::str("hole in the data buffer: bytes [", pos, ", ", i.begin, ") belong to no tensor (",
                      prev ? "between tensor '" + prev->name + "' and " : "before ", "tensor '", i.name, "')"));
    pos = i.end;
    prev = &i;
  }
  if (pos != data_size)
    bad(detail::str("trailing garbage: the tensors cover ", pos, " bytes of the data buffer but the file holds ", data_size,
                    " (", data_size - pos, " bytes after the last tensor belong to no tensor)"));
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
  json header = parse_header(text);

  SafetensorsFile out;
  std::vector<Info> infos;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad("\"__metadata__\" is not an object of strings: " + it->dump());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad("\"__metadata__\" value of '" + m.key() + "' is not a string: " + m->dump());
        out.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    infos.push_back(parse_entry(it.key(), *it));
  }
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
