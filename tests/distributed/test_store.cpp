// The Store semantics, the same for every implementation (HashStore, PrefixStore over a HashStore,
// FileStore, TCPStore): one parameterised suite. Then what only FileStore has: a file shared by
// two processes, torn records, foreign files, bad paths, a lock held elsewhere.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "dp/distributed/store.h"
#include "support/forked_child.h"
#include "support/temp_files.h"

namespace dp::distributed {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dp::test::ForkedChild;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------------------------
// One store, any kind; open() gives another handle on it (another "rank"): the same HashStore,
// another PrefixStore over the same base, another FileStore on the same path, another TCPStore
// client of the same server.

enum class Kind { kHash, kPrefix, kFile, kTcp };

const std::string kToken = "store-test-token-0123456789abcdef";

class StoreSetup {
 public:
  StoreSetup(Kind kind, std::chrono::milliseconds timeout) : kind_(kind), timeout_(timeout) {
    if (kind == Kind::kHash || kind == Kind::kPrefix) hash_ = std::make_shared<HashStore>(timeout);
    if (kind == Kind::kFile) dir_ = std::make_unique<test::TempDir>();
    if (kind == Kind::kTcp) {
      TCPStoreOptions o;
      o.is_server = true;
      o.timeout = timeout;
      o.token = kToken;
      tcp_host_ = std::make_shared<TCPStore>("127.0.0.1", 0, o);
    }
  }

  std::shared_ptr<Store> open() {
    switch (kind_) {
      case Kind::kHash:
        return hash_;
      case Kind::kPrefix: {
        auto p = std::make_shared<PrefixStore>("job", hash_);
        p->set_timeout(timeout_);
        return p;
      }
      case Kind::kFile:
        return std::make_shared<FileStore>(dir_->file("store"), timeout_);
      case Kind::kTcp: {
        if (!tcp_host_used_) {
          tcp_host_used_ = true;
          return tcp_host_;
        }
        TCPStoreOptions o;
        o.timeout = timeout_;
        o.token = kToken;
        return std::make_shared<TCPStore>("127.0.0.1", tcp_host_->port(), o);
      }
    }
    return nullptr;
  }

 private:
  Kind kind_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<HashStore> hash_;
  std::unique_ptr<test::TempDir> dir_;
  std::shared_ptr<TCPStore> tcp_host_;
  bool tcp_host_used_ = false;
};

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    setup_ = std::make_unique<StoreSetup>(GetParam(), 10s);
    store_ = setup_->open();
  }
  std::unique_ptr<StoreSetup> setup_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, GetReturnsWhatSetStored) {
  store_->set("k", "v1");
  EXPECT_EQ(store_->get_string("k"), "v1");
  auto other = setup_->open();
  EXPECT_EQ(other->get_string("k"), "v1");
  EXPECT_EQ(other->get(std::string("k")), bytes_of("v1"));
}

TEST_P(StoreTest, SetOverwrites) {
  store_->set("a", "1");
  auto other = setup_->open();
  other->set("a", "22");
  EXPECT_EQ(store_->get_string("a"), "22");
  EXPECT_EQ(other->get_string("a"), "22");
  EXPECT_EQ(store_->num_keys(), 1);
}

TEST_P(StoreTest, GetWaitsForASetFromAnotherThread) {
  auto other = setup_->open();
  const auto t0 = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(150ms);
    other->set("late", "here");
  });
  const std::string got = store_->get_string("late");
  const double waited = seconds_since(t0);
  setter.join();
  EXPECT_EQ(got, "here");
  EXPECT_GE(waited, 0.12);
  EXPECT_LT(waited, 5.0);
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyIsSet) {
  auto other = setup_->open();
  const auto t0 = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    other->set("w1", "1");
    std::this_thread::sleep_for(60ms);
    other->set("w2", "2");
  });
  store_->wait({"w1", "w2"}, 5s);
  const double waited = seconds_since(t0);
  setter.join();
  EXPECT_GE(waited, 0.09);
  EXPECT_TRUE(store_->check({"w1", "w2"}));
}

TEST_P(StoreTest, AddFromThreadsCountsExactly) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto s = setup_->open();
        for (int i = 0; i < kAdds; ++i) seen[t].push_back(s->add("count", 1));
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);
  // Every add saw a distinct total: together exactly 1..800.
  std::vector<int64_t> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
  EXPECT_EQ(store_->get_string("count"), std::to_string(kThreads * kAdds));
}

TEST_P(StoreTest, AddTreatsTheValueAsADecimalInteger) {
  EXPECT_EQ(store_->add("n", 5), 5);  // absent = 0
  EXPECT_EQ(store_->add("n", -7), -2);
  EXPECT_EQ(store_->get_string("n"), "-2");
  store_->set("n", "40");
  EXPECT_EQ(store_->add("n", 2), 42);
  EXPECT_EQ(store_->add("n", 0), 42);
  store_->set("text", "abc");
  EXPECT_THROW(store_->add("text", 1), ValueError);
  EXPECT_EQ(store_->get_string("text"), "abc");  // left as it was
}

TEST_P(StoreTest, CompareSet) {
  // Absent key, empty expectation: set.
  EXPECT_EQ(store_->compare_set("c", {}, bytes_of("one")), bytes_of("one"));
  EXPECT_EQ(store_->get_string("c"), "one");
  // Mismatch: unchanged, the current value comes back.
  EXPECT_EQ(store_->compare_set("c", bytes_of("zzz"), bytes_of("two")), bytes_of("one"));
  EXPECT_EQ(store_->get_string("c"), "one");
  // Match: swapped.
  auto other = setup_->open();
  EXPECT_EQ(other->compare_set("c", bytes_of("one"), bytes_of("two")), bytes_of("two"));
  EXPECT_EQ(store_->get_string("c"), "two");
  // Absent key, non-empty expectation: left absent, the expectation comes back (c10d's rule).
  EXPECT_EQ(store_->compare_set("absent", bytes_of("x"), bytes_of("y")), bytes_of("x"));
  EXPECT_FALSE(store_->check({"absent"}));
  // Present but empty value matches an empty expectation.
  store_->set("empty", Bytes{});
  EXPECT_EQ(store_->compare_set("empty", {}, bytes_of("filled")), bytes_of("filled"));
}

TEST_P(StoreTest, CheckIsTrueOnlyWhenEveryKeyExistsAndDoesNotWait) {
  const auto t0 = Clock::now();
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", "1");
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));
  setup_->open()->set("b", "2");
  EXPECT_TRUE(store_->check({"a", "b"}));
  EXPECT_TRUE(store_->check({}));
  EXPECT_LT(seconds_since(t0), 2.0);  // the store's timeout is 10 s: check never waited for it
}

TEST_P(StoreTest, WaitTimeoutNamesExactlyTheMissingKeys) {
  store_->set("present", "1");
  const auto t0 = Clock::now();
  try {
    store_->wait({"present", "gone1", "gone2"}, 200ms);
    FAIL() << "wait returned although two keys never appeared";
  } catch (const StoreTimeout& e) {
    const double waited = seconds_since(t0);
    EXPECT_EQ(e.keys(), (std::vector<std::string>{std::string("gone1"), std::string("gone2")}));
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'" + std::string("gone1") + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + std::string("gone2") + "'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("present'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("200 ms"), std::string::npos) << msg;
    EXPECT_GE(waited, 0.18);
    EXPECT_LT(waited, 3.0);
  }
  static_assert(std::is_base_of_v<StoreError, StoreTimeout>);
  // The store still works after a timeout.
  store_->set("gone1", "now");
  EXPECT_EQ(store_->get_string("gone1"), "now");
}

TEST_P(StoreTest, GetTimesOutAfterTheStoresTimeout) {
  store_->set_timeout(200ms);
  const auto t0 = Clock::now();
  try {
    store_->get("never");
    FAIL() << "get returned a key that was never set";
  } catch (const StoreTimeout& e) {
    EXPECT_EQ(e.keys(), std::vector<std::string>{std::string("never")});
    EXPECT_NE(std::string(e.what()).find("'" + std::string("never") + "'"), std::string::npos) << e.what();
    EXPECT_GE(seconds_since(t0), 0.18);
    EXPECT_LT(seconds_since(t0), 3.0);
  }
}

TEST_P(StoreTest, DeleteKey) {
  store_->set("d", "1");
  store_->set("keep", "2");
  EXPECT_EQ(store_->num_keys(), 2);
  EXPECT_TRUE(store_->delete_key("d"));
  EXPECT_FALSE(store_->delete_key("d"));
  EXPECT_FALSE(store_->delete_key("never-was"));
  EXPECT_FALSE(store_->check({"d"}));
  EXPECT_EQ(store_->num_keys(), 1);
  auto other = setup_->open();
  other->set_timeout(100ms);
  EXPECT_THROW(other->get("d"), StoreTimeout);
  EXPECT_EQ(other->get_string("keep"), "2");
  // A deleted key can be set again.
  other->set("d", "3");
  EXPECT_EQ(store_->get_string("d"), "3");
}

TEST_P(StoreTest, NumKeysCountsDistinctKeys) {
  EXPECT_EQ(store_->num_keys(), 0);
  store_->set("a", "1");
  store_->set("b", "1");
  store_->set("a", "2");
  EXPECT_EQ(store_->num_keys(), 2);
  store_->add("c", 1);
  EXPECT_EQ(store_->num_keys(), 3);
  store_->compare_set("d", {}, bytes_of("x"));
  EXPECT_EQ(store_->num_keys(), 4);
  store_->delete_key("a");
  EXPECT_EQ(setup_->open()->num_keys(), 3);
}

TEST_P(StoreTest, BinaryKeysAndValuesKeepEveryByte) {
  Bytes value;
  for (int r = 0; r < 3; ++r)
    for (int b = 0; b < 256; ++b) value.push_back(static_cast<uint8_t>(b));
  value.push_back(0);
  const std::string key = std::string("bin\0ary key/\xc3\xa9", 15);
  ASSERT_EQ(key.size(), 15u);
  store_->set(key, value);
  store_->set("empty", Bytes{});
  auto other = setup_->open();
  EXPECT_EQ(other->get(key), value);
  EXPECT_TRUE(other->check({"empty"}));
  EXPECT_EQ(other->get("empty"), Bytes{});
  // A key that differs only after the zero byte is another key.
  EXPECT_FALSE(other->check({std::string("bin\0other", 9)}));
}

TEST_P(StoreTest, LargeValueRoundTrips) {
  Bytes big(4u << 20);  // TCPStore takes values up to 8 MiB by default
  std::mt19937 gen(1234);
  for (auto& b : big) b = static_cast<uint8_t>(gen());
  store_->set("big", big);
  auto other = setup_->open();
  EXPECT_EQ(other->get("big"), big);
  Bytes bigger = big;
  bigger.push_back(7);
  EXPECT_EQ(other->compare_set("big", big, bigger), bigger);
  EXPECT_EQ(store_->get("big"), bigger);
}

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kHash:
      return "HashStore";
    case Kind::kPrefix:
      return "PrefixStore";
    case Kind::kFile:
      return "FileStore";
    case Kind::kTcp:
      return "TCPStore";
  }
  return "unknown";
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::Values(Kind::kHash, Kind::kPrefix, Kind::kFile, Kind::kTcp), kind_name);

// ---------------------------------------------------------------------------------------------

TEST(PrefixStore, PrefixesKeepGroupsApartInOneBase) {
  auto base = std::make_shared<HashStore>(1s);
  PrefixStore a("a", base), b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(base->get_string("a/k"), "from a");
  EXPECT_FALSE(a.check({"b/k"}));
  EXPECT_EQ(a.num_keys(), 2);  // the whole base, as c10d's
}

// ---------------------------------------------------------------------------------------------
// FileStore only.

TEST(FileStore, TwoProcessesShareOnePath) {
  test::TempDir dir;
  const std::string path = dir.file("store");
  constexpr int kAdds = 200;
  // Forked before this process starts any thread.
  ForkedChild child([&] {
    FileStore s(path, 10s);
    if (s.get_string("parent/hello") != "hi") return 2;
    for (int i = 0; i < kAdds; ++i) s.add("count", 1);
    s.set("child/done", "yes");
    return 0;
  });
  ASSERT_TRUE(child.started());
  FileStore s(path, 10s);
  s.set("parent/hello", "hi");
  for (int i = 0; i < kAdds; ++i) s.add("count", 1);
  EXPECT_EQ(s.get_string("child/done"), "yes");
  EXPECT_EQ(child.wait(20s), 0);
  EXPECT_EQ(s.add("count", 0), 2 * kAdds);
  EXPECT_EQ(FileStore(path, 1s).num_keys(), 3);
}

TEST(FileStore, MissingDirectoryIsAStoreErrorNamingThePath) {
  test::TempDir dir;
  const std::string path = dir.file("no/such/dir/store");
  try {
    FileStore s(path, 1s);
    FAIL() << "FileStore opened " << path;
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

TEST(FileStore, DirectoryAsPathIsAStoreErrorNamingThePath) {
  test::TempDir dir;
  try {
    FileStore s(dir.path.string(), 1s);
    FAIL() << "FileStore opened a directory";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path.string()), std::string::npos) << e.what();
  }
}

TEST(FileStore, UnwritableDirectoryIsAStoreError) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not stop root from writing";
  test::TempDir dir;
  const auto sub = dir.path / "ro";
  std::filesystem::create_directory(sub);
  std::filesystem::permissions(sub, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  EXPECT_THROW(FileStore((sub / "store").string(), 1s), StoreError);
  std::filesystem::permissions(sub, std::filesystem::perms::owner_all);
}

TEST(FileStore, ForeignFileIsRejected) {
  test::TempDir dir;
  const std::string path = dir.file("notes.txt");
  test::write_bytes(path, "these are someone's notes, not a store\n");
  try {
    FileStore s(path, 1s);
    FAIL() << "FileStore accepted a text file";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a FileStore file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::read_bytes(path), "these are someone's notes, not a store\n");  // not written to
}

TEST(FileStore, TornRecordIsIgnoredAndCutByTheNextWriter) {
  test::TempDir dir;
  const std::string path = dir.file("store");
  FileStore(path, 1s).set("a", "1");
  // 8-byte header + record [kind][u32 1][u32 1]["a"]["1"] = 8 + 11.
  ASSERT_EQ(std::filesystem::file_size(path), 19u);
  // A writer that died after 6 bytes of a record announcing a 16-byte value.
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write("S\x01\x00\x00\x00\x10", 6);
  }
  FileStore reader(path, 1s);
  EXPECT_EQ(reader.get_string("a"), "1");
  EXPECT_EQ(reader.num_keys(), 1);
  reader.set("b", "2");
  EXPECT_EQ(std::filesystem::file_size(path), 30u);  // the torn 6 bytes replaced by b's 11
  FileStore fresh(path, 1s);
  EXPECT_EQ(fresh.get_string("a"), "1");
  EXPECT_EQ(fresh.get_string("b"), "2");
  EXPECT_EQ(fresh.num_keys(), 2);
}

TEST(FileStore, LockHeldElsewhereTimesOutInsteadOfHanging) {
  test::TempDir dir;
  const std::string path = dir.file("store");
  FileStore s(path, 300ms);
  s.set("a", "1");
  // flock belongs to an open file description: this one stands for a stopped process.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const auto t0 = Clock::now();
  try {
    s.set("b", "2");
    FAIL() << "set went through a lock held elsewhere";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("lock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(t0), 0.25);
  EXPECT_LT(seconds_since(t0), 3.0);
  ::flock(fd, LOCK_UN);
  ::close(fd);
  s.set("b", "2");
  EXPECT_EQ(s.get_string("b"), "2");
}

}  // namespace
}  // namespace dp::distributed
