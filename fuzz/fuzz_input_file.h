#pragma once
// The fuzz targets' readers take a path: each input is written to one anonymous in-memory file
// (memfd, a regular file) and read back through /proc/self/fd/N, so no disk is touched.
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace dp_fuzz {

inline const std::string& input_file(const uint8_t* data, size_t size) {
  static int fd = [] {
    const int f = ::memfd_create("dp-fuzz-input", MFD_CLOEXEC);
    if (f < 0) std::abort();
    return f;
  }();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (w <= 0) std::abort();
    done += static_cast<size_t>(w);
  }
  return path;
}

}  // namespace dp_fuzz
