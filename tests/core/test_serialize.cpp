// Safetensors checkpoints (dp/core/serialize.h): round trips of every dtype (0-dim, empty,
// non-contiguous, shared storage, metadata), files written by PyTorch (tests/golden/gen_safetensors.py)
// load bit for bit, our files are byte-identical to the reference writer's layout, are read by an
// independent PyTorch reader (tests/golden/check_safetensors.py), and match the reference
// implementation's own serialization examples.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include "dp/core/serialize.h"
#include "support/golden.h"
#include "support/run_command.h"
#include "support/temp_files.h"

namespace dp {
namespace {

namespace fs = std::filesystem;
using test::json;

using test::TempDir;  // a fresh directory per test, removed afterwards
using test::read_bytes;

// The tensor's elements as raw bytes (contiguous, on the host).
std::string bytes_of(const Tensor& t) {
  Tensor c = t.detach().cpu().contiguous();
  return c.nbytes() == 0 ? std::string() : std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

DType dtype_named(const std::string& name) {
  for (DType d : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (name == dtype_name(d)) return d;
  throw std::runtime_error("unknown dtype " + name);
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The exact tensor the golden JSON describes (from its "hex" bytes).
Tensor tensor_from_hex(const json& j) {
  std::string raw = unhex(j.at("hex").get<std::string>());
  return from_blob_copy(raw.data(), j.at("shape").get<Shape>(), dtype_named(j.at("dtype").get<std::string>()));
}

const json& golden_entry(const std::string& file) { return test::golden_file("safetensors.json").at("files").at(file); }
std::string golden_path(const std::string& file) { return std::string(DP_GOLDEN_DIR) + "/" + file; }

// Values of every dtype: mixed signs and magnitudes, exact in each type.
Tensor sample(DType dtype, const Shape& shape, int seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-1000, 1000);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& e : v) e = d(gen) / 8.0;
  Tensor t = tensor<double>(v, shape);
  if (dtype == kUInt8) t = t.abs();
  return t.to(dtype);
}

void expect_same(const Tensor& actual, const Tensor& expected, const std::string& name) {
  ASSERT_TRUE(actual.defined()) << name;
  EXPECT_EQ(actual.dtype(), expected.dtype()) << name;
  EXPECT_EQ(actual.sizes(), expected.sizes()) << name;
  EXPECT_EQ(bytes_of(actual), bytes_of(expected)) << name << ": bytes differ";
}

TEST(Serialize, RoundTripEveryDtypeIncludingScalarsAndEmpty) {
  TempDir dir;
  OrderedDict<std::string, Tensor> in;
  int seed = 0;
  for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool}) {
    std::string n = dtype_name(dt);
    in.insert(n + ".matrix", sample(dt, {3, 5}, ++seed));
    in.insert(n + ".scalar", sample(dt, {}, ++seed));
    in.insert(n + ".empty", make_empty({0}, dt, Device::cpu()));
    in.insert(n + ".empty3d", make_empty({2, 0, 3}, dt, Device::cpu()));
    in.insert(n + ".4d", sample(dt, {2, 1, 3, 2}, ++seed));
  }
  std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "12"}, {"unicode", "λ → ∞"}, {"", "empty key"}, {"ctl", "a\x01\n\"b\\"}};
  const std::string path = dir.file("all.safetensors");
  save(in, path, meta);
  SafetensorsFile f = load_file(path);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), in.size());
  for (const auto& item : in) {
    const Tensor* t = f.tensors.find(item.key());
    ASSERT_NE(t, nullptr) << item.key();
    expect_same(*t, item.value(), item.key());
    EXPECT_TRUE(t->is_contiguous()) << item.key();
    EXPECT_EQ(t->device(), Device::cpu());
  }
  EXPECT_EQ(f.tensors["float32.scalar"].dim(), 0);
  EXPECT_EQ(f.tensors["float32.scalar"].numel(), 1);
  EXPECT_EQ(f.tensors["bool.empty3d"].sizes(), (Shape{2, 0, 3}));
  // load() is load_file().tensors.
  OrderedDict<std::string, Tensor> only = load(path);
  EXPECT_EQ(only.keys(), f.tensors.keys());
}

TEST(Serialize, FileOrderIsTheReferenceWritersOrder) {
  TempDir dir;
  OrderedDict<std::string, Tensor> in;
  in.insert("z.bool", sample(kBool, {3}, 1));
  in.insert("b.f32", sample(kFloat32, {2}, 2));
  in.insert("a.f32", sample(kFloat32, {1}, 3));
  in.insert("u8", sample(kUInt8, {5}, 4));
  in.insert("f16", sample(kFloat16, {3}, 5));
  in.insert("bf16", sample(kBFloat16, {3}, 6));
  in.insert("i32", sample(kInt32, {1}, 7));
  in.insert("f64", sample(kFloat64, {1}, 8));
  in.insert("i64", sample(kInt64, {1}, 9));
  const std::string path = dir.file("order.safetensors");
  save(in, path);
  // Descending in the reference's dtype enum (so every tensor is aligned), then by name.
  EXPECT_EQ(load(path).keys(), (std::vector<std::string>{"i64", "f64", "a.f32", "b.f32", "i32", "bf16", "f16", "u8", "z.bool"}));
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header must be padded so the data starts 8-byte aligned";
  EXPECT_EQ(bytes[8], '{');
}

TEST(Serialize, NonContiguousTensorsAreWrittenContiguously) {
  TempDir dir;
  Tensor base = sample(kFloat32, {4, 6}, 11);
  OrderedDict<std::string, Tensor> in;
  in.insert("transposed", base.t());
  in.insert("strided", base.slice(1, 1, 6, 2));
  in.insert("expanded", sample(kInt64, {3, 1}, 12).expand({3, 4}));
  in.insert("offset_view", base[2]);
  for (const auto& item : in) ASSERT_TRUE(item.key() == "offset_view" || !item.value().is_contiguous()) << item.key();
  const std::string path = dir.file("views.safetensors");
  save(in, path);
  auto out = load(path);
  for (const auto& item : in) {
    expect_same(out[item.key()], item.value().contiguous(), item.key());
    EXPECT_TRUE(out[item.key()].is_contiguous());
  }
}

TEST(Serialize, SharedStorageIsSavedAsIndependentCopies) {
  TempDir dir;
  Tensor weight = sample(kFloat32, {3, 4}, 21);
  OrderedDict<std::string, Tensor> in;
  in.insert("encoder.weight", weight);
  in.insert("decoder.weight", weight);  // tied weights: the same tensor under two names
  in.insert("row", weight[1]);          // a view into the same storage
  const std::string path = dir.file("shared.safetensors");
  save(in, path);
  auto out = load(path);
  expect_same(out["encoder.weight"], weight, "encoder.weight");
  expect_same(out["decoder.weight"], weight, "decoder.weight");
  expect_same(out["row"], weight[1], "row");
  // Loaded tensors own their memory: writing one leaves the others alone.
  out["encoder.weight"].fill_(0);
  expect_same(out["decoder.weight"], weight, "decoder.weight after writing encoder.weight");
  expect_same(out["row"], weight[1], "row after writing encoder.weight");
  EXPECT_NE(out["encoder.weight"].storage(), out["decoder.weight"].storage());
}

TEST(Serialize, GradientStateIsNotSavedAndLoadTargetsADevice) {
  TempDir dir;
  Tensor w = sample(kFloat32, {2, 3}, 31).requires_grad_();
  (w * w).sum().backward();
  OrderedDict<std::string, Tensor> in;
  in.insert("w", w);
  const std::string path = dir.file("grad.safetensors");
  save(in, path);
  Tensor host = load(path)["w"];
  EXPECT_FALSE(host.requires_grad());
  EXPECT_FALSE(host.grad().defined());
  expect_same(host, w.detach(), "w");
  Tensor on0 = load(path, Device::cpu(0))["w"];
  EXPECT_EQ(on0.device(), Device::cpu(0));
  expect_same(on0, w.detach(), "w on cpu:0");
  EXPECT_THROW(load(path, Device::cpu(30000)), DeviceError);
}

// Byte-for-byte examples from the reference implementation's own unit tests
// (safetensors/src/tensor.rs: test_empty, test_serialization, test_serialization_forced_alignement).
TEST(Serialize, MatchesTheReferenceImplementationsExamples) {
  TempDir dir;
  auto u8s = [](std::initializer_list<int> v) {
    std::string s;
    for (int b : v) s.push_back(static_cast<char>(b));
    return s;
  };
  save(OrderedDict<std::string, Tensor>{}, dir.file("empty.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("empty.safetensors")), u8s({8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32}));
  save(OrderedDict<std::string, Tensor>{}, dir.file("empty_meta.safetensors"), {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(dir.file("empty_meta.safetensors")),
            u8s({40,  0,  0,   0,   0,  0,   0,   0,   123, 34,  95,  95, 109, 101, 116, 97,  100, 97,  116, 97, 95, 95, 34, 58,
                 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58,  34,  112, 116, 34,  125, 125, 32, 32, 32, 32, 32}));
  EXPECT_TRUE(load(dir.file("empty.safetensors")).empty());
  EXPECT_EQ(load_file(dir.file("empty_meta.safetensors")).metadata, (std::map<std::string, std::string>{{"framework", "pt"}}));

  Tensor values = tensor<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  save({{"attn.0", values}}, dir.file("attn.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("attn.safetensors")),
            u8s({64,  0,  0,   0,  0,   0,  0,   0,   123, 34,  97,  116, 116, 110, 46,  48, 34, 58, 123, 34, 100, 116, 121, 112,
                 101, 34, 58,  34, 70,  51, 50,  34,  44,  34,  115, 104, 97,  112, 101, 34, 58, 91, 49,  44, 50,  44,  51,  93,
                 44,  34, 100, 97, 116, 97, 95,  111, 102, 102, 115, 101, 116, 115, 34,  58, 91, 48, 44,  50, 52,  93,  125, 125,
                 0,   0,  0,   0,  0,   0,  128, 63,  0,   0,   0,   64,  0,   0,   64,  64, 0,  0,  128, 64, 0,   0,   160, 64}));
  save({{"attn0", values.reshape({1, 1, 2, 3})}}, dir.file("attn0.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("attn0.safetensors")),
            u8s({72, 0,   0,  0,  0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34,  58,
                 34, 70,  51, 50, 34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91, 49, 44, 49,  44, 50,  44,  51,  93,  44,  34,  100,
                 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34,  58,  91,  48, 44, 50, 52,  93, 125, 125, 32,  32,  32,  32,  32,
                 32, 32,  0,  0,  0,   0,   0,   0,   128, 63,  0,   0,   0,   64,  0,  0,  64, 64,  0,  0,   128, 64,  0,   0,   160, 64}));
}

void expect_matches_golden(const SafetensorsFile& f, const std::string& file) {
  const json& g = golden_entry(file);
  EXPECT_EQ(f.tensors.keys(), g.at("order").get<std::vector<std::string>>()) << "tensors must come in data-offset order";
  EXPECT_EQ(f.metadata, (g.at("metadata").get<std::map<std::string, std::string>>()));
  ASSERT_EQ(f.tensors.size(), g.at("tensors").size());
  for (const auto& [name, e] : g.at("tensors").items()) {
    const Tensor* t = f.tensors.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(dtype_name(t->dtype()), e.at("dtype").get<std::string>()) << name;
    EXPECT_EQ(t->sizes(), e.at("shape").get<Shape>()) << name;
    EXPECT_EQ(bytes_of(*t), unhex(e.at("hex").get<std::string>())) << name << ": not bit-identical to PyTorch's bytes";
    EXPECT_TRUE(test::all_close(*t, e, 0, 0)) << name << ": values differ from PyTorch's";
  }
}

TEST(Serialize, LoadsAFileWrittenByPyTorch) {
  SafetensorsFile f = load_file(golden_path("safetensors_torch.safetensors"));
  expect_matches_golden(f, "safetensors_torch.safetensors");
  EXPECT_EQ(f.tensors["f32.scalar"].dim(), 0);
  EXPECT_EQ(f.tensors["f32.scalar"].item<float>(), 3.5f);
  EXPECT_EQ(f.tensors["i64.extremes"].to_vector<int64_t>(), (std::vector<int64_t>{INT64_MIN, INT64_MAX, (int64_t(1) << 53) + 1, -1, 0}));
  EXPECT_TRUE(std::signbit(f.tensors["f64.special"][3].item<double>()));
}

TEST(Serialize, LoadsAnotherWritersOrderSortedByOffset) {
  SafetensorsFile f = load_file(golden_path("safetensors_unordered.safetensors"));
  expect_matches_golden(f, "safetensors_unordered.safetensors");
}

TEST(Serialize, RewritingPyTorchsFileIsByteIdentical) {
  TempDir dir;
  const std::string original = golden_path("safetensors_torch.safetensors");
  SafetensorsFile f = load_file(original);
  save(f.tensors, dir.file("copy.safetensors"), f.metadata);
  EXPECT_EQ(read_bytes(dir.file("copy.safetensors")), read_bytes(original));

  // The same tensors built from the golden bytes, inserted in another order, one of them a
  // non-contiguous view: still the identical file.
  const json& g = golden_entry("safetensors_torch.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, e] : g.at("tensors").items()) names.push_back(name);
  std::reverse(names.begin(), names.end());
  OrderedDict<std::string, Tensor> in;
  for (const std::string& name : names) {
    Tensor t = tensor_from_hex(g.at("tensors").at(name));
    if (name == "f32.transposed") t = t.t().contiguous().t();
    in.insert(name, t);
  }
  ASSERT_FALSE(in["f32.transposed"].is_contiguous());
  save(in, dir.file("rebuilt.safetensors"), g.at("metadata").get<std::map<std::string, std::string>>());
  EXPECT_EQ(read_bytes(dir.file("rebuilt.safetensors")), read_bytes(original));
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

TEST(Serialize, PyTorchReadsOurFile) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) GTEST_SKIP() << python << " not found: cannot check our file with PyTorch";
  TempDir dir;
  const json& g = golden_entry("safetensors_torch.safetensors");
  OrderedDict<std::string, Tensor> in;
  for (const auto& [name, e] : g.at("tensors").items()) {
    Tensor t = tensor_from_hex(e);
    if (name == "f32.transposed") t = t.t().contiguous().t();  // written from a non-contiguous view
    in.insert(name, t);
  }
  const std::string path = dir.file("ours.safetensors");
  save(in, path, g.at("metadata").get<std::map<std::string, std::string>>());
  const std::string checker = std::string(python) + " " + quoted(golden_path("check_safetensors.py")) + " ";
  const std::string expected = quoted(golden_path("safetensors.json")) + " safetensors_torch.safetensors";
  auto [rc, out] = test::run_command(checker + quoted(path) + " " + expected);
  if (rc != 0 && out.find("No module named 'torch'") != std::string::npos) GTEST_SKIP() << "PyTorch is not importable by " << python << ": " << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK: 15 tensors"), std::string::npos) << out;

  // The checker is not vacuous: one flipped data bit, or a changed metadata value, fails it.
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 3] ^= 0x10;
  { std::ofstream(dir.file("flipped.safetensors"), std::ios::binary) << bytes; }
  auto [rc2, out2] = test::run_command(checker + quoted(dir.file("flipped.safetensors")) + " " + expected);
  EXPECT_EQ(rc2, 1) << out2;
  auto meta = g.at("metadata").get<std::map<std::string, std::string>>();
  meta["format"] = "np";
  save(in, dir.file("meta.safetensors"), meta);
  auto [rc3, out3] = test::run_command(checker + quoted(dir.file("meta.safetensors")) + " " + expected);
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("metadata"), std::string::npos) << out3;
}

TEST(Serialize, BoolBytesOtherThanOneLoadAsTrue) {
  TempDir dir;
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  file += std::string("\x00\x01\x02\xff", 4);
  { std::ofstream(dir.file("b.safetensors"), std::ios::binary) << file; }
  Tensor m = load(dir.file("b.safetensors"))["m"];
  EXPECT_EQ(bytes_of(m), std::string("\x00\x01\x01\x01", 4));
}

// 100 MB through save and load: a single large tensor and many small ones; prints the throughput.
TEST(Serialize, LargeCheckpointRoundTripAndThroughput) {
  TempDir dir;
  const int64_t big = 20 * 1000 * 1000;  // 80 MB of float32
  Tensor a = arange(big, kFloat32);
  OrderedDict<std::string, Tensor> in;
  in.insert("big", a);
  for (int i = 0; i < 1000; ++i) in.insert("small." + std::to_string(i), full({5000}, i, kFloat32));  // 20 MB more
  const std::string path = dir.file("big.safetensors");
  auto t0 = std::chrono::steady_clock::now();
  save(in, path);
  auto t1 = std::chrono::steady_clock::now();
  auto out = load(path);
  auto t2 = std::chrono::steady_clock::now();
  double mb = static_cast<double>(fs::file_size(path)) / 1e6;
  double save_s = std::chrono::duration<double>(t1 - t0).count(), load_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("[ perf ] %.1f MB, %zu tensors: save %.3f s (%.0f MB/s, incl. fsync), load %.3f s (%.0f MB/s)\n", mb, in.size(), save_s, mb / save_s,
              load_s, mb / load_s);
  ASSERT_EQ(out.size(), in.size());
  EXPECT_EQ(bytes_of(out["big"]), bytes_of(a));
  EXPECT_EQ(out["small.999"].to_vector<float>(), std::vector<float>(5000, 999.0f));
  EXPECT_EQ(out["small.0"].to_vector<float>(), std::vector<float>(5000, 0.0f));
}

}  // namespace
}  // namespace dp
