// dp/distributed/launch.h: the restart count and run id a launcher exports (dp-run's names and
// torchrun's), and the error file: record_error writes the most derived error type, the message and
// the rank atomically; read_error_file reads it back, reads torchrun's format, and refuses files
// that are missing, empty or something else.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include "dp/core/errors.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/launch.h"
#include "support/temp_files.h"

namespace dp::distributed {
namespace {

// Sets environment variables for one test and restores the previous values afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = ::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::optional<std::string> kUnset = std::nullopt;

TEST(Launch, RestartCountAndRunIdComeFromDpRunOrTorchrun) {
  {
    ScopedEnv env({{"DP_RESTART_COUNT", kUnset}, {"TORCHELASTIC_RESTART_COUNT", kUnset}, {"DP_RUN_ID", kUnset}, {"TORCHELASTIC_RUN_ID", kUnset}});
    EXPECT_EQ(restart_count(), 0);
    EXPECT_EQ(run_id(), "");
  }
  {
    ScopedEnv env({{"DP_RESTART_COUNT", "2"}, {"TORCHELASTIC_RESTART_COUNT", "7"}, {"DP_RUN_ID", "job-a"}, {"TORCHELASTIC_RUN_ID", "job-b"}});
    EXPECT_EQ(restart_count(), 2);  // dp-run's names first
    EXPECT_EQ(run_id(), "job-a");
  }
  {
    ScopedEnv env({{"DP_RESTART_COUNT", kUnset}, {"TORCHELASTIC_RESTART_COUNT", "3"}, {"DP_RUN_ID", kUnset}, {"TORCHELASTIC_RUN_ID", "tr"}});
    EXPECT_EQ(restart_count(), 3);
    EXPECT_EQ(run_id(), "tr");
  }
}

TEST(Launch, AMalformedRestartCountIsAValueErrorNamingTheVariable) {
  ScopedEnv env({{"DP_RESTART_COUNT", "two"}, {"TORCHELASTIC_RESTART_COUNT", kUnset}});
  try {
    restart_count();
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DP_RESTART_COUNT='two'"), std::string::npos) << e.what();
  }
}

TEST(Launch, RecordErrorWritesTheMostDerivedTypeTheMessageAndTheRank) {
  dp::test::TempDir dir;
  const std::string path = dir.file("error.json");
  ScopedEnv env({{"DP_ERROR_FILE", path}, {"TORCHELASTIC_ERROR_FILE", kUnset}, {"RANK", "3"}});
  EXPECT_FALSE(read_error_file(path).has_value());  // missing

  record_error(
      PeerLostError("allreduce #42 (rank 3 of 4, group 'default'): lost rank 1 (127.0.0.1:5000): Connection closed by peer", 1, "allreduce", 42));
  auto e = read_error_file(path);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, "PeerLostError");
  EXPECT_EQ(e->message, "allreduce #42 (rank 3 of 4, group 'default'): lost rank 1 (127.0.0.1:5000): Connection closed by peer");
  EXPECT_EQ(e->rank, 3);
  EXPECT_GT(e->unix_ms, 1'600'000'000'000);

  // The last error replaces the earlier one, completely (no temporary file is left behind).
  record_error(CollectiveTimeout("allreduce #7 timed out: rank 1 is behind", "allreduce", 7, std::chrono::milliseconds(2000), {1}));
  EXPECT_EQ(read_error_file(path)->type, "CollectiveTimeout");
  record_error(StoreTimeout("wait: key 'x' did not appear", {"x"}));
  EXPECT_EQ(read_error_file(path)->type, "StoreTimeout");
  record_error(RendezvousError("ranks 1 never arrived", {1}));
  EXPECT_EQ(read_error_file(path)->type, "RendezvousError");
  record_error(ValueError("bad"));
  EXPECT_EQ(read_error_file(path)->type, "ValueError");
  record_error(std::runtime_error("plain"));
  EXPECT_EQ(read_error_file(path)->type, "std::exception");
  EXPECT_EQ(read_error_file(path)->message, "plain");
  record_error("Interrupted", "stopped by SIGTERM at step 4\nafter writing the checkpoint \"c\"");
  EXPECT_EQ(read_error_file(path)->type, "Interrupted");
  EXPECT_EQ(read_error_file(path)->message, "stopped by SIGTERM at step 4\nafter writing the checkpoint \"c\"");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"error.json"});
}

TEST(Launch, RecordErrorWithoutAFileDoesNothingAndNeverThrows) {
  dp::test::TempDir dir;
  {
    ScopedEnv env({{"DP_ERROR_FILE", kUnset}, {"TORCHELASTIC_ERROR_FILE", kUnset}});
    record_error("X", "nothing happens");
  }
  {
    // A directory that does not exist: the error is lost, not thrown from an error handler.
    ScopedEnv env({{"DP_ERROR_FILE", dir.file("missing/error.json")}, {"TORCHELASTIC_ERROR_FILE", kUnset}});
    EXPECT_NO_THROW(record_error("X", "y"));
  }
  {
    // torchrun's variable is used when dp-run's is not set; invalid UTF-8 survives as replaced text.
    ScopedEnv env({{"DP_ERROR_FILE", kUnset}, {"TORCHELASTIC_ERROR_FILE", dir.file("torch.json")}, {"RANK", kUnset}});
    record_error("IOError", std::string("cannot open '\xff\xfe.bin'"));
    auto e = read_error_file(dir.file("torch.json"));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, "IOError");
    EXPECT_EQ(e->rank, -1);
    EXPECT_NE(e->message.find("cannot open"), std::string::npos);
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"torch.json"});
}

TEST(Launch, ReadErrorFileReadsTorchrunsFormatAndRefusesOthers) {
  dp::test::TempDir dir;
  dp::test::write_bytes(
      dir.file("torch.json"),
      R"({"message": {"message": "RuntimeError: CUDA out of memory", "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}})");
  auto e = read_error_file(dir.file("torch.json"));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, "RuntimeError");
  EXPECT_EQ(e->message, "CUDA out of memory");
  EXPECT_EQ(e->unix_ms, 1'700'000'000'000);

  dp::test::write_bytes(dir.file("empty.json"), "");
  dp::test::write_bytes(dir.file("half.json"), R"({"type": "PeerLostError", "mess)");
  dp::test::write_bytes(dir.file("list.json"), "[1, 2]");
  dp::test::write_bytes(dir.file("nomessage.json"), R"({"type": "X"})");
  for (const char* name : {"empty.json", "half.json", "list.json", "nomessage.json", "absent.json"})
    EXPECT_FALSE(read_error_file(dir.file(name)).has_value()) << name;
}

}  // namespace
}  // namespace dp::distributed
