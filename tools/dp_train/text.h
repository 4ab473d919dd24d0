#pragma once
// Text from a file, made safe to print: a generated sample and the characters of a vocabulary come
// from whatever file the user trained on, so they may hold terminal control sequences (ESC, CR,
// bidi overrides) that would rewrite the screen if printed raw.
#include <string>
#include <string_view>
#include <vector>

namespace dp::train {

// `text` with everything a terminal acts on or does not show escaped: C0 controls but newline and
// tab as \xNN (\r, \x1b, ...), DEL and the C1 controls as \xNN or \u{NNNN}, the invisible format
// characters (zero-width, bidi controls, line/paragraph separators, BOM, soft hyphen, tags) as
// \u{NNNN}, and bytes that are not UTF-8 as \xNN. Newlines and tabs stay.
std::string terminal_safe(std::string_view text);

// 'x' (U+0078), '\n' (U+000A), '\u{202e}' (U+202E): one character, quoted and safe to print.
std::string quote_char(char32_t c);

// What tells two vocabularies (sorted, distinct) apart, for a message: "'é' (U+00E9), ... are only
// in the first; '~' (U+007E) only in the second" (at most a few characters of each named).
std::string vocabulary_difference(const std::vector<char32_t>& first, const std::vector<char32_t>& second, const std::string& first_name,
                                  const std::string& second_name);

}  // namespace dp::train
