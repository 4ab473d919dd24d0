// Collective checkpoints (dp/distributed/checkpoint.h), ranks as threads on a Gloo group formed
// through a HashStore: round trips, a root that cannot write, the identical-state check, loading
// on ranks that have no file, a missing or corrupt file, and state_hash itself.
#include <gtest/gtest.h>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/checkpoint.h"
#include "dp/dp.h"
#include "support/temp_files.h"

namespace dp::distributed {
namespace {

using namespace std::chrono_literals;
using State = OrderedDict<std::string, Tensor>;

// Runs fn(pg) on `world` threads, one Gloo group rank each, and returns what each rank threw
// (null where it returned normally). A short timeout keeps a broken protocol from stalling the test.
std::vector<std::exception_ptr> run_ranks(int world, const std::function<void(ProcessGroup&)>& fn) {
  auto store = std::make_shared<HashStore>(20s);
  ProcessGroupOptions options;
  options.timeout = 20s;
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroupPtr pg = make_gloo_process_group(store, r, world, options);
        fn(*pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// What a rank threw, as text.
std::string describe(const std::exception_ptr& error) {
  if (!error) return "(returned normally)";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "(an exception that is not a std::exception)";
  }
}

// The message of a rank's error if it has type E, else a description of what happened instead.
template <typename E>
std::string message_if(const std::exception_ptr& error) {
  if (!error) return "(returned normally)";
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "(another exception type: " + describe(error) + ")";
  }
}

void expect_all_ok(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(describe(errors[r]), "(returned normally)") << "rank " << r;
}

// A state with several dtypes, a scalar, an empty tensor and a non-contiguous view; `shift`
// changes one value (a diverged rank).
State make_state(float shift = 0.0f) {
  State s;
  s.insert("layer.weight", tensor(std::vector<float>{0.5f, -1.25f, 3.0f + shift, 4.5f, 1e-3f, -7.0f}, {2, 3}));
  s.insert("layer.bias", tensor(std::vector<double>{0.125, -2.5}));
  s.insert("bn.num_batches_tracked", scalar_tensor(int64_t{41}, kInt64));
  s.insert("mask", tensor(std::vector<uint8_t>{1, 0, 1}));
  s.insert("empty", empty({0, 4}, kFloat32));
  s.insert("transposed", tensor(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1));
  return s;
}

// Same dtype, shape and values (values compared as the row-major bytes of contiguous copies).
::testing::AssertionResult same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << dtype_name(a.dtype()) << " vs " << dtype_name(b.dtype());
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "shape " << a.size_str() << " vs " << b.size_str();
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  // memcmp must not see the null data pointer of an empty tensor, even with a size of 0.
  if (ca.nbytes() > 0 && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) != 0) return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

void expect_same_state(const State& got, const State& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& item : want) {
    const Tensor* t = got.find(item.key());
    ASSERT_NE(t, nullptr) << "missing " << item.key();
    EXPECT_TRUE(same_tensor(*t, item.value())) << item.key();
  }
}

TEST(DistributedCheckpoint, RoundTripOnTwoAndThreeRanks) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    test::TempDir dir;
    const std::string path = dir.file("ckpt.safetensors");
    std::vector<State> loaded(world);
    std::vector<std::map<std::string, std::string>> metadata(world);
    auto errors = run_ranks(world, [&](ProcessGroup& pg) {
      CheckpointOptions options;
      options.root = world - 1;
      options.metadata = {{"epoch", "7"}};
      save_checkpoint(pg, make_state(), path, options);
      SafetensorsFile f = load_checkpoint_file(pg, path, /*root=*/0);
      loaded[pg.rank()] = std::move(f.tensors);
      metadata[pg.rank()] = std::move(f.metadata);
    });
    expect_all_ok(errors);
    const State want = make_state();
    expect_same_state(load(path), want);                                     // the file itself, read without the group
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});  // no temporary left over
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(::testing::Message() << "rank " << r);
      expect_same_state(loaded[r], want);
      EXPECT_EQ(metadata[r], (std::map<std::string, std::string>{{"epoch", "7"}}));
      for (const auto& item : loaded[r]) EXPECT_TRUE(item.value().is_cpu());
    }
  }
}

TEST(DistributedCheckpoint, RootWriteFailureIsThrownOnEveryRank) {
  test::TempDir dir;
  test::write_bytes(dir.file("a_file"), "not a directory");
  const std::vector<std::string> bad_paths = {dir.file("missing_dir/ckpt.safetensors"), dir.file("a_file/ckpt.safetensors")};
  for (const std::string& path : bad_paths) {
    for (int root : {0, 2}) {
      SCOPED_TRACE(path + " root " + std::to_string(root));
      bool later_save_ok[3] = {false, false, false};
      auto errors = run_ranks(3, [&](ProcessGroup& pg) {
        try {
          save_checkpoint(pg, make_state(), path, root);
        } catch (const IOError&) {
          // The group is still in step after the failure: the next checkpoint works.
          save_checkpoint(pg, make_state(), dir.file("after.safetensors"), root);
          later_save_ok[pg.rank()] = true;
          throw;
        }
      });
      const std::string first = message_if<IOError>(errors[0]);
      EXPECT_NE(first.find("save_checkpoint: rank " + std::to_string(root) + " could not write '" + path + "'"), std::string::npos) << first;
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(message_if<IOError>(errors[r]), first) << "rank " << r << " threw something else";
        EXPECT_TRUE(later_save_ok[r]) << "rank " << r;
      }
      expect_same_state(load(dir.file("after.safetensors")), make_state());
    }
  }
}

TEST(DistributedCheckpoint, IdenticalCheckNamesTheDivergedRank) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<std::vector<int>> reported(3);
  auto errors = run_ranks(3, [&](ProcessGroup& pg) {
    try {
      save_checkpoint(pg, make_state(pg.rank() == 2 ? 1e-6f : 0.0f), path);  // rank 2 drifted by 1e-6 (a few ulps)
    } catch (const StateMismatch& e) {
      reported[pg.rank()] = e.ranks();
      throw;
    }
  });
  const std::string first = message_if<StateMismatch>(errors[0]);
  EXPECT_NE(first.find("the state of rank(s) 2 differs from root's (rank 0)"), std::string::npos) << first;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(message_if<StateMismatch>(errors[r]), first) << "rank " << r;
    EXPECT_EQ(reported[r], std::vector<int>{2}) << "rank " << r;
  }
  EXPECT_TRUE(dir.entries().empty()) << "nothing may be written when the ranks disagree";

  // With root = 2 the other two differ from it; without the check root's state is written.
  errors = run_ranks(3, [&](ProcessGroup& pg) { save_checkpoint(pg, make_state(pg.rank() == 2 ? 1.0f : 0.0f), path, 2); });
  for (int r = 0; r < 3; ++r) {
    try {
      if (errors[r]) std::rethrow_exception(errors[r]);
      ADD_FAILURE() << "rank " << r << " returned normally";
    } catch (const StateMismatch& e) {
      EXPECT_EQ(e.ranks(), std::vector<int>({0, 1})) << "rank " << r;
    }
  }
  errors = run_ranks(3, [&](ProcessGroup& pg) {
    CheckpointOptions options;
    options.root = 2;
    options.verify_identical = false;
    save_checkpoint(pg, make_state(pg.rank() == 2 ? 1.0f : 0.0f), path, options);
  });
  expect_all_ok(errors);
  expect_same_state(load(path), make_state(1.0f));
}

TEST(DistributedCheckpoint, LoadReachesRanksWithoutTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("only_on_root.safetensors");
  save(make_state(), path);
  // Only root (rank 1) is given the real path; the others name a file that does not exist, as on
  // machines without it: they must get root's tensors anyway.
  std::vector<State> loaded(3);
  auto errors = run_ranks(3, [&](ProcessGroup& pg) {
    const std::string mine = pg.rank() == 1 ? path : dir.file("not_here.safetensors");
    loaded[pg.rank()] = load_checkpoint(pg, mine, /*root=*/1);
  });
  expect_all_ok(errors);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    expect_same_state(loaded[r], make_state());
  }
}

TEST(DistributedCheckpoint, MissingOrCorruptFileOnRootIsThrownOnEveryRank) {
  test::TempDir dir;
  test::write_bytes(dir.file("corrupt.safetensors"), test::le64(40) + "{\"w\": {\"dtype\": \"F32\", \"shape\": [2]");
  for (const std::string name : {"missing.safetensors", "corrupt.safetensors"}) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    auto errors = run_ranks(2, [&](ProcessGroup& pg) { load_checkpoint(pg, path); });
    const std::string first = message_if<IOError>(errors[0]);
    EXPECT_NE(first.find("load_checkpoint: rank 0 could not read '" + path + "': "), std::string::npos) << first;
    EXPECT_EQ(message_if<IOError>(errors[1]), first);
  }
}

TEST(DistributedCheckpoint, RootOutOfRangeIsAValueErrorBeforeAnyCommunication) {
  test::TempDir dir;
  auto errors = run_ranks(2, [&](ProcessGroup& pg) {
    EXPECT_THROW(save_checkpoint(pg, make_state(), dir.file("x"), 2), ValueError);
    EXPECT_THROW(load_checkpoint(pg, dir.file("x"), -1), ValueError);
    try {
      save_checkpoint(pg, make_state(), dir.file("x"), 5);
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("root must lie in [0, 2), got 5"), std::string::npos) << e.what();
    }
  });
  expect_all_ok(errors);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(StateHash, SeesEveryPartOfTheState) {
  const uint64_t base = state_hash(make_state());
  EXPECT_EQ(state_hash(make_state()), base);
  EXPECT_NE(state_hash(make_state(1e-6f)), base);  // one value
  State reordered;                                 // insertion order does not matter: the file does not keep it
  const State s = make_state();
  for (size_t i = s.size(); i-- > 0;) reordered.insert(s[i].key(), s[i].value());
  EXPECT_EQ(state_hash(reordered), base);
  State contiguous;  // a view hashes as its row-major values
  for (const auto& item : s) contiguous.insert(item.key(), item.value().contiguous());
  EXPECT_EQ(state_hash(contiguous), base);

  auto with = [&](const std::string& key, Tensor t) {
    State c = make_state();
    c.insert_or_assign(key, std::move(t));
    return state_hash(c);
  };
  const Tensor w = make_state()["layer.weight"];
  EXPECT_NE(with("layer.weight", w.reshape({3, 2})), base);                        // same bytes, another shape
  EXPECT_NE(with("mask", tensor(std::vector<uint8_t>{1, 0, 1}).to(kBool)), base);  // same bytes, another dtype
  State renamed = make_state();
  renamed.erase("layer.bias");
  renamed.insert("layer.bias2", make_state()["layer.bias"]);
  EXPECT_NE(state_hash(renamed), base);
  State fewer = make_state();
  fewer.erase("empty");
  EXPECT_NE(state_hash(fewer), base);
  EXPECT_NE(state_hash(State{}), base);
}

}  // namespace
}  // namespace dp::distributed
