#pragma once
// Checking JSON read from a file before a document is built from it. Printing, comparing or
// destroying a deeply nested nlohmann::json recurses, so a hostile file of nested '[' would overflow
// the stack; this scan is iterative (nlohmann's SAX parser) and keeps nothing.
#include <string>
#include <string_view>

namespace dp::detail {

// "" when `text` is valid JSON nested at most `max_depth` levels deep; otherwise why not, as a
// predicate of about 200 bytes at most, to follow what was read: "nests deeper than N levels" or
// "is not valid JSON (<the parser's message>)" (numbers that overflow a double included).
std::string json_problem(std::string_view text, int max_depth);

}  // namespace dp::detail
