// Text data: PadCollate and DataLoaderOptions::collate_fn (inline and in workers, errors with the
// batch number), TokenFileDataset (nanoGPT's get_batch as golden values, uint16/uint32, strides,
// the mapping's lifetime, hostile files, DataLoader workers, DistributedSampler) and CharTokenizer
// (nanoGPT's shakespeare_char vocabulary and ids as golden values, save/load, token files, hostile
// text and vocabulary files, escaped messages).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>
#include "dp/data/data.h"
#include "dp/dp.h"
#include "support/golden.h"
#include "support/temp_files.h"

namespace dp::data {
namespace {

namespace fs = std::filesystem;
using test::golden_case;
using test::json;
using test::read_bytes;
using test::TempDir;
using test::tensor_from_json;
using test::write_bytes;

// The message of the E that f throws; the test fails on no exception or another type.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}
#define EXPECT_HAS(haystack, needle)                                                              \
  do {                                                                                            \
    const std::string h_ = (haystack);                                                            \
    EXPECT_NE(h_.find(needle), std::string::npos) << "missing \"" << (needle) << "\" in: " << h_; \
  } while (0)

std::vector<int64_t> ints(const Tensor& t) { return t.to(kInt64).contiguous().to_vector<int64_t>(); }

template <typename T>
std::string token_bytes(const std::vector<T>& ids) {
  std::string s(ids.size() * sizeof(T), '\0');
  std::memcpy(s.data(), ids.data(), s.size());
  return s;
}

// ---- PadCollate and collate_fn ----

// Sample i: data = [i + 1] * (i % 4 + 1) (float32 [L_i, 2]), target = the ids i .. i+L_i-1 (int64 [L_i]).
class VariableLength : public Dataset {
 public:
  explicit VariableLength(size_t n) : n_(n) {}
  Example get(size_t i) override {
    DP_CHECK(i < n_, IndexError, "VariableLength: index ", i, " out of range");
    gets_.fetch_add(1);
    const int64_t len = static_cast<int64_t>(i % 4 + 1);
    return Example{full({len, 2}, static_cast<double>(i + 1)), arange(static_cast<int64_t>(i), static_cast<int64_t>(i) + len)};
  }
  size_t size() const override { return n_; }
  std::atomic<int> gets_{0};

 private:
  size_t n_;
};

TEST(Collate, DifferentLengthsSayHowToPad) {
  DataLoader loader(std::make_shared<VariableLength>(8), DataLoaderOptions(4));
  const std::string m = error_of<ShapeError>([&] {
    for (Batch& b : loader) (void)b;
  });
  EXPECT_HAS(m, "DataLoader: batch 0 of epoch 0: collate: example 1 has data of shape [2, 2] but example 0 has [1, 2]");
  EXPECT_HAS(m, "collate_fn(dp::data::PadCollate())");
  // Not a length difference: no suggestion.
  const std::string other = error_of<ShapeError>([] { collate({Example{zeros({2, 3})}, Example{zeros({2, 4})}}); });
  EXPECT_EQ(other.find("PadCollate"), std::string::npos) << other;
}

TEST(PadCollate, PadsDataAndSequenceTargetsAndRecordsLengths) {
  VariableLength ds(8);
  std::vector<Example> ex = {ds.get(2), ds.get(0), ds.get(5)};  // lengths 3, 1, 2
  ex[0].lengths = full({1}, 99, kInt64);                        // an example's own lengths are ignored
  Batch b = PadCollate()(ex);
  EXPECT_EQ(b.data.sizes(), Shape({3, 3, 2}));
  EXPECT_EQ(b.data.to_vector<float>(), std::vector<float>({3, 3, 3, 3, 3, 3, 1, 1, 0, 0, 0, 0, 6, 6, 6, 6, 0, 0}));
  EXPECT_EQ(ints(b.target), std::vector<int64_t>({2, 3, 4, 0, -100, -100, 5, 6, -100}));
  ASSERT_TRUE(b.lengths.defined());
  EXPECT_EQ(b.lengths.dtype(), kInt64);
  EXPECT_TRUE(b.lengths.device().is_cpu());
  EXPECT_EQ(ints(b.lengths), std::vector<int64_t>({3, 1, 2}));

  Batch t = PadCollate().batch_first(false).padding_value(-1).target_padding_value(7)(ex);  // time-major
  EXPECT_EQ(t.data.sizes(), Shape({3, 3, 2}));
  EXPECT_EQ(t.data.select(2, 0).to_vector<float>(), std::vector<float>({3, 1, 6, 3, -1, 6, 3, -1, -1}));
  EXPECT_EQ(ints(t.target), std::vector<int64_t>({2, 0, 5, 3, 7, 6, 4, 7, 7}));
  EXPECT_EQ(ints(t.lengths), std::vector<int64_t>({3, 1, 2}));

  // One label per sequence: stacked. No targets: none.
  Batch labels = PadCollate()({Example{zeros({2}), full({}, 4, kInt64)}, Example{zeros({1}), full({}, 5, kInt64)}});
  EXPECT_EQ(labels.target.sizes(), Shape({2}));
  EXPECT_EQ(ints(labels.target), std::vector<int64_t>({4, 5}));
  Batch unlabelled = PadCollate()({Example{zeros({2})}, Example{zeros({3})}});
  EXPECT_FALSE(unlabelled.target.defined());
  EXPECT_EQ(unlabelled.data.sizes(), Shape({2, 3}));
}

TEST(PadCollate, GradientsFlowThroughThePaddedBatch) {
  Tensor a = ones({2, 1}).requires_grad_(), b = ones({1, 1}).requires_grad_();
  Batch batch = PadCollate()({Example{a}, Example{b}});
  (batch.data * 3).sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>({3, 3}));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>({3}));
}

TEST(PadCollate, Errors) {
  const PadCollate pad;
  EXPECT_HAS(error_of<ValueError>([&] { pad({}); }), "PadCollate: cannot make a batch of 0 examples");
  EXPECT_HAS(error_of<ShapeError>([&] { pad({Example{zeros({2})}, Example{zeros({})}}); }), "PadCollate: example 1 has 0-dimensional data");
  EXPECT_HAS(error_of<ValueError>([&] {
               pad({Example{zeros({2}), zeros({2})}, Example{zeros({1})}});
             }),
             "PadCollate: example 1 has no target but example 0 has one");
  EXPECT_HAS(error_of<ShapeError>([&] {
               pad({Example{zeros({2, 3})}, Example{zeros({1, 3})}, Example{zeros({1, 4})}});
             }),
             "PadCollate: data: pad_sequence: sequence 2 has shape [1, 4] but sequence 0 has shape [2, 3]");
  EXPECT_HAS(error_of<DTypeError>([&] {
               pad({Example{zeros({2})}, Example{zeros({1}, kInt64)}});
             }),
             "PadCollate: data: pad_sequence: sequence 1 has dtype int64");
  EXPECT_HAS(error_of<ShapeError>([&] {
               pad({Example{zeros({2}), full({}, 1)}, Example{zeros({1}), zeros({1})}});
             }),
             "PadCollate: example 1 has a target of shape [1] but example 0 has a 0-dimensional one");
  EXPECT_HAS(error_of<ValueError>([&] {
               pad({Example{zeros({2}), zeros({2}, kUInt8)}});
             }),
             "PadCollate: target: pad_sequence: padding_value -100 cannot be converted to the sequences' dtype uint8");
}

TEST(CollateFn, PadCollateInTheLoaderInlineAndInWorkers) {
  std::vector<std::vector<int64_t>> reference;
  for (int64_t workers : {0, 1, 3}) {
    SCOPED_TRACE(workers);
    auto ds = std::make_shared<VariableLength>(10);
    DataLoader loader(ds, DataLoaderOptions(4).shuffle(true).seed(7).num_workers(workers).collate_fn(PadCollate()));
    std::vector<std::vector<int64_t>> seen;
    size_t samples = 0;
    for (Batch& b : loader) {
      ASSERT_TRUE(b.lengths.defined());
      const std::vector<int64_t> lengths = ints(b.lengths);
      const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
      EXPECT_EQ(b.data.sizes(), Shape({static_cast<int64_t>(lengths.size()), longest, 2}));
      for (size_t k = 0; k < lengths.size(); ++k) {  // sample i has length i % 4 + 1 and value i + 1
        const auto i = static_cast<int64_t>(b.data.select(0, static_cast<int64_t>(k)).select(0, 0).select(0, 0).item<float>()) - 1;
        EXPECT_EQ(lengths[k], i % 4 + 1);
      }
      samples += lengths.size();
      seen.push_back(ints(b.target));
    }
    EXPECT_EQ(samples, 10u);
    EXPECT_EQ(ds->gets_.load(), 10);  // get() per sample: the dataset's get_batch is not used
    if (reference.empty()) reference = seen;
    EXPECT_EQ(seen, reference);  // the same batches with any number of workers
  }
}

TEST(CollateFn, UserFunctionAndItsErrorsCarryTheBatchNumber) {
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    auto fn = [](std::vector<Example> ex) {
      DP_CHECK(ex.size() == 3, ValueError, "my_collate: got ", ex.size(), " examples");
      Batch b = PadCollate()(ex);
      b.data = b.data.sum(1);  // anything the collate function wants
      return b;
    };
    DataLoader loader(std::make_shared<VariableLength>(7), DataLoaderOptions(3).num_workers(workers).collate_fn(fn));
    auto it = loader.begin();
    EXPECT_EQ((*it).data.sizes(), Shape({3, 2}));
    ++it;
    ++it;
    EXPECT_HAS(error_of<ValueError>([&] { *it; }), "DataLoader: batch 2 of epoch 0: my_collate: got 1 examples");

    DataLoader bad(std::make_shared<VariableLength>(4), DataLoaderOptions(2).num_workers(workers).collate_fn([](std::vector<Example> ex) {
      Batch b = PadCollate()(ex);
      b.lengths = zeros({3}, kInt64);
      return b;
    }));
    EXPECT_HAS(error_of<ShapeError>([&] { *bad.begin(); }),
               "DataLoader: batch 0 of epoch 0: the collate_fn returned lengths of shape [3] for 2 samples");
    DataLoader undefined(std::make_shared<VariableLength>(4),
                         DataLoaderOptions(2).num_workers(workers).collate_fn([](std::vector<Example>) { return Batch{}; }));
    EXPECT_HAS(error_of<ValueError>([&] { *undefined.begin(); }), "the collate_fn returned a batch with undefined data");
  }
  // An empty function is the default path.
  DataLoader plain(RandomDataset(4, 6), DataLoaderOptions(3).collate_fn(CollateFn()));
  EXPECT_EQ((*plain.begin()).data.sizes(), Shape({3, 4}));
}

// ---- TokenFileDataset ----

class TokenFiles : public ::testing::Test {
 protected:
  std::string put(const std::string& name, const std::string& bytes) {
    const std::string p = dir_.file(name);
    write_bytes(p, bytes);
    return p;
  }
  TempDir dir_;
};

TEST_F(TokenFiles, NanoGptGetBatchGolden) {
  const json& c = golden_case("text_data.json", "get_batch");
  const std::vector<uint16_t> tokens = c.at("tokens").get<std::vector<uint16_t>>();
  const auto block = c.at("block_size").get<int64_t>();
  TokenFileDataset ds(put("train.bin", token_bytes(tokens)), block, TokenFileOptions().stride(1));
  EXPECT_EQ(ds.num_tokens(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(ds.size(), tokens.size() - static_cast<size_t>(block));
  Example b = ds.get_batch(c.at("ix").get<std::vector<int64_t>>());
  EXPECT_EQ(b.data.dtype(), kInt64);
  EXPECT_TRUE(test::all_close(b.data, tensor_from_json(c.at("x")), 0, 0));
  EXPECT_TRUE(test::all_close(b.target, tensor_from_json(c.at("y")), 0, 0));
  Example one = ds.get(17);
  EXPECT_EQ(one.data.sizes(), Shape({block}));
  EXPECT_EQ(ints(one.data), ints(tensor_from_json(c.at("x")).select(0, 1)));
  EXPECT_EQ(ints(one.target), ints(tensor_from_json(c.at("y")).select(0, 1)));
  EXPECT_FALSE(one.lengths.defined());
}

TEST_F(TokenFiles, Uint32StridesAndTheTail) {
  std::vector<uint32_t> tokens(23);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 70000 + static_cast<uint32_t>(i);
  const std::string path = put("ids.bin", token_bytes(tokens));
  // Default stride = block_size: windows at 0, 4, ..., 16 (16 + 5 <= 23; 20 + 5 > 23).
  TokenFileDataset ds(path, 4, TokenFileOptions().dtype(TokenDType::UInt32));
  EXPECT_EQ(ds.stride(), 4);
  EXPECT_EQ(ds.size(), 5u);
  Example b = ds.get_batch({4, 0});
  EXPECT_EQ(ints(b.data), std::vector<int64_t>({70016, 70017, 70018, 70019, 70000, 70001, 70002, 70003}));
  EXPECT_EQ(ints(b.target), std::vector<int64_t>({70017, 70018, 70019, 70020, 70001, 70002, 70003, 70004}));
  TokenFileDataset s3(path, 4, TokenFileOptions().dtype(TokenDType::UInt32).stride(3).vocab_size(70023));
  EXPECT_EQ(s3.size(), 7u);  // starts 0, 3, ..., 18
  EXPECT_EQ(ints(s3.get(6).target).back(), 70022);
  EXPECT_EQ(ints(s3.tokens(20, 3)), std::vector<int64_t>({70020, 70021, 70022}));
  EXPECT_EQ(s3.tokens(23, 0).numel(), 0);
  EXPECT_HAS(error_of<IndexError>([&] { s3.tokens(21, 3); }), "TokenFileDataset::tokens: [21, 21 + 3) is outside the 23 tokens of '" + path + "'");
  EXPECT_HAS(error_of<IndexError>([&] { s3.get(7); }), "TokenFileDataset::get: index 7 is out of range for a dataset of size 7");
  EXPECT_HAS(error_of<IndexError>([&] { s3.get_batch({0, -1}); }), "index -1 is out of range");
  // Exactly block_size + 1 tokens: one sample.
  EXPECT_EQ(TokenFileDataset(put("min.bin", token_bytes(std::vector<uint16_t>{1, 2, 3})), 2).size(), 1u);
}

// Lines of /proc/self/maps naming `path`; entries of /proc/self/fd.
size_t mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(path) != std::string::npos;
  return n;
}
size_t open_fds() { return static_cast<size_t>(std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator())); }

TEST_F(TokenFiles, OneSharedMappingReleasedWithTheLastCopyAndNoDescriptorKept) {
  const std::string path = put("train.bin", token_bytes(std::vector<uint16_t>(4096 * 3, 5)));
  const size_t fds = open_fds();
  {
    auto first = std::make_unique<TokenFileDataset>(path, 8);
    EXPECT_EQ(mappings_of(path), 1u);
    EXPECT_EQ(open_fds(), fds);  // the descriptor was closed once mapped
    TokenFileDataset copy = *first;
    EXPECT_EQ(mappings_of(path), 1u);  // copies share it
    first.reset();
    EXPECT_EQ(ints(copy.get(3).data), std::vector<int64_t>(8, 5));
  }
  EXPECT_EQ(mappings_of(path), 0u);
  // A file replaced by rename (how token files are rewritten) leaves the mapping on the old one.
  TokenFileDataset ds(path, 8);
  const std::string tmp = put("new.bin", token_bytes(std::vector<uint16_t>(100, 9)));
  fs::rename(tmp, path);
  EXPECT_EQ(ints(ds.get(0).data), std::vector<int64_t>(8, 5));
}

TEST_F(TokenFiles, HostileFiles) {
  const std::string missing = dir_.file("nope.bin");
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(missing, 4); }), "TokenFileDataset: cannot open '" + missing + "': No such file or directory");
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(dir_.path.string(), 4); }), "' is not a regular file (a directory)");
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(fifo, 4); }), "'" + fifo + "' is not a regular file (a FIFO)");  // no wait for a writer
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset("/dev/zero", 4); }), "'/dev/zero' is not a regular file (a device or socket)");
  const std::string empty_file = put("empty.bin", "");
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(empty_file, 4); }), "'" + empty_file + "' is empty");
  const std::string odd = put("odd.bin", std::string(7, '\1'));
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(odd, 2); }),
             "'" + odd + "' has 7 bytes, not a multiple of 2 (the size of a uint16 token id): truncated, or not a uint16 token file");
  const std::string six = put("six.bin", std::string(6, '\1'));
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(six, 1, TokenFileOptions().dtype(TokenDType::UInt32)); }),
             "has 6 bytes, not a multiple of 4 (the size of a uint32 token id)");
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(six, 3); }),
             "'" + six + "' holds 3 uint16 tokens, fewer than the block_size + 1 = 4 that one sample needs");
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(six, std::numeric_limits<int64_t>::max()); }),
             "fewer than the block_size + 1 = 9223372036854775808 that one sample needs");
  const std::string bad_id = put("bad.bin", token_bytes(std::vector<uint16_t>{1, 2, 64, 3, 65, 1}));
  EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(bad_id, 2, TokenFileOptions().vocab_size(65)); }),
             "'" + bad_id + "' has token id 65 at position 4 (byte offset 8), not below vocab_size 65");
  EXPECT_EQ(TokenFileDataset(bad_id, 2, TokenFileOptions().vocab_size(66)).size(), 2u);
  EXPECT_EQ(TokenFileDataset(bad_id, 2, TokenFileOptions().vocab_size(70000)).vocab_size(), 70000);  // every uint16 fits
  EXPECT_HAS(error_of<ValueError>([&] { TokenFileDataset(bad_id, 0); }), "TokenFileDataset: block_size must be at least 1, got 0");
  EXPECT_HAS(error_of<ValueError>([&] { TokenFileDataset(bad_id, 2, TokenFileOptions().stride(-1)); }), "stride must be at least 1");
  EXPECT_HAS(error_of<ValueError>([&] { TokenFileDataset(bad_id, 2, TokenFileOptions().vocab_size(-3)); }), "vocab_size must be positive");
  if (::geteuid() != 0) {  // root reads anything
    const std::string locked = put("locked.bin", std::string(64, '\0'));
    ::chmod(locked.c_str(), 0);
    EXPECT_HAS(error_of<IOError>([&] { TokenFileDataset(locked, 4); }), "cannot open '" + locked + "': Permission denied");
  }
}

long max_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST_F(TokenFiles, AHugeFileIsMappedNotRead) {
  // 8 GiB of ids (a sparse file): opening maps it; a window touches one page.
  const std::string path = dir_.file("huge.bin");
  { std::ofstream(path, std::ios::binary).put('\0'); }
  fs::resize_file(path, uint64_t{8} << 30);
  const long before = max_rss_kb();
  TokenFileDataset ds(path, 1024, TokenFileOptions().stride(1));
  EXPECT_EQ(ds.num_tokens(), int64_t{4} << 30);
  EXPECT_EQ(ds.size(), (size_t{4} << 30) - 1024);
  EXPECT_EQ(ints(ds.get(ds.size() - 1).target), std::vector<int64_t>(1024, 0));
  EXPECT_LT(max_rss_kb() - before, 64 * 1024) << "opening and reading one window grew the resident set";
}

TEST_F(TokenFiles, DataLoaderWorkersGiveTheSameBatches) {
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
  const std::string path = put("train.bin", token_bytes(tokens));
  TokenFileDataset ds(path, 16, TokenFileOptions().stride(3).vocab_size(50257));
  std::vector<std::vector<int64_t>> reference;
  for (int64_t workers : {0, 3}) {
    DataLoader loader(ds, DataLoaderOptions(8).shuffle(true).seed(3).num_workers(workers));
    std::vector<std::vector<int64_t>> seen;
    for (Batch& b : loader) {
      // target is data shifted by one token
      EXPECT_TRUE(equal(b.target.narrow(1, 0, 15), b.data.narrow(1, 1, 15)));
      seen.push_back(ints(b.data));
    }
    EXPECT_EQ(seen.size(), (ds.size() + 7) / 8);
    if (reference.empty()) reference = seen;
    EXPECT_EQ(seen, reference) << "workers " << workers;
  }
}

TEST_F(TokenFiles, DistributedSamplerRanksGetDisjointWindowsThatCoverTheFile) {
  std::vector<uint16_t> tokens(8 * 20 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  auto ds = std::make_shared<TokenFileDataset>(put("train.bin", token_bytes(tokens)), 8);
  ASSERT_EQ(ds->size(), 20u);
  std::vector<int64_t> starts;  // first token of every window a rank read, over both ranks
  for (int rank : {0, 1}) {
    DataLoader loader(ds, DataLoaderOptions(3).num_workers(rank), std::make_shared<DistributedSampler>(ds->size(), 2, rank, true, 11));
    size_t windows = 0;
    for (Batch& b : loader)
      for (int64_t k = 0; k < b.data.size(0); ++k, ++windows) starts.push_back(ints(b.data.select(0, k)).front());
    EXPECT_EQ(windows, 10u) << "rank " << rank;
  }
  std::sort(starts.begin(), starts.end());
  std::vector<int64_t> all(20);
  for (int64_t i = 0; i < 20; ++i) all[static_cast<size_t>(i)] = i * 8;
  EXPECT_EQ(starts, all);  // disjoint (no repeats) and covering every window
}

// ---- CharTokenizer ----

TEST(CharTokenizer, ShakespeareCharGolden) {
  const json& c = golden_case("text_data.json", "shakespeare_char");
  const std::string text = c.at("text").get<std::string>();
  CharTokenizer tok = CharTokenizer::from_text(text);
  std::vector<int64_t> chars;
  for (char32_t ch : tok.chars()) chars.push_back(static_cast<int64_t>(ch));
  EXPECT_EQ(chars, c.at("chars").get<std::vector<int64_t>>());
  EXPECT_EQ(tok.vocab_size(), static_cast<int64_t>(chars.size()));
  Tensor ids = tok.encode(text);
  EXPECT_EQ(ids.dtype(), kInt64);
  EXPECT_EQ(ints(ids), c.at("ids").get<std::vector<int64_t>>());
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.token(ints(tok.encode("\xe4\xb8\xad"))[0]), "\xe4\xb8\xad");

  TempDir dir;
  write_bytes(dir.file("input.txt"), text);
  CharTokenizer from_file = CharTokenizer::from_file(dir.file("input.txt"));
  EXPECT_EQ(from_file.chars(), tok.chars());
  EXPECT_EQ(tok.token_dtype(), TokenDType::UInt16);
  EXPECT_EQ(tok.write_token_file(dir.file("input.txt"), dir.file("train.bin")), static_cast<int64_t>(c.at("ids").size()));
  std::string hex;
  for (unsigned char b : read_bytes(dir.file("train.bin"))) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  EXPECT_EQ(hex, c.at("token_bytes_hex").get<std::string>());  // np.array(ids, dtype=np.uint16).tofile
  TokenFileDataset ds(dir.file("train.bin"), 4, TokenFileOptions().stride(1).vocab_size(tok.vocab_size()));
  EXPECT_EQ(tok.decode(ds.get(0).data), text.substr(0, 4));
}

TEST(CharTokenizer, SaveAndLoadTheVocabulary) {
  TempDir dir;
  CharTokenizer tok = CharTokenizer::from_text("hello, w\u00f6rld\n\t\u202e\U0001F600");
  const std::string path = dir.file("vocab.json");
  tok.save(path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"vocab.json"}));  // no temporary file left
  const json doc = json::parse(read_bytes(path));
  EXPECT_EQ(doc.at("format"), "dparallel.CharTokenizer");
  EXPECT_EQ(doc.at("vocab_size"), tok.vocab_size());
  EXPECT_EQ(doc.at("chars").at(0), "\t");
  CharTokenizer back = CharTokenizer::load(path);
  EXPECT_EQ(back.chars(), tok.chars());
  EXPECT_EQ(back.decode(tok.encode("w\u00f6rld\U0001F600")), "w\u00f6rld\U0001F600");
  // Overwriting keeps the file whole; a directory that does not exist is an IOError naming the path.
  CharTokenizer::from_text("ab").save(path);
  EXPECT_EQ(CharTokenizer::load(path).vocab_size(), 2);
  const std::string nowhere = dir.file("missing/vocab.json");
  EXPECT_HAS(error_of<IOError>([&] { tok.save(nowhere); }), "CharTokenizer::save: '" + nowhere + "': cannot create a temporary file");
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"vocab.json"}));
}

TEST(CharTokenizer, BadTextIsRefusedWithTheByteOffset) {
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text(""); }), "CharTokenizer::from_text: the text is empty");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text(std::string("ab\0c", 4)); }),
             "the text contains a NUL byte at byte offset 2: binary data, not text");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("ok \xc3\x28 then"); }),
             "is not valid UTF-8 text: invalid byte sequence at byte offset 3 (0xc3 0x28 0x20 0x74)");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("a\x80"); }), "byte offset 1 (0x80: a continuation byte without a lead byte)");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("abc\xe4\xb8"); }),
             "it ends in the middle of a character (a 3-byte sequence starting at byte offset 3: 0xe4 0xb8)");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("\xc0\x80"); }), "byte offset 0 (0xc0 0x80)");                    // overlong NUL
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("x\xed\xa0\x80"); }), "byte offset 1 (0xed 0xa0 0x80)");          // surrogate
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer::from_text("\xf4\x90\x80\x80"); }), "byte offset 0 (0xf4 0x90 0x80 0x80)");  // > U+10FFFF

  TempDir dir;
  write_bytes(dir.file("empty.txt"), "");
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::from_file(dir.file("empty.txt")); }),
             "CharTokenizer::from_file: '" + dir.file("empty.txt") + "' is empty");
  std::string binary =
      "\x7f"
      "ELF\x02\x01\x01";
  binary += std::string(9, '\0');
  write_bytes(dir.file("a.out"), binary);
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::from_file(dir.file("a.out")); }),
             "'" + dir.file("a.out") + "' contains a NUL byte at byte offset 7: binary data, not text");
  write_bytes(dir.file("latin1.txt"), "caf\xe9 au lait");
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::from_file(dir.file("latin1.txt")); }),
             "'" + dir.file("latin1.txt") + "' is not valid UTF-8 text: invalid byte sequence at byte offset 3 (0xe9 0x20 0x61 0x75)");
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::from_file(dir.file("none.txt")); }), "cannot open '" + dir.file("none.txt") + "'");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::from_file(fifo); }), "is not a regular file (a FIFO)");
}

TEST(CharTokenizer, EncodeAndDecodeErrorsEscapeWhatTheyQuote) {
  CharTokenizer tok = CharTokenizer::from_text("abc\n");
  const std::string esc = error_of<ValueError>([&] { tok.encode("ab\x1b[31mc"); });
  EXPECT_HAS(esc, "CharTokenizer::encode: character '\\x1b' (U+001B) at byte offset 2 is not in the vocabulary (4 characters)");
  EXPECT_EQ(esc.find('\x1b'), std::string::npos);
  const std::string bidi = error_of<ValueError>([&] { tok.encode("a\u202e"); });
  EXPECT_HAS(bidi, "character '\\u{202e}' (U+202E) at byte offset 1");
  EXPECT_EQ(bidi.find("\u202e"), std::string::npos);
  EXPECT_HAS(error_of<ValueError>([&] { tok.encode("\u00e9"); }), "character '\u00e9' (U+00E9) at byte offset 0");
  EXPECT_HAS(error_of<ValueError>([&] { tok.encode("a\r"); }), "character '\\r' (U+000D)");
  EXPECT_HAS(error_of<ValueError>([&] { tok.encode("a\xff"); }),
             "CharTokenizer::encode: the text is not valid UTF-8 text: invalid byte sequence at byte offset 1 (0xff)");
  EXPECT_EQ(tok.encode("").numel(), 0);
  EXPECT_EQ(tok.decode(Tensor(empty({0}, kInt64))), "");

  EXPECT_HAS(error_of<IndexError>([&] {
               tok.decode(std::vector<int64_t>{0, 1, 4});
             }),
             "CharTokenizer::decode: id 4 at position 2 is out of range for a vocabulary of 4 characters");
  EXPECT_HAS(error_of<IndexError>([&] { tok.decode(full({2}, -1, kInt32)); }), "id -1 at position 0");
  EXPECT_HAS(error_of<DTypeError>([&] { tok.decode(zeros({2})); }), "expected integer ids, got a tensor of dtype float32");
  EXPECT_HAS(error_of<ShapeError>([&] { tok.decode(zeros({2, 2}, kInt64)); }), "got shape [2, 2]");
  EXPECT_HAS(error_of<IndexError>([&] { tok.token(4); }), "CharTokenizer::token: id 4 is out of range");
  EXPECT_EQ(tok.decode(full({}, 0, kUInt8)), "\n");                     // 0-d; sorted, '\n' comes first
  EXPECT_EQ(tok.decode(tok.encode("cab").to(Device("cpu:0"))), "cab");  // any device
  EXPECT_HAS(error_of<ValueError>([] {
               CharTokenizer(std::vector<char32_t>{'b', 'a'});
             }),
             "vocabulary entry 1, 'a' (U+0061), does not come after entry 0, 'b' (U+0062)");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer(std::vector<char32_t>{0xd800}); }), "vocabulary entry 0 is U+D800");
  EXPECT_HAS(error_of<ValueError>([] { CharTokenizer(std::vector<char32_t>{}); }), "the vocabulary is empty");
}

TEST(CharTokenizer, HostileVocabularyFiles) {
  TempDir dir;
  auto load_error = [&](const std::string& name, const std::string& content) {
    write_bytes(dir.file(name), content);
    return error_of<IOError>([&] { CharTokenizer::load(dir.file(name)); });
  };
  const std::string p = "'" + dir.file("v.json") + "' ";
  const std::string not_json = load_error("v.json", "{\"chars\": [\x01\x1b]}");
  EXPECT_HAS(not_json, "CharTokenizer::load: " + p + "is not valid JSON (");
  EXPECT_EQ(not_json.find_first_of("\x01\x1b"), std::string::npos) << "raw control bytes in: " << not_json;
  EXPECT_HAS(load_error("v.json", std::string(100000, '[')), p + "nests deeper than 8 levels");
  EXPECT_HAS(load_error("v.json", "{\"chars\": [\"a\"]}"), p + "is not a CharTokenizer vocabulary");
  const std::string head = "{\"format\": \"dparallel.CharTokenizer\", \"version\": 1, ";
  EXPECT_HAS(load_error("v.json", "{\"format\": \"dparallel.CharTokenizer\", \"version\": 2, \"chars\": [\"a\"]}"),
             p + "has an unsupported version 2");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": []}"), p + "has no characters");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"a\", 7]}"), p + "has a vocabulary entry 1 that is not a string");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"a\", \"bc\"]}"), p + "has a vocabulary entry 1 that is not exactly one character (2 bytes)");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"\"]}"), "entry 0 that is not exactly one character (0 bytes)");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"\\u0000\"]}"), "entry 0 that is NUL");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"b\", \"a\"]}"), p + "has vocabulary entry 1, 'a' (U+0061), after 'b' (U+0062)");
  EXPECT_HAS(load_error("v.json", head + "\"chars\": [\"\\u001b\", \"a\", \"\\u001b\"]}"), "entry 2, '\\x1b' (U+001B), after 'a' (U+0061)");
  EXPECT_HAS(load_error("v.json", head + "\"vocab_size\": 3, \"chars\": [\"a\", \"b\"]}"), p + "says vocab_size 3 but lists 2 characters");
  // A huge file is refused by its size, before anything is read.
  const std::string huge = dir.file("huge.json");
  { std::ofstream(huge).put('{'); }
  fs::resize_file(huge, uint64_t{1} << 40);
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::load(huge); }), "has 1099511627776 bytes, more than a vocabulary file can have (64 MiB)");
  EXPECT_HAS(error_of<IOError>([&] { CharTokenizer::load(dir.file("none.json")); }), "CharTokenizer::load: cannot open");
  write_bytes(dir.file("ok.json"), head + "\"chars\": [\"a\"]}");  // vocab_size is optional
  EXPECT_EQ(CharTokenizer::load(dir.file("ok.json")).vocab_size(), 1);
}

TEST(CharTokenizer, TokenFilesForLargeVocabulariesAreUint32) {
  std::vector<char32_t> chars;
  for (char32_t c = 0x20; c < 0x20 + 70000; ++c)
    if (c < 0xd800 || c > 0xdfff) chars.push_back(c);
  CharTokenizer tok(chars);
  EXPECT_EQ(tok.token_dtype(), TokenDType::UInt32);
  TempDir dir;
  std::string text = "a";
  text += tok.token(tok.vocab_size() - 1);  // an id past 65535
  text += "b";
  write_bytes(dir.file("t.txt"), text);
  EXPECT_EQ(tok.write_token_file(dir.file("t.txt"), dir.file("t.bin")), 3);
  TokenFileDataset ds(dir.file("t.bin"), 2, TokenFileOptions().dtype(TokenDType::UInt32).vocab_size(tok.vocab_size()));
  EXPECT_EQ(tok.decode(ds.tokens(0, 3)), text);
  EXPECT_EQ(ints(ds.get(0).data)[1], tok.vocab_size() - 1);

  CharTokenizer small = CharTokenizer::from_text("ab");
  write_bytes(dir.file("other.txt"), "abba\tc");
  EXPECT_HAS(error_of<IOError>([&] { small.write_token_file(dir.file("other.txt"), dir.file("o.bin")); }),
             "CharTokenizer::write_token_file: '" + dir.file("other.txt") +
                 "' has character '\\t' (U+0009) at byte offset 4, which is not in the vocabulary (2 characters)");
  EXPECT_FALSE(fs::exists(dir.file("o.bin")));
}

}  // namespace
}  // namespace dp::data
