#pragma once
// Files for tests that write and read real files: a temporary directory per test, whole-file reads
// and writes, and the pieces for building corrupt or truncated safetensors files by hand (an 8-byte
// little-endian header length, the JSON header, the data).
#include <errno.h>  // program_invocation_short_name
#include <stdlib.h>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace dp::test {

// A fresh directory, <temp>/<prefix>_XXXXXX, removed with everything in it afterwards. The default
// prefix names the test program: dp_test_checkpoint_XXXXXX for a test of test_checkpoint.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = std::string("dp_") + program_invocation_short_name) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` in the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Every entry in the directory, sorted (temporary files are hidden dot-files: listed too).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path path;
};

// The whole file ("" when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Replaces the file's contents with `bytes`.
inline void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// n as 8 little-endian bytes: the safetensors header length field.
inline std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// The header length a safetensors file's first 8 bytes announce (bytes must hold at least 8).
inline uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return n;
}

}  // namespace dp::test
