// dp::detail::json_problem (dp/core/json_check.h), the check that JSON read from a file (optimizer
// state, dp-train's checkpoint metadata) goes through before a document is built from it: valid
// JSON passes; nesting deeper than the limit, syntax errors and numbers that overflow a double are
// named, in a message of bounded size whatever the input; nothing recurses on the input.
#include <gtest/gtest.h>
#include <cstdint>
#include <random>
#include <string>
#include "dp/core/json_check.h"

namespace dp {
namespace {

using detail::json_problem;

// `depth` nested arrays: [[[]]] is 3 deep.
std::string arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }
// `depth` nested objects: {"a":{"a":{}}} is 3 deep.
std::string objects(int depth) {
  std::string s;
  for (int i = 1; i < depth; ++i) s += "{\"a\":";
  s += "{}";
  return s + std::string(depth - 1, '}');
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(JsonProblem, ValidJsonIsFine) {
  for (const char* text : {"0", "-1.5e300", "\"text\"", "null", "true", "[]", "{}", "[1, 2.5, \"x\", null, false]",
                           R"({"a": {"b": [1, {"c": "d"}]}, "e": 18446744073709551615})", " \n\t[ ] \n", "\"\\u00e9\\ud83d\\ude00\""})
    EXPECT_EQ(json_problem(text, 64), "") << text;
  EXPECT_EQ(json_problem("7", 0), "") << "a value that is not a list or object is 0 levels deep";
}

TEST(JsonProblem, DepthUpToTheLimitPassesOneMoreIsRefused) {
  for (int max : {1, 2, 64, 128}) {
    for (const auto& make : {arrays, objects}) {
      EXPECT_EQ(json_problem(make(max), max), "") << make(max);
      EXPECT_EQ(json_problem(make(max + 1), max), "nests deeper than " + std::to_string(max) + " levels") << make(max + 1);
    }
  }
  EXPECT_EQ(json_problem("[]", 0), "nests deeper than 0 levels");
  // Deep but wide is not deep: 10000 lists side by side, each 2 levels.
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += (i ? "," : "") + arrays(1);
  EXPECT_EQ(json_problem(wide + "]", 2), "");
}

TEST(JsonProblem, HugeNestingIsRefusedWithoutRecursion) {
  // A million levels would overflow the stack of any recursive parser or printer.
  for (const std::string& text : {std::string(1000000, '['), arrays(1000000), objects(300000)}) {
    EXPECT_EQ(json_problem(text, 64), "nests deeper than 64 levels");
  }
  // Refused as too deep before the parser sees that the input is cut short.
  EXPECT_EQ(json_problem("[[[[", 2), "nests deeper than 2 levels");
}

TEST(JsonProblem, NumberOverflowingADoubleIsInvalidJson) {
  for (const char* text : {"1e309", "[1, -1e309]", R"({"version":1e309})", "123456789e999"}) {
    const std::string p = json_problem(text, 64);
    EXPECT_EQ(p.rfind("is not valid JSON (", 0), 0u) << text << ": " << p;
    EXPECT_TRUE(contains(p, "number overflow")) << text << ": " << p;
    EXPECT_EQ(p.back(), ')') << p;
  }
  EXPECT_EQ(json_problem("1.7976931348623157e308", 64), "") << "the largest double is fine";
}

TEST(JsonProblem, SyntaxErrorsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "unexpected end of input"},
      {"   ", "unexpected end of input"},
      {"[1, 2", "unexpected end of input"},
      {"{\"a\" 1}", "syntax error"},
      {"[1] x", "syntax error"},  // trailing garbage
      {"[1,]", "syntax error"},
      {"nul", "syntax error"},
      {"\"\xff\"", "invalid string"},  // not UTF-8
      {"\"\\ud800\"", "surrogate"},    // a lone surrogate
  };
  for (const auto& [text, part] : cases) {
    const std::string p = json_problem(text, 64);
    EXPECT_EQ(p.rfind("is not valid JSON (", 0), 0u) << "'" << text << "': " << p;
    EXPECT_TRUE(contains(p, part)) << "'" << text << "': expected '" << part << "' in " << p;
  }
}

TEST(JsonProblem, MessageIsClippedWhateverTheInput) {
  // The parser quotes what it read up to the error: for an unclosed 1 MB string, all of it.
  std::string garbage = "\"" + std::string(1 << 20, 'x');
  std::string p = json_problem(garbage, 64);
  EXPECT_EQ(p.rfind("is not valid JSON (", 0), 0u) << p.substr(0, 300);
  EXPECT_TRUE(contains(p, "missing closing quote") || contains(p, "invalid string")) << p.substr(0, 300);
  EXPECT_LE(p.size(), 250u) << "the message must not carry the input";
  EXPECT_TRUE(contains(p, "...")) << "a clipped message says so: " << p;
  // 1 MB of random bytes, and a 1 MB literal.
  std::mt19937 gen(19);
  std::string noise(1 << 20, '\0');
  for (char& c : noise) c = static_cast<char>(gen());
  for (const std::string& text : {noise, std::string(1 << 20, 't'), "[" + std::string(1 << 20, '1') + "x]"}) {
    p = json_problem(text, 64);
    EXPECT_EQ(p.rfind("is not valid JSON (", 0), 0u) << p.substr(0, 300);
    EXPECT_LE(p.size(), 250u) << p.substr(0, 300);
  }
}

}  // namespace
}  // namespace dp
