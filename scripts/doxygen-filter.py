#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for dparallel's headers (docs/Doxyfile; scripts/api-docs.sh runs it).

The headers are commented with plain `//` comments, written for people reading the header. This
filter hands Doxygen the same text with those comments made documentation, without changing a
header:

- the comment block at the top of a file (after `#pragma once`, which becomes `/// @file`: Doxygen
  needs no include guard) becomes the file's documentation;
- a whole-line `//` comment at namespace or class scope becomes `///`, documenting what follows;
- a trailing `// text` after a declaration at class scope (`int64_t epoch = 0;  // 1-based`)
  becomes `///< text`, documenting that member;
- comments inside function bodies stay plain comments, so they stay out of the reference;
- in the text, < and > outside `code spans` are escaped (`<root>/file` is not an HTML tag).

Braces are counted outside string and character literals and comments, to know whether a line is
at namespace or class scope or inside a function body. Line numbers are kept (one line out for
each line in), so Doxygen's source references point at the real lines.
"""
import re
import sys

SCOPE_OPENER = re.compile(
    r"^\s*(?:template\s*<.*>\s*)?(?:namespace\b|(?:class|struct|union|enum)\b(?!.*\)\s*(?:const\s*)?\{)|extern\s+"")"
)


def escape(text):
    """Comment text as Doxygen Markdown: < and > outside `code spans` become entities, so that
    `<root>/file` or `map<K, V>` is text, not an HTML tag Doxygen warns about."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def strip_code(line, in_block):
    """The line's code with literals and comments blanked; whether a /* */ comment is still open;
    and the column of a trailing // comment (or -1)."""
    out = []
    i, n = 0, len(line)
    comment_col = -1
    while i < n:
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True, comment_col
            i = end + 2
            in_block = False
            continue
        c = line[i]
        if line.startswith("//", i):
            comment_col = i
            break
        if line.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if c in "\"'":
            # A raw string R"(...)" on one line, or an ordinary literal with escapes.
            if c == '"' and i > 0 and line[i - 1] == "R":
                m = re.match(r'R"([^(]*)\(', line[i - 1 :])
                if m:
                    close = ")" + m.group(1) + '"'
                    end = line.find(close, i)
                    i = n if end < 0 else end + len(close)
                    out.append('""')
                    continue
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), in_block, comment_col


def main(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    stack = []  # one entry per open brace: True for a namespace/class scope, False for a body
    in_block = False
    pending_scope = False  # a class/namespace head whose brace is on a later line
    file_doc = "start"  # start -> in (the top comment block) -> done
    out = []
    in_macro = False  # a #define continued on this line: its braces are not scopes
    for line in lines:
        stripped = line.strip()
        if in_macro or (stripped.startswith("#") and not stripped.startswith("#pragma once")):
            in_macro = line.rstrip().endswith("\\")
            if file_doc != "done" and not stripped.startswith("#pragma once"):
                file_doc = "done"
            out.append(line)
            continue
        at_scope = all(stack)
        if file_doc != "done":
            if stripped.startswith("#pragma once"):
                out.append("/// @file")  # the file's documentation: the comment block below
                continue
            if file_doc == "start" and stripped == "":
                out.append(line)
                continue
            if stripped.startswith("//") and not in_block:
                out.append("///" + escape(stripped[2:]))
                file_doc = "in"
                continue
            file_doc = "done"
        code, in_block_after, comment_col = strip_code(line, in_block)
        if not in_block and stripped.startswith("//") and not stripped.startswith("///") and at_scope:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + "///" + escape(stripped[2:]))
        elif (
            comment_col >= 0
            and at_scope
            and stack  # inside a class or namespace, not at file level
            and not stripped.startswith("//")
            and re.search(r"[;,]\s*$", code)
            and "///" not in line[comment_col : comment_col + 3]
        ):
            out.append(line[:comment_col] + "///<" + escape(line[comment_col + 2 :]))
        else:
            out.append(line)
        in_block = in_block_after
        # Braces of this line, in order.
        head = pending_scope or bool(SCOPE_OPENER.match(code))
        for ch in code:
            if ch == "{":
                stack.append(head)
                head = False
            elif ch == "}":
                if stack:
                    stack.pop()
        pending_scope = head and "{" not in code and not code.rstrip().endswith(";")
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
