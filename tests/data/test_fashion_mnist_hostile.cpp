// Hardening (docs/hardening.md), the IDX reader: a data set of 0 samples, a gzip member whose
// trailer (CRC-32 and length) is cut off or wrong, bytes after the member, a header announcing more
// than an uncompressed file can hold, running out of memory, and a FIFO in place of a file each end
// in an IOError (or OutOfMemory) naming the file, at once.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "dp/data/data.h"
#include "dp/dp.h"

namespace dp::data {
namespace {

namespace fs = std::filesystem;

void put_be32(std::string& s, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((v >> shift) & 0xff));
}
std::string idx_labels(uint32_t n, size_t count) {
  std::string s;
  put_be32(s, 0x801);
  put_be32(s, n);
  for (size_t i = 0; i < count; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}
std::string idx_images(uint32_t n, size_t pixel_bytes) {
  std::string s;
  put_be32(s, 0x803);
  put_be32(s, n);
  put_be32(s, 28);
  put_be32(s, 28);
  s.append(pixel_bytes, '\0');
  return s;
}
// One gzip member holding `bytes` (zlib's compress2 with a gzip wrapper).
std::string gzip(const std::string& bytes) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, bytes.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

class IdxHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dp_idx_hostile_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("train-images-idx3-ubyte.gz", gzip(idx_images(2, 2 * 784)));
    write("train-labels-idx1-ubyte.gz", gzip(idx_labels(2, 2)));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    fs::remove(path(name));
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // The message of the error E that FashionMNIST(dir) throws; the test fails otherwise.
  template <typename E = IOError>
  std::string error() const {
    try {
      FashionMNIST ds(dir_.string(), true);
      ADD_FAILURE() << "expected an error, the data set loaded with " << ds.size() << " samples";
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong error type: " << e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(IdxHostile, ValidFilesLoad) {
  FashionMNIST ds(dir_.string(), true);
  EXPECT_EQ(ds.size(), 2u);
}

TEST_F(IdxHostile, ZeroSamplesAreRefused) {
  write("train-labels-idx1-ubyte.gz", gzip(idx_labels(0, 0)));
  write("train-images-idx3-ubyte.gz", gzip(idx_images(0, 0)));
  const std::string m = error();
  EXPECT_NE(m.find(path("train-labels-idx1-ubyte.gz")), std::string::npos) << m;
  EXPECT_NE(m.find("0 labels"), std::string::npos) << m;
}

TEST_F(IdxHostile, GzipTrailerCutOffIsTruncation) {
  const std::string gz = gzip(idx_labels(2, 2));
  for (size_t cut : {size_t{8}, size_t{4}, size_t{1}}) {  // the whole trailer, its length, one byte
    write("train-labels-idx1-ubyte.gz", gz.substr(0, gz.size() - cut));
    const std::string m = error();
    EXPECT_NE(m.find(path("train-labels-idx1-ubyte.gz")), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << "cut " << cut << ": " << m;
  }
}

TEST_F(IdxHostile, WrongCrcOrLengthIsCorrupt) {
  std::string gz = gzip(idx_labels(2, 2));
  gz[gz.size() - 8] ^= 0x55;  // CRC-32
  write("train-labels-idx1-ubyte.gz", gz);
  std::string m = error();
  EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
  EXPECT_NE(m.find("incorrect data check"), std::string::npos) << m;
  gz = gzip(idx_labels(2, 2));
  gz[gz.size() - 4] ^= 0x01;  // ISIZE
  write("train-labels-idx1-ubyte.gz", gz);
  m = error();
  EXPECT_NE(m.find("incorrect length check"), std::string::npos) << m;
}

TEST_F(IdxHostile, BytesAfterTheGzipMemberAreRefused) {
  const std::string gz = gzip(idx_images(2, 2 * 784));
  for (const std::string& tail : {std::string("garbage"), std::string(1, '\0'), gzip("more")}) {
    write("train-images-idx3-ubyte.gz", gz + tail);
    const std::string m = error();
    EXPECT_NE(m.find(path("train-images-idx3-ubyte.gz")), std::string::npos) << m;
    EXPECT_NE(m.find("after the end of its gzip stream"), std::string::npos) << m;
  }
}

TEST_F(IdxHostile, UncompressedFileCannotAnnounceMoreThanItsSize) {
  fs::remove(path("train-labels-idx1-ubyte.gz"));
  fs::remove(path("train-images-idx3-ubyte.gz"));
  write("train-labels-idx1-ubyte", idx_labels(60000, 60000));
  // 60000 images announced (47 MB of pixels) in a file of 1 MB: no allocation, a clear error.
  write("train-images-idx3-ubyte", idx_images(60000, 1 << 20));
  const std::string m = error();
  EXPECT_NE(m.find(path("train-images-idx3-ubyte")), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  EXPECT_NE(m.find("uncompressed file can hold"), std::string::npos) << m;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// allocator_may_return_null as AddressSanitizer reads it from ASAN_OPTIONS: flags separated by ':',
// ',' or white space, the last one given wins, 1 / true / yes turn it on; off by default.
bool asan_allocator_may_return_null() {
  const char* env = std::getenv("ASAN_OPTIONS");
  const std::string options = env == nullptr ? "" : env, key = "allocator_may_return_null=";
  bool on = false;
  for (size_t begin = 0; begin < options.size();) {
    size_t end = options.find_first_of(":, \t\r\n", begin);
    if (end == std::string::npos) end = options.size();
    if (options.compare(begin, key.size(), key) == 0 && end - begin >= key.size()) {
      std::string value = options.substr(begin + key.size(), end - begin - key.size());
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
        value = value.substr(1, value.size() - 2);
      on = value == "1" || value == "true" || value == "yes";
    }
    begin = end + 1;
  }
  return on;
}

TEST_F(IdxHostile, OutOfMemoryNamesTheFile) {
  // AddressSanitizer's allocator aborts on a failed allocation unless told to return null
  // (scripts/sanitize.sh and scripts/fuzz.sh tell it to).
  if (kAsan && !asan_allocator_may_return_null())
    GTEST_SKIP() << "under AddressSanitizer this needs ASAN_OPTIONS=allocator_may_return_null=1 (scripts/sanitize.sh sets it)";
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer maps its shadow memory outside any address-space limit the child "
                  "can set (its own allocator dies instead of failing the allocation); the "
                  "address-sanitizer and plain builds run this test";
#endif
  // 60000 images of zeros compress to ~50 KB; their 188 MB of floats exceed the child's address
  // space limit. The child reports what it caught through its exit status.
  write("train-labels-idx1-ubyte.gz", gzip(idx_labels(60000, 60000)));
  write("train-images-idx3-ubyte.gz", gzip(idx_images(60000, size_t{60000} * 784)));
  const std::string images = path("train-images-idx3-ubyte.gz");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    struct rlimit lim {};
    lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (64u << 20);
    ::setrlimit(RLIMIT_AS, &lim);
    try {
      FashionMNIST ds(dir_.string(), true);
      ::_exit(3);
    } catch (const OutOfMemory& e) {
      ::_exit(std::string(e.what()).find(images) != std::string::npos ? 0 : 4);
    } catch (...) {
      ::_exit(5);
    }
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: loaded, 4: OutOfMemory without the file's name, 5: another error";
}

TEST_F(IdxHostile, FifoIsRefusedWithoutBlocking) {
  fs::remove(path("train-labels-idx1-ubyte.gz"));
  ASSERT_EQ(::mkfifo(path("train-labels-idx1-ubyte.gz").c_str(), 0600), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);  // a reader that blocks on the FIFO dies of SIGALRM
    try {
      FashionMNIST ds(dir_.string(), true);
      ::_exit(3);
    } catch (const IOError& e) {
      const std::string m = e.what();
      ::_exit(m.find("is not a regular file (a FIFO)") != std::string::npos && m.find(path("train-labels-idx1-ubyte.gz")) != std::string::npos ? 0
                                                                                                                                               : 4);
    } catch (...) {
      ::_exit(5);
    }
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << " (SIGALRM = 14: it blocked)";
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST_F(IdxHostile, DirectoryInPlaceOfAFile) {
  fs::remove(path("train-labels-idx1-ubyte.gz"));
  fs::create_directory(path("train-labels-idx1-ubyte.gz"));
  const std::string m = error();
  EXPECT_NE(m.find("is not a regular file (a directory)"), std::string::npos) << m;
}

TEST_F(IdxHostile, PlainFileWithGzipNameStillReads) {
  // Recognised by content, as gzread did: an uncompressed file named .gz loads.
  write("train-labels-idx1-ubyte.gz", idx_labels(2, 2));
  FashionMNIST ds(dir_.string(), true);
  EXPECT_EQ(ds.size(), 2u);
}

}  // namespace
}  // namespace dp::data
