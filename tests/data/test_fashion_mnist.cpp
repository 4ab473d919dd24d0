// FashionMNIST: the real files of Debian's dataset-fashion-mnist package against statistics that
// PyTorch computed (tests/data/fixtures/gen_fashion_mnist_stats.py), and every error path on small
// IDX files written here with zlib (corrupt, truncated, mismatched).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "dp/data/data.h"
#include "dp/dp.h"

namespace dp::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const json& stats() {
  static const json j = [] {
    // DP_TESTS_DIR, not __FILE__: a compiler launcher (ccache with base_dir) may make __FILE__ relative.
    const fs::path p = fs::path(DP_TESTS_DIR) / "data" / "fixtures" / "fashion_mnist_stats.json";
    std::ifstream in(p);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    return json::parse(in);
  }();
  return j;
}

// Each real split is loaded once per process (and timed).
const FashionMNIST& real(bool train) {
  static std::unique_ptr<FashionMNIST> sets[2];
  auto& s = sets[train ? 1 : 0];
  if (!s) {
    const auto t0 = std::chrono::steady_clock::now();
    s = std::make_unique<FashionMNIST>(FashionMNIST::kDefaultRoot, train);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing   ] FashionMNIST(train=%d): %lld images in %.1f ms\n", int(train), static_cast<long long>(s->size()), ms);
  }
  return *s;
}

void check_split(bool train) {
  const json& ref = stats()[train ? "train" : "test"];
  const FashionMNIST& ds = real(train);
  const int64_t n = ref["count"].get<int64_t>();
  ASSERT_EQ(static_cast<int64_t>(ds.size()), n);
  EXPECT_EQ(ds.train(), train);
  EXPECT_EQ(ds.images().sizes(), Shape({n, 1, 28, 28}));
  EXPECT_EQ(ds.images().dtype(), kFloat32);
  EXPECT_EQ(ds.targets().sizes(), Shape({n}));
  EXPECT_EQ(ds.targets().dtype(), kInt64);

  const std::vector<int64_t> labels = ds.targets().to_vector<int64_t>();
  std::vector<int64_t> counts(10, 0);
  for (int64_t l : labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++counts[static_cast<size_t>(l)];
  }
  EXPECT_EQ(counts, ref["class_counts"].get<std::vector<int64_t>>());
  const auto first = ref["first_labels"].get<std::vector<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + first.size()), first);
  EXPECT_EQ(labels.back(), ref["last_label"].get<int64_t>());

  const Tensor& x = ds.images();
  const float* p = x.data_ptr<float>();
  double sum = 0, sq = 0;
  int64_t nonzero = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
    nonzero += p[i] > 0;
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const double N = static_cast<double>(x.numel());
  const double mean = sum / N, var = (sq - N * mean * mean) / (N - 1);
  EXPECT_NEAR(mean, ref["mean"].get<double>(), 1e-9);
  EXPECT_NEAR(std::sqrt(var), ref["std"].get<double>(), 1e-7);
  EXPECT_DOUBLE_EQ(static_cast<double>(nonzero) / N, ref["nonzero_fraction"].get<double>());
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  // Bit-exact pixels: pixel / 255 in float32, as ToTensor computes.
  EXPECT_EQ(x.select(0, 1).select(0, 0).select(0, 14).to_vector<float>(), ref["image1_row14"].get<std::vector<float>>());
  for (auto& [idx, s] : ref["sample_sums"].items()) {
    const std::vector<double> img = x.select(0, std::stoll(idx)).to_vector<double>();
    double t = 0;
    for (double v : img) t += v;
    EXPECT_NEAR(t, s.get<double>(), 1e-9) << "sample " << idx;
  }
}

TEST(FashionMNIST, TrainSplitMatchesPyTorch) { check_split(true); }
TEST(FashionMNIST, TestSplitMatchesPyTorch) { check_split(false); }

TEST(FashionMNIST, ThroughAShufflingLoaderWithWorkers) {
  const FashionMNIST& ds = real(true);
  DataLoader loader(std::make_shared<FashionMNIST>(ds), DataLoaderOptions(64).shuffle(true).seed(3).num_workers(2));
  EXPECT_EQ(loader.size(), 938u);  // ceil(60000 / 64)
  std::vector<int64_t> counts(10, 0);
  int64_t seen = 0;
  double pixel_sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (Batch& b : loader) {
    ASSERT_EQ(b.data.dim(), 4);
    ASSERT_EQ(b.data.size(1), 1);
    seen += b.data.size(0);
    for (int64_t l : b.target.to_vector<int64_t>()) ++counts[static_cast<size_t>(l)];
    pixel_sum += b.data.sum().item<double>();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing   ] one shuffled epoch, batch 64, 2 workers: %.1f ms\n", ms);
  EXPECT_EQ(seen, 60000);
  EXPECT_EQ(counts, std::vector<int64_t>(10, 6000));
  EXPECT_NEAR(pixel_sum / (60000.0 * 784), stats()["train"]["mean"].get<double>(), 1e-6);
}

// ---- error paths on generated files ----

void put_be32(std::string& s, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((v >> shift) & 0xff));
}
std::string idx_labels(uint32_t magic, uint32_t n, const std::vector<uint8_t>& labels) {
  std::string s;
  put_be32(s, magic);
  put_be32(s, n);
  s.append(labels.begin(), labels.end());
  return s;
}
std::string idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t pixel_bytes) {
  std::string s;
  put_be32(s, magic);
  put_be32(s, n);
  put_be32(s, rows);
  put_be32(s, cols);
  for (size_t i = 0; i < pixel_bytes; ++i) s.push_back(static_cast<char>(i % 256));
  return s;
}

class FashionMNISTFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dp_fmnist_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_gz(const std::string& name, const std::string& bytes) const {
    gzFile f = gzopen(path(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  void write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string read_raw(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // A valid train split of n samples: labels i % 10, pixel bytes (i % 256).
  void write_valid(uint32_t n, const std::string& prefix = "train") const {
    std::vector<uint8_t> labels;
    for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
    write_gz(prefix + "-labels-idx1-ubyte.gz", idx_labels(0x801, n, labels));
    write_gz(prefix + "-images-idx3-ubyte.gz", idx_images(0x803, n, 28, 28, size_t{n} * 784));
  }
  // Expects FashionMNIST(dir) to throw IOError whose message contains every part.
  void expect_error(const std::vector<std::string>& parts, bool train = true) const {
    try {
      FashionMNIST ds(dir_.string(), train);
      ADD_FAILURE() << "expected IOError containing '" << parts.front() << "'";
    } catch (const IOError& e) {
      const std::string m = e.what();
      for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    }
  }

  fs::path dir_;
};

TEST_F(FashionMNISTFiles, SmallValidFilesLoad) {
  write_valid(3);
  FashionMNIST ds(dir_.string(), true);
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds.targets().to_vector<int64_t>(), std::vector<int64_t>({0, 1, 2}));
  const std::vector<float> px = ds.images().to_vector<float>();
  ASSERT_EQ(px.size(), 3u * 784);
  for (size_t i = 0; i < px.size(); ++i) ASSERT_EQ(px[i], static_cast<float>(i % 256) / 255.0f) << i;
  // The test split reads the t10k files.
  expect_error({"t10k-labels-idx1-ubyte.gz", "does not exist"}, /*train=*/false);
  write_valid(2, "t10k");
  EXPECT_EQ(FashionMNIST(dir_.string(), false).size(), 2u);
}

TEST_F(FashionMNISTFiles, UncompressedFilesAreReadWhenNoGzExists) {
  write_raw("train-labels-idx1-ubyte", idx_labels(0x801, 2, {4, 9}));
  write_raw("train-images-idx3-ubyte", idx_images(0x803, 2, 28, 28, 2 * 784));
  FashionMNIST ds(dir_.string(), true);
  EXPECT_EQ(ds.targets().to_vector<int64_t>(), std::vector<int64_t>({4, 9}));
}

TEST_F(FashionMNISTFiles, MissingFilesSayHowToInstall) {
  expect_error({path("train-labels-idx1-ubyte.gz"), "does not exist", "apt-get install dataset-fashion-mnist"});
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 1, {0}));
  expect_error({path("train-images-idx3-ubyte.gz"), "apt-get install dataset-fashion-mnist"});
  try {
    FashionMNIST ds((dir_ / "nowhere").string());
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
  }
}

TEST_F(FashionMNISTFiles, BadMagicNumbers) {
  write_valid(2);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x803, 2, {0, 1}));
  expect_error({path("train-labels-idx1-ubyte.gz"), "magic number 0x00000803", "expected 0x00000801"});
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 2, {0, 1}));
  write_gz("train-images-idx3-ubyte.gz", idx_images(0x0801, 2, 28, 28, 2 * 784));
  expect_error({path("train-images-idx3-ubyte.gz"), "magic number 0x00000801", "expected 0x00000803"});
}

TEST_F(FashionMNISTFiles, WrongImageSize) {
  write_valid(2);
  write_gz("train-images-idx3-ubyte.gz", idx_images(0x803, 2, 32, 32, 2 * 1024));
  expect_error({path("train-images-idx3-ubyte.gz"), "32x32", "expected 28x28"});
}

TEST_F(FashionMNISTFiles, CountsMustAgree) {
  write_valid(4);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 5, {0, 1, 2, 3, 4}));
  expect_error({path("train-images-idx3-ubyte.gz"), "4 images", path("train-labels-idx1-ubyte.gz"), "5 labels"});
}

TEST_F(FashionMNISTFiles, TruncatedData) {
  write_valid(3);
  // Header announces 3 images, only 2.5 follow.
  write_gz("train-images-idx3-ubyte.gz", idx_images(0x803, 3, 28, 28, 2 * 784 + 392));
  expect_error({path("train-images-idx3-ubyte.gz"), "truncated", "3 images of 28x28 (2352 bytes)", "after 1960 bytes"});
  // Labels: 3 announced, 1 present.
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 3, {1}));
  expect_error({path("train-labels-idx1-ubyte.gz"), "truncated", "3 labels", "after 1 bytes"});
  // A header cut short.
  write_gz("train-labels-idx1-ubyte.gz", std::string("\0\0\x08\x01\0\0", 6));
  expect_error({path("train-labels-idx1-ubyte.gz"), "truncated", "after 6 of the 8 header bytes"});
  write_gz("train-labels-idx1-ubyte.gz", "");
  expect_error({path("train-labels-idx1-ubyte.gz"), "truncated", "after 0 of the 8 header bytes"});
}

TEST_F(FashionMNISTFiles, TruncatedGzipStream) {
  write_valid(20);
  const std::string gz = read_raw("train-images-idx3-ubyte.gz");
  ASSERT_GT(gz.size(), 200u);
  write_raw("train-images-idx3-ubyte.gz", gz.substr(0, gz.size() / 2));  // cut the compressed file
  expect_error({path("train-images-idx3-ubyte.gz")});
  try {
    FashionMNIST ds(dir_.string());
  } catch (const IOError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("truncated") != std::string::npos || m.find("corrupt") != std::string::npos) << m;
  }
}

TEST_F(FashionMNISTFiles, CorruptGzip) {
  write_valid(2);
  std::string gz = read_raw("train-labels-idx1-ubyte.gz");
  ASSERT_GT(gz.size(), 12u);
  for (size_t i = 10; i < gz.size(); ++i) gz[i] = static_cast<char>(0xff);  // gzip header kept, deflate data destroyed
  write_raw("train-labels-idx1-ubyte.gz", gz);
  expect_error({path("train-labels-idx1-ubyte.gz"), "corrupt", "zlib"});
}

TEST_F(FashionMNISTFiles, LabelOutOfRange) {
  write_valid(3);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 3, {0, 9, 10}));
  expect_error({path("train-labels-idx1-ubyte.gz"), "label 10 at index 2", "0..9"});
}

TEST_F(FashionMNISTFiles, TrailingData) {
  write_valid(2);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 2, {0, 1, 2}));
  expect_error({path("train-labels-idx1-ubyte.gz"), "data after the 2 labels"});
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 2, {0, 1}));
  write_gz("train-images-idx3-ubyte.gz", idx_images(0x803, 2, 28, 28, 2 * 784 + 5));
  expect_error({path("train-images-idx3-ubyte.gz"), "data after the 2 images of 28x28"});
}

TEST_F(FashionMNISTFiles, HugeAnnouncedCountIsTruncationNotAnAllocation) {
  write_valid(2);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(0x801, 0xffffffffu, {0, 1}));
  expect_error({path("train-labels-idx1-ubyte.gz"), "truncated", "4294967295 labels"});
}

}  // namespace
}  // namespace dp::data
