// DistributedSampler: PyTorch's layout (padding, cutting, striding) against a literal
// re-implementation of torch.utils.data.DistributedSampler.__iter__ and against PyTorch's own
// output (tests/golden/distributed_sampler.json), shard coverage, epochs, the evaluation layout,
// argument checks, and a DataLoader driven by it.
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include "dp/data/data.h"
#include "dp/dp.h"
#include "support/golden.h"

namespace dp::data {
namespace {

std::vector<int64_t> iota_vec(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

// PyTorch 1.13's DistributedSampler, statement by statement, on a given base list (PyTorch's own
// base is its randperm or range(n); ours is RandomSampler's permutation or 0..n-1).
struct TorchLayout {
  int64_t num_samples;
  std::vector<int64_t> rank_indices;
};
TorchLayout torch_layout(std::vector<int64_t> indices, int64_t world, int64_t rank, bool drop_last) {
  const auto n = static_cast<int64_t>(indices.size());
  int64_t num_samples;
  if (drop_last && n % world != 0) {
    num_samples = static_cast<int64_t>(std::ceil(static_cast<double>(n - world) / static_cast<double>(world)));
  } else {
    num_samples = static_cast<int64_t>(std::ceil(static_cast<double>(n) / static_cast<double>(world)));
  }
  const int64_t total_size = num_samples * world;
  if (!drop_last) {
    const int64_t padding_size = total_size - n;
    if (padding_size <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding_size);
    } else {
      // (indices * ceil(padding_size / len(indices)))[:padding_size]
      const auto reps = static_cast<int64_t>(std::ceil(static_cast<double>(padding_size) / static_cast<double>(n)));
      std::vector<int64_t> repeated;
      for (int64_t k = 0; k < reps; ++k) repeated.insert(repeated.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding_size);
    }
  } else {
    indices.resize(static_cast<size_t>(total_size));
  }
  EXPECT_EQ(static_cast<int64_t>(indices.size()), total_size);
  TorchLayout out{num_samples, {}};
  for (int64_t p = rank; p < total_size; p += world) out.rank_indices.push_back(indices[static_cast<size_t>(p)]);
  EXPECT_EQ(static_cast<int64_t>(out.rank_indices.size()), num_samples);
  return out;
}

const std::vector<size_t> kSizes = {0, 1, 5, 7, 100, 101, 1000};
constexpr int kMaxWorld = 8;
constexpr uint64_t kEpochs = 4;
constexpr uint64_t kSeed = 1234;

// The base list of an epoch, computed once per (n, shuffle, epoch) for all worlds and ranks.
std::vector<int64_t> base_list(size_t n, bool shuffle, uint64_t epoch) { return shuffle ? RandomSampler(n, kSeed).indices(epoch) : iota_vec(n); }

// Every (n, world, rank, shuffle, drop_last, epoch): the list is PyTorch's layout on our base list,
// size() is PyTorch's num_samples, and is_padding marks exactly the repeats.
TEST(DistributedSampler, MatchesTorchLayoutEverywhere) {
  for (size_t n : kSizes) {
    for (bool shuffle : {false, true}) {
      for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
        const std::vector<int64_t> base = base_list(n, shuffle, epoch);
        for (int world = 1; world <= kMaxWorld; ++world) {
          for (bool drop_last : {false, true}) {
            for (int rank = 0; rank < world; ++rank) {
              SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " rank=" << rank << " shuffle=" << shuffle
                                                << " drop_last=" << drop_last << " epoch=" << epoch);
              DistributedSampler s(n, world, rank, shuffle, kSeed, drop_last);
              const TorchLayout want = torch_layout(base, world, rank, drop_last);
              ASSERT_EQ(static_cast<int64_t>(s.size()), want.num_samples);
              ASSERT_EQ(s.indices(epoch), want.rank_indices);
            }
          }
        }
      }
    }
  }
}

// Shards: equal sizes; without drop_last the non-padding entries of all ranks are exactly 0..n-1
// once and the padding is total - n entries; with drop_last every entry is distinct and the union
// is the base list minus its cut tail.
TEST(DistributedSampler, ShardsCoverTheDatasetDisjointly) {
  for (size_t n : kSizes) {
    for (bool shuffle : {false, true}) {
      for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
        const std::vector<int64_t> base = base_list(n, shuffle, epoch);
        for (int world = 1; world <= kMaxWorld; ++world) {
          for (bool drop_last : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " shuffle=" << shuffle << " drop_last=" << drop_last
                                              << " epoch=" << epoch);
            const size_t w = static_cast<size_t>(world);
            const size_t per_rank = drop_last ? n / w : (n + w - 1) / w;
            std::vector<int64_t> real, padding, all;
            for (int rank = 0; rank < world; ++rank) {
              DistributedSampler s(n, world, rank, shuffle, kSeed, drop_last);
              ASSERT_EQ(s.size(), per_rank);
              const std::vector<int64_t> idx = s.indices(epoch);
              ASSERT_EQ(idx.size(), per_rank);
              EXPECT_LE(s.size() - s.num_real(), 1u);  // at most one repeat per rank
              for (size_t k = 0; k < idx.size(); ++k) {
                ASSERT_GE(idx[k], 0);
                ASSERT_LT(idx[k], static_cast<int64_t>(n));
                (s.is_padding(k) ? padding : real).push_back(idx[k]);
                all.push_back(idx[k]);
              }
            }
            std::sort(real.begin(), real.end());
            std::sort(all.begin(), all.end());
            if (drop_last) {
              EXPECT_TRUE(padding.empty());
              EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a repeated index";
              std::vector<int64_t> kept(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(per_rank * w));
              std::sort(kept.begin(), kept.end());
              EXPECT_EQ(all, kept);
            } else {
              EXPECT_EQ(real, iota_vec(n));
              EXPECT_EQ(padding.size(), per_rank * w - n);
              // The padding repeats the head of the base list, in order (cycling when n < world).
              std::vector<int64_t> head;
              for (size_t j = 0; j < padding.size(); ++j) head.push_back(base[j % n]);
              std::sort(head.begin(), head.end());
              std::sort(padding.begin(), padding.end());
              EXPECT_EQ(padding, head);
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, ShuffleChangesWithTheEpochOnly) {
  DistributedSampler a(1000, 4, 1, /*shuffle=*/true, /*seed=*/7);
  DistributedSampler b(1000, 4, 1, /*shuffle=*/true, /*seed=*/7);
  std::vector<std::vector<int64_t>> epochs;
  for (uint64_t e = 0; e < kEpochs; ++e) epochs.push_back(a.indices(e));
  for (uint64_t e = 0; e < kEpochs; ++e) {
    EXPECT_EQ(a.indices(e), epochs[e]) << "epoch " << e << " asked again";
    EXPECT_EQ(b.indices(kEpochs - 1 - e), epochs[kEpochs - 1 - e]) << "another sampler, epochs in another order";
    for (uint64_t f = 0; f < e; ++f) EXPECT_NE(epochs[e], epochs[f]) << "epochs " << f << " and " << e;
  }
  EXPECT_NE(DistributedSampler(1000, 4, 1, true, 8).indices(0), epochs[0]) << "another seed";
  // Without shuffle every epoch is the same strided list.
  DistributedSampler plain(10, 4, 1, /*shuffle=*/false);
  for (uint64_t e = 0; e < kEpochs; ++e) EXPECT_EQ(plain.indices(e), std::vector<int64_t>({1, 5, 9}));
}

// PyTorch's own DistributedSampler (shuffle=False), recorded by tests/golden/gen_distributed_sampler.py.
TEST(DistributedSampler, MatchesTorchGoldenLayout) {
  const auto& cases = test::golden_file("distributed_sampler.json").at("cases");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto n = c.at("n").get<size_t>();
    const int world = c.at("world").get<int>();
    const bool drop_last = c.at("drop_last").get<bool>();
    ASSERT_EQ(c.at("ranks").size(), static_cast<size_t>(world));
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler s(n, world, rank, /*shuffle=*/false, /*seed=*/0, drop_last);
      EXPECT_EQ(s.size(), c.at("size").get<size_t>());
      for (uint64_t epoch : {0, 3}) EXPECT_EQ(s.indices(epoch), c.at("ranks")[rank].get<std::vector<int64_t>>()) << "rank " << rank;
    }
  }
}

TEST(DistributedSampler, PaddingIsAtTheTailOfShortRanks) {
  // n = 10, world = 4: the padded list is 0..9, 0, 1; ranks 2 and 3 end with a repeat.
  const std::vector<std::vector<int64_t>> want = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int rank = 0; rank < 4; ++rank) {
    DistributedSampler s(10, 4, rank, /*shuffle=*/false);
    EXPECT_EQ(s.indices(0), want[rank]);
    EXPECT_EQ(s.num_real(), rank < 2 ? 3u : 2u);
    EXPECT_FALSE(s.is_padding(0));
    EXPECT_FALSE(s.is_padding(1));
    EXPECT_EQ(s.is_padding(2), rank >= 2);
  }
  // n = 2, world = 5: padding (3) exceeds n, so the list cycles: 0, 1, 0, 1, 0.
  const std::vector<int64_t> cycled = {0, 1, 0, 1, 0};
  for (int rank = 0; rank < 5; ++rank) {
    DistributedSampler s(2, 5, rank, /*shuffle=*/false);
    EXPECT_EQ(s.indices(0), std::vector<int64_t>{cycled[rank]});
    EXPECT_EQ(s.is_padding(0), rank >= 2);
  }
}

TEST(DistributedSampler, EvaluationVisitsEveryIndexOnce) {
  for (size_t n : kSizes) {
    for (int world = 1; world <= kMaxWorld; ++world) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world);
      std::vector<int64_t> all;
      size_t smallest = n + 1, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        DistributedSampler s = DistributedSampler::evaluation(n, world, rank);
        EXPECT_TRUE(s.is_evaluation());
        EXPECT_FALSE(s.shuffle());
        const std::vector<int64_t> idx = s.indices(0);
        ASSERT_EQ(idx.size(), s.size());
        EXPECT_EQ(s.num_real(), s.size());
        EXPECT_EQ(s.indices(5), idx);
        // Strided like the training layout: rank, rank + world, ...
        for (size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(idx[k], static_cast<int64_t>(rank + k * static_cast<size_t>(world)));
        smallest = std::min(smallest, idx.size());
        largest = std::max(largest, idx.size());
        all.insert(all.end(), idx.begin(), idx.end());
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(all, iota_vec(n));
      EXPECT_LE(largest - smallest, 1u);
    }
  }
  // 10 over 4: ranks 0 and 1 take three, ranks 2 and 3 two.
  EXPECT_EQ(DistributedSampler::evaluation(10, 4, 1).indices(0), std::vector<int64_t>({1, 5, 9}));
  EXPECT_EQ(DistributedSampler::evaluation(10, 4, 3).indices(0), std::vector<int64_t>({3, 7}));
}

TEST(DistributedSampler, RejectsBadArguments) {
  auto message_of = [](auto make) -> std::string {
    try {
      make();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no ValueError)";
  };
  EXPECT_NE(message_of([] { DistributedSampler(10, 0, 0); }).find("world must be at least 1, got 0"), std::string::npos);
  EXPECT_NE(message_of([] { DistributedSampler(10, -2, 0); }).find("got -2"), std::string::npos);
  EXPECT_NE(message_of([] { DistributedSampler(10, 4, 4); }).find("[0, 4), got 4"), std::string::npos);
  EXPECT_NE(message_of([] { DistributedSampler(10, 4, -1); }).find("[0, 4), got -1"), std::string::npos);
  EXPECT_NE(message_of([] { DistributedSampler::evaluation(10, 3, 7); }).find("[0, 3), got 7"), std::string::npos);
  EXPECT_NO_THROW(DistributedSampler(0, 1, 0));
}

// A DataLoader over a TensorDataset yields exactly the rows of this rank's shard, epoch by epoch.
TEST(DistributedSampler, DrivesADataLoader) {
  const int64_t n = 23;
  const Tensor data = arange(2 * n, TensorOptions(kFloat32)).reshape({n, 2});
  const Tensor target = arange(n);
  const int world = 3;
  std::vector<int64_t> seen_epoch0;
  for (int rank = 0; rank < world; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(static_cast<size_t>(n), world, rank, /*shuffle=*/true, /*seed=*/99);
    DataLoader loader(TensorDataset(data, target), DataLoaderOptions(4), sampler);
    EXPECT_EQ(loader.size(), 2u);  // 8 indices per rank in batches of 4
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      // Expected independently: PyTorch's layout on the epoch's RandomSampler permutation.
      const std::vector<int64_t> want = torch_layout(RandomSampler(n, 99).indices(epoch), world, rank, false).rank_indices;
      std::vector<int64_t> targets;
      std::vector<float> rows;
      for (Batch& b : loader) {
        for (int64_t t : b.target.to_vector<int64_t>()) targets.push_back(t);
        for (float v : b.data.to_vector<float>()) rows.push_back(v);
      }
      EXPECT_EQ(targets, want) << "rank " << rank << " epoch " << epoch;
      ASSERT_EQ(rows.size(), 2 * want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_EQ(rows[2 * k], static_cast<float>(2 * want[k]));
        EXPECT_EQ(rows[2 * k + 1], static_cast<float>(2 * want[k] + 1));
      }
      if (epoch == 0) seen_epoch0.insert(seen_epoch0.end(), targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(sampler->num_real()));
    }
  }
  std::sort(seen_epoch0.begin(), seen_epoch0.end());
  EXPECT_EQ(seen_epoch0, iota_vec(n));  // the ranks' real rows together: every sample once
}

}  // namespace
}  // namespace dp::data
