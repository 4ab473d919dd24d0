#include "data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include "dp/dp.h"

namespace dp::train {
namespace {

// Fashion-MNIST's training-set pixel mean and standard deviation (as torchvision users normalise).
constexpr double kMean = 0.2860, kStd = 0.3530;

// Features, labels: the teacher is fixed (not drawn from the run's seed), so every seed poses the
// same problem, and the labels do not consume the generator the data is drawn from.
DataSets random_sets(const RunSettings& s) {
  const bool seed_model = s.model == "seed";
  const int64_t features = seed_model ? 5 : 784;
  data::RandomDataset train_x(features, s.data_size);
  data::RandomDataset test_x(features, s.data_size);
  DataSets out;
  out.binary = seed_model;
  if (seed_model) {
    // The hyperplane examples/seed_training uses: something for Linear(5,1) + Sigmoid to learn.
    Tensor w = tensor<float>({1.0f, -2.0f, 0.5f, 1.5f, -1.0f}, {5, 1});
    auto label = [&](const Tensor& x) { return x.matmul(w).gt(0.0).to(kFloat32); };
    out.train = std::make_shared<data::TensorDataset>(train_x.data(), label(train_x.data()));
    out.test = std::make_shared<data::TensorDataset>(test_x.data(), label(test_x.data()));
  } else {
    Generator teacher_gen(20240601);
    Tensor w = randn({784, 10}, {}, &teacher_gen);
    auto label = [&](const Tensor& x) { return x.matmul(w).argmax(1); };
    auto images = [](const Tensor& x) { return x.reshape({x.size(0), 1, 28, 28}); };
    out.train = std::make_shared<data::TensorDataset>(images(train_x.data()), label(train_x.data()));
    out.test = std::make_shared<data::TensorDataset>(images(test_x.data()), label(test_x.data()));
  }
  out.description = "random data (dp::data::RandomDataset): " + std::to_string(s.data_size) + " train, " + std::to_string(s.data_size) +
                    " test rows of " + std::to_string(features) + " features, " +
                    (seed_model ? "labelled by a fixed hyperplane" : "10 classes from a fixed random linear teacher");
  return out;
}

DataSets fashion_sets(const RunSettings& s) {
  DP_CHECK(std::filesystem::is_directory(s.data_dir), IOError, s.data_dir,
           " is not a directory. Fashion-MNIST is installed by Debian's dataset-fashion-mnist package "
           "(apt-get install dataset-fashion-mnist puts it in /usr/share/datasets/fashion-mnist), or give --data-dir");
  data::FashionMNIST train(s.data_dir, true), test(s.data_dir, false);
  DataSets out;
  // Normalised once, not per batch, and in place: the 188 MB of training images are not copied.
  for (const data::FashionMNIST* set : {&train, &test}) {
    Tensor images = set->images();  // a handle to the set's own tensor
    images.sub_(kMean).div_(kStd);
  }
  out.train = std::make_shared<data::TensorDataset>(train.images(), train.targets());
  out.test = std::make_shared<data::TensorDataset>(test.images(), test.targets());
  out.description = "Fashion-MNIST (" + s.data_dir + "): " + std::to_string(train.size()) + " train, " + std::to_string(test.size()) + " test images";
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DP_CHECK(in.good(), IOError, "cannot open '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  DP_CHECK(!in.bad(), IOError, "cannot read '", path, "'");
  return s.str();
}

// Windows of T tokens of tokens[start, start + length) that do not overlap, with their targets one
// token further on: views of `tokens`.
std::shared_ptr<data::TensorDataset> windows(const Tensor& tokens, int64_t start, int64_t length, int64_t T) {
  const int64_t n = (length - 1) / T;
  return std::make_shared<data::TensorDataset>(tokens.narrow(0, start, n * T).view({n, T}), tokens.narrow(0, start + 1, n * T).view({n, T}));
}

DataSets text_sets(const RunSettings& s) {
  const std::string path = s.text_path();
  DP_CHECK(!std::filesystem::is_directory(path), IOError, "'", path, "' is a directory, not a text file");
  if (!std::filesystem::exists(path) && path.rfind("/usr/share/games/fortunes/", 0) == 0)
    DP_CHECK(false, IOError, "'", path,
             "' does not exist: Debian's fortunes package installs it (apt-get install fortunes), or give another text file");
  TextData t;
  t.path = path;
  t.tokenizer = std::make_shared<const data::CharTokenizer>(data::CharTokenizer::from_file(path));
  const std::string text = read_bytes(path);
  t.fingerprint = fnv1a64(text);
  Tensor tokens = t.tokenizer->encode(text);
  const int64_t T = s.block_size;
  t.characters = tokens.numel();
  t.train_tokens = t.characters - t.characters / 10;
  t.test_tokens = t.characters - t.train_tokens;
  t.block_size = T;
  DP_CHECK(t.test_tokens >= T + 1, ValueError, "'", path, "' has ", t.characters, " characters, too few for windows of --block-size ", T,
           ": its last 10% (", t.test_tokens, " characters, held out for evaluation) must hold at least one window of ", T,
           " + 1 characters; use a longer text or a smaller --block-size");
  DataSets out;
  out.train = windows(tokens, 0, t.train_tokens, T);
  out.test = windows(tokens, t.train_tokens, t.test_tokens, T);
  t.prompt = tokens[t.train_tokens].item<int64_t>();
  out.description = "text " + path + ": " + std::to_string(t.characters) + " characters, a vocabulary of " +
                    std::to_string(t.tokenizer->vocab_size()) + "; training on the first " + std::to_string(t.train_tokens) + " in " +
                    std::to_string(out.train->size()) + " windows of " + std::to_string(T) + ", the last " + std::to_string(t.test_tokens) +
                    " held out (" + std::to_string(out.test->size()) + " windows)";
  out.text = std::move(t);
  return out;
}

}  // namespace

DataSets load_data(const RunSettings& settings) {
  if (settings.language_model()) return text_sets(settings);
  return settings.data == "random" ? random_sets(settings) : fashion_sets(settings);
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

Share rank_share(int64_t rows, int world, int rank) {
  const int64_t w = world, r = rank, base = rows / w, extra = rows % w;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

EpochSampler::EpochSampler(size_t n, bool shuffle, uint64_t seed, uint64_t epoch, int64_t batch_size, int64_t first_batch, int world, int rank)
    : n_(n), shuffle_(shuffle), seed_(seed), epoch_(epoch), batch_size_(batch_size), first_batch_(first_batch), world_(world), rank_(rank) {
  const int64_t total = static_cast<int64_t>(n);
  for (int64_t start = first_batch * batch_size; start < total; start += batch_size)
    size_ += static_cast<size_t>(rank_share(std::min(batch_size, total - start), world, rank).count);
}

std::vector<int64_t> EpochSampler::indices(uint64_t) {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = data::RandomSampler(n_, seed_).indices(epoch_);
  } else {
    all.resize(n_);
    for (size_t i = 0; i < n_; ++i) all[i] = static_cast<int64_t>(i);
  }
  const int64_t total = static_cast<int64_t>(n_);
  std::vector<int64_t> mine;
  mine.reserve(size_);
  for (int64_t start = first_batch_ * batch_size_; start < total; start += batch_size_) {
    const Share s = rank_share(std::min(batch_size_, total - start), world_, rank_);
    mine.insert(mine.end(), all.begin() + start + s.offset, all.begin() + start + s.offset + s.count);
  }
  return mine;
}

namespace {
// The shuffle's own seed: manual_seed(seed) makes the host generator draw Generator(seed)'s stream,
// which the random data already used, so the permutations get a stream of their own (SplitMix64).
uint64_t shuffle_seed(uint64_t seed) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * 0x53687566ull;  // "Shuf"
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

data::DataLoader epoch_loader(const DataSets& sets, const RunSettings& settings, uint64_t epoch, int64_t first_batch, int64_t workers, int world,
                              int rank) {
  auto sampler = std::make_shared<EpochSampler>(sets.train->size(), settings.shuffle, shuffle_seed(settings.seed), epoch, settings.batch_size,
                                                first_batch, world, rank);
  const int64_t batch = rank_share(settings.batch_size, world, rank).count;
  return data::DataLoader(sets.train, data::DataLoaderOptions(batch).num_workers(workers), sampler);
}

int64_t steps_per_epoch(const DataSets& sets, const RunSettings& settings) {
  const int64_t n = static_cast<int64_t>(sets.train->size());
  return (n + settings.batch_size - 1) / settings.batch_size;
}

int64_t batch_rows(const DataSets& sets, const RunSettings& settings, int64_t batch) {
  const int64_t n = static_cast<int64_t>(sets.train->size());
  return std::min(settings.batch_size, n - batch * settings.batch_size);
}

void check_rank_shares(const DataSets&, const RunSettings& settings, int world) {
  if (world <= 1) return;
  DP_CHECK(settings.batch_size >= world, ValueError, "--batch-size ", settings.batch_size, " is smaller than the ", world,
           " processes: every rank needs at least one row of a full batch (the batch is split over the processes)");
}

bool last_batch_uneven(const DataSets& sets, const RunSettings& settings, int world) {
  return world > 1 && batch_rows(sets, settings, steps_per_epoch(sets, settings) - 1) < world;
}

}  // namespace dp::train
