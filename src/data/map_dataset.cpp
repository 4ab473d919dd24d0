// MapDataset: per-sample generators keyed by the dataset's seed and the sample's place.
#include "dp/data/map_dataset.h"

namespace dp::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of one sample's generator. `domain` keeps loader samples (0) and direct calls (1) apart.
uint64_t sample_seed(uint64_t seed, uint64_t domain, uint64_t epoch, uint64_t position) {
  uint64_t h = splitmix64(seed ^ splitmix64(domain));
  h = splitmix64(h ^ epoch);
  return splitmix64(h ^ position);
}

uint64_t draw_seed() {
  Generator& g = default_generator(Device::cpu());
  uint32_t w[4];
  philox4x32(g.seed(), g.reserve(1), w);
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

}  // namespace

namespace detail {

SampleScope::State& SampleScope::current() {
  thread_local State state;
  return state;
}

SampleScope::SampleScope(uint64_t epoch, uint64_t first_position) : saved_(current()) { current() = State{true, epoch, first_position}; }

SampleScope::~SampleScope() { current() = saved_; }

}  // namespace detail

MapDataset::MapDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<const transforms::Transform> transform, std::optional<uint64_t> seed)
    : dataset_(std::move(dataset)), transform_(std::move(transform)), outside_calls_(std::make_shared<std::atomic<uint64_t>>(0)) {
  DP_CHECK(dataset_ != nullptr, ValueError, "MapDataset: the dataset is null");
  DP_CHECK(transform_ != nullptr, ValueError, "MapDataset: the transform is null");
  seed_ = seed ? *seed : draw_seed();
}

Example MapDataset::get(size_t index) {
  Example example = dataset_->get(index);
  auto& scope = detail::SampleScope::current();
  const uint64_t key = scope.active ? sample_seed(seed_, 0, scope.epoch, scope.next_position++)
                                    : sample_seed(seed_, 1, 0, outside_calls_->fetch_add(1, std::memory_order_relaxed));
  Generator gen(key);
  return transform_->apply(std::move(example), gen);
}

Example MapDataset::get_batch(const std::vector<int64_t>& indices) {
  const size_t n = size();
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) {
    DP_CHECK(i >= 0 && static_cast<size_t>(i) < n, IndexError, "MapDataset::get_batch: index ", i, " is out of range for a dataset of size ", n);
    examples.push_back(get(static_cast<size_t>(i)));
  }
  return collate(examples);
}

}  // namespace dp::data
