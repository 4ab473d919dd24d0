// dp-train's language models on --data text:FILE: a GPT, an LSTM and a GRU (tiny, a few seconds each) on
// a small generated text whose held-out loss falls; a run stopped and resumed ends on exactly the
// weights of the run left alone; the same run on 1 and 2 devices agrees to float rounding; the
// checkpoint and --save record the vocabulary, and resuming on a text with another one is refused;
// an empty, a binary and a missing file are clear errors; the sample printed at the end has the
// file's control characters escaped.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <regex>
#include "dp/core/serialize.h"
#include "tools/test_dp_train_util.h"

namespace {

using namespace dp_train_test;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// About 6000 characters of made-up sentences (a fixed LCG picks the words): something with
// structure for a tiny model to pick up in a few dozen steps. 90% (5400) train in 337 windows of
// 16, the last 600 are held out (37 windows).
std::string corpus(size_t chars = 6000) {
  const std::vector<std::string> words{"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house", "in", "sun"};
  std::string text;
  uint64_t state = 12345;
  size_t in_line = 0;
  while (text.size() < chars) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    text += words[(state >> 33) % words.size()];
    text += ++in_line % 8 == 0 ? ".\n" : " ";
  }
  return text.substr(0, chars);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<double> step_losses(const std::string& log) {
  std::vector<double> out;
  for (const auto& r : events(read_jsonl(log), "step")) out.push_back(r.at("loss").get<double>());
  return out;
}

// The largest |difference| between two weights files, leaving out the elements that `skip(name, i)`
// names.
double max_abs_diff(const std::string& a, const std::string& b, const std::function<bool(const std::string&, size_t)>& skip = {}) {
  auto ta = dp::load(a), tb = dp::load(b);
  EXPECT_EQ(ta.keys(), tb.keys());
  double worst = 0;
  for (const auto& item : ta) {
    if (!tb.contains(item.key())) continue;
    auto x = item.value().to_vector<float>(), y = tb[item.key()].to_vector<float>();
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!skip || !skip(item.key(), i)) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  }
  return worst;
}

class DpTrainText : public ::testing::Test {
 protected:
  void SetUp() override {
    DP_TRAIN_REQUIRE_BINARY();
    text = dir.file("corpus.txt");
    write_file(text, corpus());
  }
  // A tiny model of `model` on the corpus: 16-character windows, batches of 16 (22 steps an epoch).
  std::vector<std::string> args(const std::string& model, int steps) const {
    std::vector<std::string> a{
        "--model", model,  "--data",     "text:" + text, "--block-size",    "16", "--batch-size", "16", "--steps", std::to_string(steps),
        "--lr",    "0.01", "--progress", "lines",        "--sample-tokens", "40"};
    if (model == "gpt") return concat(a, {"--layers", "1", "--heads", "2", "--embd", "16"});
    return concat(a, {"--embd", "16", "--hidden", "32"});
  }
  // Trains, checks that the held-out loss fell well below the untrained model's loss (the first
  // step's), and that the evaluation's numbers are consistent.
  void expect_learns(const std::string& model) {
    const std::string log = dir.file(model + ".jsonl");
    const std::string plot = dir.file(model + ".svg");
    Result r = run(concat(args(model, 66), {"--devices", "cpu:0,cpu:1", "--log", log, "--plot", plot}), dir, model);
    ASSERT_EQ(r.status, 0) << describe(r);
    const std::string svg = read_text(plot);
    EXPECT_TRUE(contains(svg, "Held-out next-character accuracy")) << svg.substr(0, 2000);
    EXPECT_TRUE(contains(svg, "held-out loss")) << svg.substr(0, 2000);
    const auto evals = events(read_jsonl(log), "eval");
    ASSERT_EQ(evals.size(), 3u) << "one evaluation per epoch (3 epochs of 22 steps)";
    const double untrained = step_losses(log).at(0), first = evals.front().at("test_loss"), last = evals.back().at("test_loss");
    EXPECT_LT(last, first) << "the held-out loss falls from epoch to epoch";
    EXPECT_LT(last, 0.75 * untrained) << "the model learned something of the text";
    EXPECT_NEAR(evals.back().at("perplexity").get<double>(), std::exp(last), 1e-9 * std::exp(last));
    const double accuracy = evals.back().at("test_accuracy");
    EXPECT_GT(accuracy, 0.25);
    EXPECT_TRUE(std::regex_search(r.out, std::regex("held-out loss [0-9.]+ \\(perplexity [0-9.]+\\), next-character accuracy [0-9.]+ "
                                                    "\\(592 held-out characters in 37 windows of 16\\)")))
        << r.out;
    EXPECT_TRUE(contains(r.out, "data: text " + text + ": 6000 characters, a vocabulary of")) << r.out;
    EXPECT_TRUE(contains(r.out, "sample (40 characters after ")) << r.out;
    std::printf("%s: untrained loss %.3f, held-out loss %.3f after epoch 1, %.3f after epoch 3 (next-character accuracy %.3f)\n", model.c_str(),
                untrained, first, last, accuracy);
  }
  TempDir dir;
  std::string text;
};

TEST_F(DpTrainText, LstmHeldOutLossFalls) { expect_learns("lstm"); }
TEST_F(DpTrainText, GruHeldOutLossFalls) { expect_learns("gru"); }
TEST_F(DpTrainText, GptHeldOutLossFalls) { expect_learns("gpt"); }

// Stopped mid-epoch (step 30 is batch 8 of epoch 2) and resumed on the same devices: the same
// weights byte for byte, the same loss at every step, and the same sample.
TEST_F(DpTrainText, StoppedAndResumedIsBitIdentical) {
  for (const std::string model : {"lstm", "gpt"}) {
    SCOPED_TRACE(model);
    const std::vector<std::string> a = concat(args(model, 44), {"--devices", "cpu:0,cpu:1"});
    Result straight = run(concat(a, {"--save", dir.file("straight.safetensors"), "--log", dir.file("straight.jsonl")}), dir, "straight");
    ASSERT_EQ(straight.status, 0) << describe(straight);
    Result first = run(concat(a, {"--stop-after", "30", "--checkpoint-dir", dir.file("ck"), "--log", dir.file("resumed.jsonl")}), dir, "first");
    ASSERT_EQ(first.status, 0) << describe(first);
    EXPECT_FALSE(contains(first.out, "sample (")) << "a stopped run prints no sample";
    Result second = run({"--resume", dir.file("ck"), "--devices", "cpu:0,cpu:1", "--sample-tokens", "40", "--save", dir.file("resumed.safetensors"),
                         "--log", dir.file("resumed.jsonl")},
                        dir, "second");
    ASSERT_EQ(second.status, 0) << describe(second);
    EXPECT_TRUE(contains(second.out, "resuming " + dir.file("ck") + " at step 30 of 44 (epoch 2, batch 9 of 22)")) << second.out;
    EXPECT_EQ(read_text(dir.file("resumed.safetensors")), read_text(dir.file("straight.safetensors")))
        << "max |difference| " << max_abs_diff(dir.file("resumed.safetensors"), dir.file("straight.safetensors"));
    EXPECT_EQ(step_losses(dir.file("resumed.jsonl")), step_losses(dir.file("straight.jsonl")));
    const auto sample = [&](const std::string& log) { return events(read_jsonl(log), "sample").at(0).at("text").get<std::string>(); };
    EXPECT_EQ(sample(dir.file("resumed.jsonl")), sample(dir.file("straight.jsonl")));
    // --save records the vocabulary (CharTokenizer's format).
    const auto meta = dp::load_file(dir.file("straight.safetensors")).metadata;
    ASSERT_TRUE(meta.count("vocab"));
    const auto vocab = nlohmann::json::parse(meta.at("vocab"));
    EXPECT_EQ(vocab.at("format"), "dparallel.CharTokenizer");
    EXPECT_EQ(vocab.at("chars").size(), vocab.at("vocab_size").get<size_t>());
  }
}

// One device against two: each batch of 16 splits 8+8, so the gradient sums round differently.
TEST_F(DpTrainText, OneAndTwoDevicesAgree) {
  for (const std::string model : {"lstm", "gpt"}) {
    SCOPED_TRACE(model);
    Result one =
        run(concat(args(model, 22), {"--devices", "cpu:0", "--save", dir.file(model + "one.safetensors"), "--log", dir.file(model + "one.jsonl")}),
            dir, "one");
    ASSERT_EQ(one.status, 0) << describe(one);
    Result two = run(
        concat(args(model, 22), {"--devices", "cpu:0,cpu:1", "--save", dir.file(model + "two.safetensors"), "--log", dir.file(model + "two.jsonl")}),
        dir, "two");
    ASSERT_EQ(two.status, 0) << describe(two);
    const auto a = step_losses(dir.file(model + "one.jsonl")), b = step_losses(dir.file(model + "two.jsonl"));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << "step " << i + 1;
    const std::string file1 = dir.file(model + "one.safetensors"), file2 = dir.file(model + "two.safetensors");
    // gpt's key bias (c_attn.bias[16, 32) at width 16) has a gradient of exactly 0 (it adds q.b to
    // a query's every score, which softmax cancels): what it gets is rounding noise, which Adam
    // scales up to steps of the learning rate's size, so it differs by more than the rest (5e-5).
    const auto key_bias = [&](const std::string& name, size_t i) {
      return model == "gpt" && name == "transformer.h.0.attn.c_attn.bias" && i >= 16 && i < 32;
    };
    const double diff = max_abs_diff(file1, file2, key_bias), whole = max_abs_diff(file1, file2);
    EXPECT_LT(diff, 1e-6);
    EXPECT_LT(whole, 1e-3);
    std::printf("%s on 1 vs 2 devices: max |weight difference| %g after 22 Adam steps (%g counting gpt's key bias)\n", model.c_str(), diff, whole);
  }
}

TEST_F(DpTrainText, GptHeadsMustDivideTheWidth) {
  Result r = run(concat(args("gpt", 2), {"--heads", "3"}), dir, "heads");
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--embd 16 must be divisible by --heads 3")) << r.err;
}

// gpt's --save holds nanoGPT's state_dict keys (the tied head too, as PyTorch's state_dict has it),
// and --top-k 1 samples the most likely character every time: the temperature cannot change it.
TEST_F(DpTrainText, GptSavesNanoGptKeysAndSamplesTopK) {
  const auto sample_at = [&](const std::string& temperature) {
    const std::string name = "topk" + temperature;
    Result r = run(concat(args("gpt", 8), {"--top-k", "1", "--temperature", temperature, "--save", dir.file(name + ".safetensors"), "--log",
                                           dir.file(name + ".jsonl")}),
                   dir, name);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "temperature " + temperature + ", top-k 1):")) << r.out;
    const auto sample = events(read_jsonl(dir.file(name + ".jsonl")), "sample").at(0);
    EXPECT_EQ(sample.at("top_k"), 1);
    return sample.at("text").get<std::string>();
  };
  const std::string cold = sample_at("0.25"), hot = sample_at("4");
  EXPECT_EQ(cold.size(), 41u) << "the prompt's character and 40 drawn";
  EXPECT_EQ(cold, hot);
  const auto tensors = dp::load_file(dir.file("topk4.safetensors")).tensors;
  for (const char* key : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.weight",
                          "transformer.h.0.attn.c_proj.bias", "transformer.h.0.mlp.c_fc.weight", "transformer.ln_f.bias", "lm_head.weight"})
    EXPECT_TRUE(tensors.contains(key)) << key;
  EXPECT_EQ(tensors.size(), 5u + 12u) << "wte, wpe, ln_f (2), lm_head and one block's 12 tensors";
}

TEST_F(DpTrainText, ResumingOnAnotherVocabularyIsRefused) {
  Result first = run(concat(args("lstm", 44), {"--stop-after", "3", "--checkpoint-dir", dir.file("ck")}), dir, "first");
  ASSERT_EQ(first.status, 0) << describe(first);
  // The same text with one new character: '#'.
  const std::string other = dir.file("other.txt");
  write_file(other, corpus() + "#");
  Result r = run({"--resume", dir.file("ck"), "--data", "text:" + other}, dir, "other");
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "the vocabulary of " + other)) << r.err;
  EXPECT_TRUE(contains(r.err, "differs from the one the run was trained on, recorded in " + dir.file("ck/checkpoint.safetensors"))) << r.err;
  EXPECT_TRUE(contains(r.err, "'#' (U+0023) is only in " + other)) << r.err;
  // A checkpoint whose vocabulary was tampered with (a character twice) is refused as damaged.
  {
    dp::SafetensorsFile f = dp::load_file(dir.file("ck/checkpoint.safetensors"));
    auto meta = nlohmann::json::parse(f.metadata.at("dp_train"));
    meta["text"]["vocab"] = "aab";
    f.metadata["dp_train"] = meta.dump();
    std::filesystem::create_directories(dir.file("bad"));
    dp::save(f.tensors, dir.file("bad/checkpoint.safetensors"), f.metadata);
    Result bad = run({"--resume", dir.file("bad")}, dir, "bad");
    EXPECT_EQ(bad.status, 2) << describe(bad);
    EXPECT_TRUE(contains(bad.err, "damaged dp-train checkpoint: \"text.vocab\" is not a vocabulary: its characters are not distinct and sorted"))
        << bad.err;
  }
  // The text moved (another path, the same bytes) resumes.
  const std::string moved = dir.file("moved.txt");
  write_file(moved, corpus());
  Result ok = run({"--resume", dir.file("ck"), "--data", "text:" + moved, "--stop-after", "1"}, dir, "moved");
  EXPECT_EQ(ok.status, 0) << describe(ok);
  EXPECT_FALSE(contains(ok.out, "has changed")) << ok.out;
}

TEST_F(DpTrainText, BadTextFilesAreClearErrors) {
  write_file(dir.file("empty.txt"), "");
  write_file(dir.file("binary.bin"), std::string("\x7f"
                                                 "ELF\x02\x01\x01\0\0\0",
                                                 10));
  struct Case {
    std::string file, message;
  } cases[] = {
      {dir.file("empty.txt"), "'" + dir.file("empty.txt") + "' is empty"},
      {dir.file("binary.bin"), "contains a NUL byte at byte offset 7: binary data, not text"},
      {dir.file("missing.txt"), "cannot open '" + dir.file("missing.txt") + "': No such file or directory"},
  };
  for (const Case& c : cases) {
    Result r = run(concat(args("lstm", 2), {"--data", "text:" + c.file}), dir, "bad");
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(contains(r.err, "dp-train: error: --data text:" + c.file + ": ")) << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
  }
  Result image = run({"--model", "mlp", "--data", "text:" + text}, dir, "image");
  EXPECT_EQ(image.status, 2) << describe(image);
  EXPECT_TRUE(contains(image.err, "--data text:FILE is for the language models")) << image.err;
}

// A text full of terminal control sequences (ESC [2J clears the screen, CR returns the cursor, U+202E
// reverses the line): the sample holds them (the log has the raw text), the terminal gets them escaped.
TEST_F(DpTrainText, SampleIsEscapedForTheTerminal) {
  std::string nasty;
  while (nasty.size() < 3000)
    nasty +=
        "ab\x1b[2Jcd\r\xe2\x80\xae"
        "ef\n";
  write_file(text, nasty);
  for (const std::string model : {"lstm", "gpt"}) {
    SCOPED_TRACE(model);
    const std::string log = dir.file(model + "nasty.jsonl");
    Result r = run(concat(args(model, 10), {"--sample-tokens", "300", "--temperature", "1", "--log", log}), dir, "nasty");
    ASSERT_EQ(r.status, 0) << describe(r);
    const std::string sample = events(read_jsonl(log), "sample").at(0).at("text");
    ASSERT_TRUE(contains(sample, "\x1b")) << "the sample should hold an ESC for this test to mean something";
    const size_t at = r.out.find("sample (300 characters after ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string shown = r.out.substr(at);
    EXPECT_FALSE(contains(r.out, "\x1b")) << shown;
    EXPECT_FALSE(contains(r.out, "\r")) << shown;
    EXPECT_FALSE(contains(r.out, "\xe2\x80\xae")) << shown;
    EXPECT_TRUE(contains(shown, "\\x1b")) << shown;
    EXPECT_TRUE(contains(shown, "\n  | ")) << "each line of the sample is indented\n" << shown;
  }
}

}  // namespace
