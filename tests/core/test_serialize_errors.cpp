// Safetensors failure modes (dp/core/serialize.h): every kind of corrupt or truncated file is
// rejected with an error naming the file and the problem; failed saves (injected full disk or
// exception, a real RLIMIT_FSIZE write failure, bad destinations) leave the previous file intact and
// no temporary file behind; concurrent saves (to different paths and to one path, with readers) work.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include "dp/core/serialize.h"
#include "dp/ops/factory.h"
#include "support/temp_files.h"
#include "support/unprivileged.h"

namespace dp {
namespace {

namespace fs = std::filesystem;

using test::TempDir;  // a fresh directory per test, removed afterwards
using test::le64;
using test::read_bytes;
using test::write_bytes;

// A file with the given header text (its real length) and data bytes.
std::string file_of(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

// Loading must throw E with a message naming the file and containing every fragment.
template <typename E>
void expect_load_error(const std::string& path, std::initializer_list<std::string> fragments) {
  try {
    load_file(path);
    ADD_FAILURE() << "loading " << path << " did not throw";
  } catch (const E& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "expected '" << f << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << path << ": " << e.what();
  }
}

class CorruptFile : public ::testing::Test {
 protected:
  // Writes `bytes` to a fresh file and expects load_file to fail with E and the fragments.
  template <typename E>
  void expect(const std::string& bytes, std::initializer_list<std::string> fragments) {
    const std::string path = dir.file("case" + std::to_string(++n) + ".safetensors");
    write_bytes(path, bytes);
    expect_load_error<E>(path, fragments);
  }
  TempDir dir;
  int n = 0;
};

const std::string kF32x2 = R"("dtype":"F32","shape":[2])";
const std::string k8 = std::string(8, '\x11');

TEST_F(CorruptFile, SanityAValidFileLoads) {
  const std::string path = dir.file("ok.safetensors");
  write_bytes(path, file_of(R"({"a":{)" + kF32x2 + R"(,"data_offsets":[0,8]}})", k8));
  EXPECT_EQ(load(path).size(), 1u);
}

TEST_F(CorruptFile, MissingFileOrDirectory) {
  expect_load_error<IOError>(dir.file("nope.safetensors"), {"cannot open", "No such file or directory"});
  expect_load_error<IOError>(dir.path.string(), {"is a directory"});
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_load_error<IOError>(dir.file("fifo"), {"is not a regular file"});  // without waiting for a writer
}

TEST_F(CorruptFile, ShorterThanTheLengthField) {
  expect<IOError>("", {"truncated", "0 bytes, fewer than the 8-byte header length"});
  expect<IOError>(std::string("\x10\x00\x00\x00\x00", 5), {"truncated", "5 bytes"});
}

TEST_F(CorruptFile, HeaderLengthPastTheEndOrOverTheLimit) {
  expect<IOError>(le64(100) + "{}", {"truncated", "header length 100 is larger than the 2 bytes"});
  expect<ValueError>(le64(100000001) + "{}", {"header length 100000001 is over the limit of 100000000"});
  expect<ValueError>(le64(~uint64_t(0)) + "{}", {"over the limit"});
  // Not a safetensors file at all: a PNG signature read as a length.
  expect<ValueError>(std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), {"over the limit", "not a safetensors file"});
}

TEST_F(CorruptFile, HeaderNotUtf8JsonObject) {
  expect<ValueError>(file_of("{\"a\xff\":1}", ""), {"not valid UTF-8", "byte 3"});
  expect<ValueError>(file_of("{\"\xc0\xaf\":1}", ""), {"not valid UTF-8"});  // overlong '/'
  expect<ValueError>(file_of(" {}", ""), {"does not start with '{'"});
  expect<ValueError>(file_of("[1, 2]  ", ""), {"does not start with '{'"});
  expect<ValueError>(file_of(R"({"a":)", ""), {"not valid JSON"});
  expect<ValueError>(file_of(R"({"a":{}} x)", ""), {"not valid JSON"});
  expect<ValueError>(file_of(R"({"a":3})", ""), {"tensor 'a'", "not an object"});
  expect<ValueError>(file_of(std::string("{}\0\0\0\0\0\0", 8), ""), {"not valid JSON"});  // NUL padding is not the format's
}

TEST_F(CorruptFile, DuplicateNames) {
  expect<ValueError>(file_of(R"({"a":{)" + kF32x2 + R"(,"data_offsets":[0,8]},"a":{)" + kF32x2 + R"(,"data_offsets":[8,16]}})", k8 + k8),
                     {"header names 'a' more than once"});
}

TEST_F(CorruptFile, UnknownOrUnsupportedDtype) {
  expect<ValueError>(file_of(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", k8), {"tensor 'a'", "unknown dtype 'F33'"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})", k8), {"tensor 'a'", "'I16' is not supported"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"float32","shape":[2],"data_offsets":[0,8]}})", k8), {"unknown dtype 'float32'"});
  expect<ValueError>(file_of(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", k8), {"\"dtype\" is not a string"});
}

TEST_F(CorruptFile, BadShape) {
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", k8), {"tensor 'a'", "bad shape [-2]"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", k8), {"bad shape [2.5]"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", k8), {"bad shape \"2\"", "not a list"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", k8), {"overflows"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", k8), {"bad shape"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", k8), {"tensor 'a'", "missing \"shape\""});
}

TEST_F(CorruptFile, BadOffsets) {
  const std::string pre = R"({"a":{)" + kF32x2 + R"(,"data_offsets":)";
  expect<ValueError>(file_of(pre + "[8]}}", k8), {"bad data_offsets [8]"});
  expect<ValueError>(file_of(pre + "[-8,0]}}", k8), {"bad data_offsets [-8,0]"});
  expect<ValueError>(file_of(pre + R"(["0","8"]}})", k8), {"bad data_offsets"});
  expect<ValueError>(file_of(pre + "[8,0]}}", k8), {"data_offsets [8, 0]", "end before begin"});
  expect<ValueError>(file_of(R"({"a":{)" + kF32x2 + "}}", k8), {"missing \"data_offsets\""});
}

TEST_F(CorruptFile, SizeMismatchBetweenShapeAndOffsets) {
  expect<ValueError>(file_of(R"({"a":{)" + kF32x2 + R"(,"data_offsets":[0,12]}})", k8 + "1234"),
                     {"tensor 'a'", "size mismatch", "shape [2] of dtype F32 needs 8 bytes", "span 12"});
  expect<ValueError>(file_of(R"({"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})", "1234"), {"size mismatch", "needs 8 bytes"});
}

TEST_F(CorruptFile, OffsetsOutOfRangeOverlappingOrLeavingHoles) {
  const std::string f32 = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  // Past the end of the data buffer (a truncated file).
  expect<IOError>(file_of(R"({"a":)" + f32 + "[0,8]}}", "1234"), {"truncated", "tensor 'a'", "out of range", "has only 4 bytes"});
  // Overlap: b starts inside a.
  expect<ValueError>(file_of(R"({"a":)" + f32 + R"([0,8]},"b":)" + f32 + "[4,12]}}", k8 + "1234"),
                     {"tensor 'b' data_offsets [4, 12] overlap tensor 'a' [0, 8]"});
  // Two tensors on the same bytes.
  expect<ValueError>(file_of(R"({"a":)" + f32 + R"([0,8]},"b":)" + f32 + "[0,8]}}", k8), {"overlap"});
  // A hole between two tensors, and one before the first.
  expect<ValueError>(file_of(R"({"a":)" + f32 + R"([0,8]},"b":)" + f32 + "[12,20]}}", k8 + "1234" + k8),
                     {"hole", "bytes [8, 12) belong to no tensor", "between tensor 'a' and tensor 'b'"});
  expect<ValueError>(file_of(R"({"a":)" + f32 + "[4,12]}}", "1234" + k8), {"hole", "bytes [0, 4)", "before tensor 'a'"});
}

TEST_F(CorruptFile, OffsetsNotCoveringTheBufferOrTrailingGarbage) {
  const std::string good = file_of(R"({"a":{)" + kF32x2 + R"(,"data_offsets":[0,8]}})", k8);
  expect<ValueError>(good + "xyz", {"trailing garbage", "cover 8 bytes", "holds 11", "3 bytes after the last tensor"});
  expect<ValueError>(file_of("{}", "abc"), {"trailing garbage", "3 bytes"});
  // A file cut short inside the data.
  expect<IOError>(good.substr(0, good.size() - 1), {"truncated", "out of range"});
}

TEST_F(CorruptFile, BadMetadata) {
  expect<ValueError>(file_of(R"({"__metadata__":{"a":1}})", ""), {"\"__metadata__\" value of 'a' is not a string"});
  expect<ValueError>(file_of(R"({"__metadata__":["a"]})", ""), {"\"__metadata__\" is not an object"});
}

// ---------------------------------------------------------------- failed saves

OrderedDict<std::string, Tensor> state(float v, int64_t n = 1000) {
  OrderedDict<std::string, Tensor> s;
  s.insert("weight", full({n}, v, kFloat32));
  s.insert("bias", full({7}, v, kFloat64));
  s.insert("steps", full({}, static_cast<int64_t>(v), kInt64));
  return s;
}

template <typename E>
std::string expect_save_error(const OrderedDict<std::string, Tensor>& s, const std::string& path, std::initializer_list<std::string> fragments) {
  try {
    save(s, path);
    ADD_FAILURE() << "saving " << path << " did not throw";
  } catch (const E& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "expected '" << f << "' in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << path << ": " << e.what();
  }
  return "";
}

struct FaultScope {
  explicit FaultScope(const detail::SaveFault& f) { detail::set_save_fault(f); }
  ~FaultScope() { detail::clear_save_fault(); }
};

TEST(SaveFailure, InjectedFullDiskAtEveryStageKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save(state(1), path);
  const std::string before = read_bytes(path);
  const int64_t total = static_cast<int64_t>(before.size());
  ASSERT_GT(total, 4000);
  // In the length field, in the header, at the first data byte, inside the big tensor, one byte short.
  for (int64_t k : {int64_t(0), int64_t(5), int64_t(8), int64_t(60), total - 4000 - 8 - 56, total / 2, total - 1}) {
    SCOPED_TRACE("failing after " + std::to_string(k) + " bytes");
    {
      FaultScope fault({k, ENOSPC, false});
      expect_save_error<IOError>(state(2), path,
                                 {"write failed", "No space left on device", "after " + std::to_string(k) + " bytes were written", "temporary file"});
    }
    EXPECT_EQ(read_bytes(path), before) << "the previous file must be untouched";
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"}) << "no temporary file may remain";
  }
  {
    FaultScope fault({total / 3, EIO, false});
    expect_save_error<IOError>(state(2), path, {"Input/output error"});
  }
  EXPECT_EQ(read_bytes(path), before);
  // A limit the save does not reach is no failure.
  {
    FaultScope fault({total, ENOSPC, false});
    save(state(3), path);
  }
  EXPECT_EQ(load(path)["steps"].item<int64_t>(), 3);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(SaveFailure, ExceptionInTheMiddleIsRethrownAndCleansUp) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save(state(1), path);
  const std::string before = read_bytes(path);
  {
    FaultScope fault({static_cast<int64_t>(before.size() / 2), 0, true});
    EXPECT_THROW(save(state(2), path), std::runtime_error);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(SaveFailure, FailedFirstSaveLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("new.safetensors");
  {
    FaultScope fault({100, ENOSPC, false});
    expect_save_error<IOError>(state(1), path, {"No space left on device"});
  }
  EXPECT_TRUE(dir.entries().empty());
}

// A real kernel-reported write failure: the file size limit makes write() fail with EFBIG, as a full
// disk makes it fail with ENOSPC.
TEST(SaveFailure, RealWriteFailureFromFileSizeLimit) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save(state(1, 10), path);
  const std::string before = read_bytes(path);
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 4096) GTEST_SKIP() << "file size hard limit already below 4 KiB";
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    save(state(2, 100000), path);
  } catch (const IOError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("File too large"), std::string::npos) << "expected an EFBIG IOError, got: '" << msg << "'";
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(SaveFailure, BadDestinations) {
  TempDir dir;
  expect_save_error<IOError>(state(1), dir.file("missing_dir/model.safetensors"), {"temporary file", "No such file or directory"});
  write_bytes(dir.file("plain"), "x");
  expect_save_error<IOError>(state(1), dir.file("plain/model.safetensors"), {"Not a directory"});
  fs::create_directory(dir.file("subdir"));
  expect_save_error<IOError>(state(1), dir.file("subdir"), {"not a regular file", "a directory"});
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_save_error<IOError>(state(1), dir.file("fifo"), {"not a regular file"});
  EXPECT_TRUE(fs::is_fifo(dir.file("fifo")));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"fifo", "plain", "subdir"}));
}

// Root ignores directory permissions, so as root the save runs in a child process that has dropped
// to the unprivileged user "nobody" (support/unprivileged.h).
TEST(SaveFailure, UnwritableDirectory) {
  TempDir dir;
  fs::create_directory(dir.file("ro"));
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.file("ro").c_str(), 0555), 0);
  const std::string path = dir.file("ro/model.safetensors");
  auto attempt = [&]() -> std::string {
    try {
      save(state(1), path);
    } catch (const IOError& e) {
      return e.what();
    }
    return "";
  };
  if (test::permissions_bind()) {
    std::string msg = attempt();
    EXPECT_NE(msg.find("temporary file"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  } else {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (!test::become_nobody()) ::_exit(test::kCannotDropPrivileges);
      std::string msg = attempt();
      bool ok = msg.find("temporary file") != std::string::npos && msg.find("Permission denied") != std::string::npos &&
                msg.find(path) != std::string::npos;
      ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == test::kCannotDropPrivileges) GTEST_SKIP() << "cannot drop root privileges to test directory permissions";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the unprivileged save did not fail with a Permission denied IOError naming the path";
  }
  EXPECT_TRUE(fs::is_empty(dir.file("ro")));
  ::chmod(dir.file("ro").c_str(), 0755);
}

TEST(SaveFailure, InvalidTensorsOrNamesFailBeforeTouchingTheDisk) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  OrderedDict<std::string, Tensor> undefined;
  undefined.insert("w", Tensor());
  expect_save_error<ValueError>(undefined, path, {"tensor 'w' is undefined"});
  expect_save_error<ValueError>({{"__metadata__", full({1}, 1)}}, path, {"reserved"});
  expect_save_error<ValueError>({{std::string("bad\xff"), full({1}, 1)}}, path, {"not valid UTF-8"});
  try {
    save(state(1), path, {{"k", std::string("\xc3")}});
    ADD_FAILURE() << "invalid UTF-8 metadata accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("metadata value of 'k'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SaveBehaviour, SymlinkTargetIsReplacedAndPermissionsKept) {
  TempDir dir;
  const std::string target = dir.file("real.safetensors"), link = dir.file("link.safetensors");
  save(state(1), target);
  ASSERT_EQ(::chmod(target.c_str(), 0640), 0);
  fs::create_symlink(target, link);
  save(state(2), link);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(load(target)["steps"].item<int64_t>(), 2);
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"link.safetensors", "real.safetensors"}));
}

// ---------------------------------------------------------------- concurrency

TEST(SaveConcurrency, ThreadsSavingToDifferentPaths) {
  TempDir dir;
  constexpr int kThreads = 8, kRounds = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRounds; ++r) {
          const std::string path = dir.file("t" + std::to_string(t) + ".safetensors");
          save(state(static_cast<float>(t * 100 + r), 5000), path, {{"thread", std::to_string(t)}});
          SafetensorsFile f = load_file(path);
          if (f.metadata.at("thread") != std::to_string(t) || f.tensors["steps"].item<int64_t>() != t * 100 + r ||
              f.tensors["weight"].to_vector<float>() != std::vector<float>(5000, static_cast<float>(t * 100 + r)))
            ++failures;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(dir.entries().size(), static_cast<size_t>(kThreads)) << "no temporary files left";
}

TEST(SaveConcurrency, FaultInjectionIsPerThread) {
  TempDir dir;
  FaultScope fault({0, ENOSPC, false});  // this thread's saves fail...
  EXPECT_THROW(save(state(1), dir.file("a.safetensors")), IOError);
  std::thread other([&] { save(state(2), dir.file("b.safetensors")); });  // ...another thread's do not
  other.join();
  EXPECT_EQ(load(dir.file("b.safetensors"))["steps"].item<int64_t>(), 2);
}

// Writers replacing one path while readers load it: every load sees one complete version.
TEST(SaveConcurrency, ReadersNeverSeeAPartialFile) {
  TempDir dir;
  const std::string path = dir.file("shared.safetensors");
  save(state(0, 20000), path);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, loads{0};
  std::vector<std::thread> writers, readers;
  for (int w = 0; w < 3; ++w)
    writers.emplace_back([&, w] {
      for (int r = 0; r < 15; ++r) save(state(static_cast<float>(w * 100 + r + 1), 20000), path);
    });
  for (int rd = 0; rd < 2; ++rd)
    readers.emplace_back([&] {
      while (!stop.load()) {
        try {
          auto s = load(path);
          int64_t v = s["steps"].item<int64_t>();
          if (s["weight"].to_vector<float>() != std::vector<float>(20000, static_cast<float>(v))) ++bad;
          ++loads;
        } catch (const std::exception& e) {
          ++bad;
        }
      }
    });
  for (auto& th : writers) th.join();
  stop = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(loads.load(), 0);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"shared.safetensors"});
}

}  // namespace
}  // namespace dp
