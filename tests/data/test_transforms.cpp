// Image transforms and MapDataset: Normalize against PyTorch (tests/golden/gen_transforms.py),
// RandomCrop and RandomHorizontalFlip pixel positions from a seeded generator, Compose order, and
// the DataLoader path: transformed batches reproducible from the seed, equal for any number of
// workers and batch size, new draws each epoch.
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <vector>
#include "dp/data/data.h"
#include "dp/dp.h"
#include "support/golden.h"

namespace dp::data {
namespace {

namespace T = transforms;
using test::all_close;
using test::golden_case;
using test::tensor_from_json;

TEST(Normalize, MatchesPyTorch) {
  for (const char* name : {"normalize_chw_float32", "normalize_chw_float64", "normalize_nchw_float32", "normalize_one_value_float32",
                           "normalize_one_channel_float32", "normalize_negative_std_float64"}) {
    SCOPED_TRACE(name);
    const auto& c = golden_case("transforms.json", name);
    T::Normalize norm(c["mean"].get<std::vector<double>>(), c["std"].get<std::vector<double>>());
    Tensor x = tensor_from_json(c["input"]);
    Tensor y = norm(x);
    EXPECT_EQ(y.dtype(), x.dtype());
    EXPECT_TRUE(all_close(y, c["output"], x.dtype() == kFloat64 ? 1e-15 : 1e-6, x.dtype() == kFloat64 ? 1e-15 : 1e-6));
    // On an example: the data is normalised, the target passes through.
    Example e = norm(Example{x, scalar_tensor(int64_t{7}, kInt64)});
    EXPECT_TRUE(equal(e.data, y));
    EXPECT_EQ(e.target.item<int64_t>(), 7);
  }
}

TEST(Normalize, BadInputIsAnError) {
  EXPECT_THROW(T::Normalize({0.5, 0.5}, {0.2, 0.0}), ValueError);
  EXPECT_THROW(T::Normalize(std::vector<double>{}, std::vector<double>{}), ValueError);
  T::Normalize norm({0.1, 0.2, 0.3}, {1.0, 1.0, 1.0});
  EXPECT_THROW(norm(ones({3, 4, 4}, kInt64)), DTypeError);
  EXPECT_THROW(norm(ones({4, 4})), ShapeError);
  try {
    norm(ones({2, 4, 4}));
    FAIL() << "expected a channel mismatch";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mean has 3 values but the image [2, 4, 4] has 2 channels"), std::string::npos) << e.what();
  }
}

// An image whose pixel values name their position: x[c, r, q] = 1000 c + 10 r + q + 1 (never 0).
Tensor labelled_image(int64_t c, int64_t h, int64_t w, float offset = 0) {
  std::vector<float> v;
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t q = 0; q < w; ++q) v.push_back(offset + static_cast<float>(1000 * ch + 10 * r + q + 1));
  return tensor(v, {c, h, w});
}

TEST(RandomCrop, PixelPositionsFollowTheDrawnCorner) {
  const Tensor img = labelled_image(2, 5, 6);
  T::RandomCrop crop(4, /*padding=*/1);
  for (uint64_t seed : {1, 2, 3, 42}) {
    SCOPED_TRACE(seed);
    // torchvision's draws: i = randint(0, 7 - 4 + 1), then j = randint(0, 8 - 4 + 1).
    Generator expect_gen(seed);
    const int64_t i = randint(0, 4, {1}, kInt64, &expect_gen).item<int64_t>();
    const int64_t j = randint(0, 5, {1}, kInt64, &expect_gen).item<int64_t>();
    Generator corner_gen(seed);
    EXPECT_EQ(crop.corner(7, 8, corner_gen), std::make_pair(i, j));
    Generator gen(seed);
    Tensor out = crop(img, gen);
    ASSERT_EQ(out.sizes(), (Shape{2, 4, 4}));
    auto v = out.to_vector<float>();
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t y = 0; y < 4; ++y)
        for (int64_t x = 0; x < 4; ++x) {
          const int64_t r = i + y - 1, q = j + x - 1;  // the source pixel (padding 1)
          const float want = (r >= 0 && r < 5 && q >= 0 && q < 6) ? static_cast<float>(1000 * ch + 10 * r + q + 1) : 0.0f;
          ASSERT_EQ(v[static_cast<size_t>((ch * 4 + y) * 4 + x)], want) << "pixel (" << ch << ", " << y << ", " << x << ")";
        }
  }
}

TEST(RandomCrop, EveryCornerOccursAndEdgeCases) {
  T::RandomCrop crop(std::array<int64_t, 2>{3, 2});
  std::set<std::pair<int64_t, int64_t>> corners;
  Generator gen(5);
  for (int k = 0; k < 400; ++k) corners.insert(crop.corner(5, 4, gen));
  EXPECT_EQ(corners.size(), 3u * 3u);  // i in [0, 2], j in [0, 2]
  for (const auto& [i, j] : corners) {
    EXPECT_LE(i, 2);
    EXPECT_LE(j, 2);
  }
  // The crop the image's own size: the image itself, with no draw.
  Tensor img = labelled_image(1, 3, 2);
  Generator g(1);
  const uint64_t before = g.offset();
  EXPECT_TRUE(equal(crop(img, g), img));
  EXPECT_EQ(g.offset(), before);
  // [H, W] images, and the fill value of the padding.
  Generator g2(2);
  Tensor out = T::RandomCrop(6, 3).fill(-1.0)(ones({2, 2}), g2);
  EXPECT_EQ(out.sizes(), (Shape{6, 6}));
  EXPECT_EQ(out.eq(-1.0).sum().item<int64_t>() + out.eq(1.0).sum().item<int64_t>(), 36);
  EXPECT_EQ(out.eq(1.0).sum().item<int64_t>(), 4);  // the whole 2x2 image lies inside any 6x6 crop of 8x8
  EXPECT_THROW(crop(ones({1, 2, 2})), ValueError);  // larger than the image
  EXPECT_THROW(crop(ones({4})), ShapeError);
  EXPECT_THROW(T::RandomCrop(0), ValueError);
  EXPECT_THROW(T::RandomCrop(3, -1), ValueError);
}

TEST(RandomHorizontalFlip, FlipsWhenTheDrawIsBelowP) {
  const Tensor img = labelled_image(3, 2, 5);
  Tensor mirrored = index_select(img, 2, tensor(std::vector<int64_t>{4, 3, 2, 1, 0}));
  EXPECT_TRUE(equal(T::RandomHorizontalFlip(1.0)(img), mirrored));
  EXPECT_TRUE(equal(T::RandomHorizontalFlip(0.0)(img), img));
  T::RandomHorizontalFlip flip(0.3);
  int flipped = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Generator expect_gen(seed);
    const bool expect_flip = rand({1}, {}, &expect_gen).item<double>() < 0.3;
    Generator gen(seed);
    Tensor out = flip(img, gen);
    EXPECT_TRUE(equal(out, expect_flip ? mirrored : img)) << seed;
    flipped += expect_flip;
  }
  EXPECT_NEAR(flipped / 400.0, 0.3, 0.08);
  // An [H, W] image.
  Tensor hw = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(equal(T::RandomHorizontalFlip(1.0)(hw), tensor(std::vector<float>{3, 2, 1, 6, 5, 4}, {2, 3})));
  EXPECT_THROW(T::RandomHorizontalFlip(1.5), ValueError);
  EXPECT_THROW(T::RandomHorizontalFlip(1.0)(ones({3})), ShapeError);
}

TEST(Compose, AppliesInOrderWithOneGenerator) {
  Tensor x = tensor(std::vector<float>{1, 2, 3}).reshape({1, 1, 3});
  T::Lambda twice([](const Tensor& t) { return t * 2; });
  T::Lambda plus_one([](const Tensor& t) { return t + 1; });
  EXPECT_TRUE(equal(T::Compose(twice, plus_one)(Example{x, {}}).data, x * 2 + 1));
  EXPECT_TRUE(equal(T::Compose(plus_one, twice)(Example{x, {}}).data, (x + 1) * 2));
  // Normalize then a Lambda, given as shared_ptrs and values together.
  auto norm = std::make_shared<T::Normalize>(1.0, 2.0);
  EXPECT_TRUE(equal(T::Compose(norm, twice)(Example{x, {}}).data, (x - 1) / 2 * 2));
  // The random transforms draw one after the other from the same generator.
  const Tensor img = labelled_image(1, 6, 6);
  T::RandomCrop crop(4, 1);
  T::RandomHorizontalFlip flip(0.5);
  T::Compose both(crop, flip);
  EXPECT_EQ(both.size(), 2u);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Generator g1(seed), g2(seed);
    Tensor step = flip(crop(img, g1), g1);
    EXPECT_TRUE(equal(both(Example{img, {}}, g2).data, step)) << seed;
  }
  EXPECT_THROW(T::Compose(std::vector<std::shared_ptr<const T::Transform>>{nullptr}), ValueError);
  EXPECT_THROW(T::Lambda(nullptr), ValueError);
}

// ---------------------------------------------------------------- MapDataset and the DataLoader

// Sample k: a 1x6x6 labelled image offset by 100000 k (so every pixel names its sample), target k.
TensorDataset images(int64_t n) {
  std::vector<Tensor> xs;
  for (int64_t k = 0; k < n; ++k) xs.push_back(labelled_image(1, 6, 6, 100000.0f * static_cast<float>(k)));
  return TensorDataset(stack(xs), arange(n));
}

T::Compose augment() { return T::Compose(T::RandomCrop(4, 1), T::RandomHorizontalFlip(0.5)); }

std::vector<Batch> run_epochs(DataLoader& loader, int epochs) {
  std::vector<Batch> out;
  for (int e = 0; e < epochs; ++e)
    for (Batch& b : loader) out.push_back(b);
  return out;
}

void expect_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(equal(a[k].data, b[k].data)) << "batch " << k;
    EXPECT_TRUE(equal(a[k].target, b[k].target)) << "batch " << k;
  }
}

// Whether `out` is some crop (padding 1) of sample k's image, mirrored or not.
bool is_crop_of(const Tensor& out, int64_t k) {
  const Tensor src = labelled_image(1, 6, 6, 100000.0f * static_cast<float>(k));
  Tensor padded = zeros({1, 8, 8});
  padded.narrow(1, 1, 6).narrow(2, 1, 6).copy_(src);
  Tensor reversed = tensor(std::vector<int64_t>{3, 2, 1, 0});
  for (int64_t i = 0; i <= 4; ++i)
    for (int64_t j = 0; j <= 4; ++j) {
      Tensor c = padded.narrow(1, i, 4).narrow(2, j, 4);
      if (equal(out, c) || equal(out, index_select(c, 2, reversed))) return true;
    }
  return false;
}

TEST(MapDataset, DataLoaderBatchesAreReproducibleAndIndependentOfWorkers) {
  auto make = [](int64_t workers, int64_t batch) {
    return DataLoader(map(images(20), augment(), /*seed=*/77), DataLoaderOptions(batch).shuffle(true).seed(5).num_workers(workers));
  };
  DataLoader inline_loader = make(0, 6);
  DataLoader threaded = make(3, 6);
  const std::vector<Batch> a = run_epochs(inline_loader, 2);
  const std::vector<Batch> b = run_epochs(threaded, 2);
  expect_same_batches(a, b);
  DataLoader again = make(2, 6);
  expect_same_batches(a, run_epochs(again, 2));
  // Every transformed sample is a crop of its own image; targets pass through.
  for (const Batch& batch : a) {
    ASSERT_EQ(batch.data.sizes()[1], 1);
    for (int64_t r = 0; r < batch.data.size(0); ++r) EXPECT_TRUE(is_crop_of(batch.data[r], batch.target[r].item<int64_t>()));
  }
  // Epoch 1 draws anew: the same sample is transformed differently in some cases.
  auto sample_in = [](const std::vector<Batch>& batches, size_t first, size_t count, int64_t k) {
    for (size_t b = first; b < first + count; ++b)
      for (int64_t r = 0; r < batches[b].data.size(0); ++r)
        if (batches[b].target[r].item<int64_t>() == k) return batches[b].data[r];
    return Tensor();
  };
  int differ = 0;
  for (int64_t k = 0; k < 20; ++k) differ += !equal(sample_in(a, 0, 4, k), sample_in(a, 4, 4, k));
  EXPECT_GT(differ, 5);
  // Another seed, other draws.
  DataLoader other(map(images(20), augment(), /*seed=*/78), DataLoaderOptions(6).shuffle(true).seed(5));
  const std::vector<Batch> c = run_epochs(other, 1);
  int differ_seed = 0;
  for (size_t k = 0; k < c.size(); ++k) differ_seed += !equal(a[k].data, c[k].data);
  EXPECT_GT(differ_seed, 0);
}

TEST(MapDataset, DrawsFollowThePositionInTheEpochNotTheBatchSize) {
  DataLoader by4(map(images(12), augment(), 3), DataLoaderOptions(4));
  DataLoader by5(map(images(12), augment(), 3), DataLoaderOptions(5).num_workers(2));
  Tensor all4 = cat([&] {
    std::vector<Tensor> v;
    for (Batch& b : by4) v.push_back(b.data);
    return v;
  }());
  Tensor all5 = cat([&] {
    std::vector<Tensor> v;
    for (Batch& b : by5) v.push_back(b.data);
    return v;
  }());
  EXPECT_TRUE(equal(all4, all5));
}

TEST(MapDataset, ManualSeedMakesUnseededDatasetsReproducible) {
  auto batches = [] {
    manual_seed(123);
    DataLoader loader(map(images(10), augment()), DataLoaderOptions(4).shuffle(true));
    return run_epochs(loader, 2);
  };
  expect_same_batches(batches(), batches());
  manual_seed(123);
  const uint64_t s1 = map(images(2), augment()).seed();
  manual_seed(124);
  EXPECT_NE(map(images(2), augment()).seed(), s1);
}

TEST(MapDataset, DirectCallsAreReproducibleInOrderAndChecked) {
  MapDataset a = map(images(8), augment(), 9);
  MapDataset b = map(std::make_shared<TensorDataset>(images(8)), std::make_shared<T::Compose>(augment()), 9);
  for (size_t k : {3, 5, 3, 0}) {
    Example ea = a.get(k), eb = b.get(k);
    EXPECT_TRUE(equal(ea.data, eb.data));
    EXPECT_TRUE(is_crop_of(ea.data, static_cast<int64_t>(k)));
    EXPECT_EQ(ea.target.item<int64_t>(), static_cast<int64_t>(k));
  }
  EXPECT_EQ(a.size(), 8u);
  Example batch = a.get_batch({1, 2});
  EXPECT_EQ(batch.data.sizes(), (Shape{2, 1, 4, 4}));
  EXPECT_THROW(a.get_batch({8}), IndexError);
  EXPECT_THROW(a.get(8), IndexError);
  EXPECT_THROW(MapDataset(nullptr, std::make_shared<T::Lambda>([](const Tensor& t) { return t; })), ValueError);
  EXPECT_THROW(MapDataset(std::make_shared<TensorDataset>(images(1)), nullptr), ValueError);
}

}  // namespace
}  // namespace dp::data
