#!/usr/bin/env python3
"""Check that #include lines point down the layers, never up.

Every `#include "..."` in src/, include/dp/ and tools/ is mapped to two layers: the layer of the
file that includes and the layer of the header it names. A layer may include itself and the
layers below it (LEVELS, bottom first); siblings on one level may not include each other.
Includes in <...> (system and third-party headers) are not looked at.

Edges that went the wrong way when the check was introduced are listed, one per line, in
scripts/layer-exceptions.txt. The check fails on a backward edge that is not in that list, and on
a list entry that no longer occurs (the list only shrinks).

    python3 scripts/check_layers.py                      # the check (exit 0 or 1)
    python3 scripts/check_layers.py --counts             # backward edges by pair of layers
    python3 scripts/check_layers.py --write-exceptions   # (re)write the list, keeping comments
    python3 scripts/check_layers.py --self-test          # test this script on temporary trees

Standard library only.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# ------------------------------------------------------------------------------------------------
# The layer table. Edit here.
#
# FOLDERS maps a path (repository-relative, a folder or a single file) to a layer; the longest
# matching path wins, so src/core/kernels (the CPU backend) overrides src/core.
FOLDERS = {
    "include/dp/core": "core",
    "include/dp/config.h": "core",        # generated from cmake/config.h.in into the build folder
    "src/core": "core",
    "src/backend": "kernels",             # the kernel interface both backends share
    "src/backend/cpu": "cpu",             # the CPU backend
    "src/backend/cuda": "cuda",           # the CUDA backend's kernels (dp::backend::cuda)
    "src/cuda": "cuda",                   # the CUDA runtime (dp::cuda): streams, allocator, graphs
    "include/dp/cuda": "cuda",
    "include/dp/amp": "amp",
    "src/amp": "amp",
    "include/dp/autograd": "autograd",
    "src/autograd": "autograd",
    "include/dp/ops": "ops",
    "src/ops": "ops",
    "include/dp/nn": "nn",
    "src/nn": "nn",
    "include/dp/optim": "optim",
    "src/optim": "optim",
    "include/dp/data": "data",
    "src/data": "data",
    "include/dp/parallel": "parallel",
    "src/parallel": "parallel",
    "include/dp/distributed": "distributed",
    "src/distributed": "distributed",
    "include/dp/models": "models",
    "src/models": "models",
    "include/dp/dp.h": "umbrella",        # the umbrella header includes every layer: for programs
    "include/dp/core.h": "umbrella",      # the core's (core, autograd, ops): for programs too
    "tools": "tools",
    "bench": "tools",                     # programs: may include anything in the library
    "examples": "tools",
}

# LEVELS, bottom first. A layer may include its own layer and every layer on a lower level;
# layers on one level are siblings and may not include each other.
LEVELS = [
    ["core"],
    ["kernels"],                # kernel interface (empty until src/backend/ exists)
    ["cpu", "cuda"],            # backends: core and the kernel interface only
    ["amp"],                    # autocast state + GradScaler (see docs/architecture.md)
    ["autograd"],
    ["ops"],
    ["nn"],
    ["optim", "data"],
    ["parallel", "models"],     # models: ready-made networks (GPT) on nn and optim
    ["distributed"],            # DDP wraps modules (a DataParallel too) and uses parallel's loss parts
    ["umbrella"],               # dp/dp.h, dp/core.h: programs include them, the library never
    ["tools"],
]

# Edges allowed in addition to LEVELS, as (including layer, included layer). None today.
EXTRA_ALLOWED = set()

# A backend's own headers (its folders here) are private to it: only files in the same folder and
# the registry, which names the CPU backend's register function, may include them. Everything
# above the backends reaches a kernel through the kernel interface (src/backend/*.h) and its stubs.
PRIVATE_BACKEND_FOLDERS = ["src/backend/cpu", "src/backend/cuda", "src/cuda"]
BACKEND_INCLUDERS = {"src/backend/registry.cpp"}

# Where the files that are checked live, and the file names that are C/C++/CUDA sources.
SCAN_DIRS = ["src", "include/dp", "tools"]
SOURCE_SUFFIXES = (".h", ".hpp", ".hh", ".inl", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh")

# A quoted header is looked up next to the including file, then in these folders (the library's
# include paths: include/ is public, src/ private), as the compiler does.
INCLUDE_ROOTS = ["include", "src"]

EXCEPTIONS_FILE = "scripts/layer-exceptions.txt"
# ------------------------------------------------------------------------------------------------

LEVEL_OF = {layer: i for i, names in enumerate(LEVELS) for layer in names}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def check_table():
    for path, layer in FOLDERS.items():
        if layer not in LEVEL_OF:
            sys.exit(f"check_layers.py: FOLDERS maps {path} to {layer!r}, which is in no LEVELS entry")


def layer_of(path):
    """The layer of a repository-relative path, or None when no FOLDERS entry covers it."""
    best = None
    for prefix, layer in FOLDERS.items():
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return best[1] if best else None


def allowed(src, dst, including=None, included=None):
    for folder in PRIVATE_BACKEND_FOLDERS:
        if included is not None and included.startswith(folder + "/"):
            return including.startswith(folder + "/") or including in BACKEND_INCLUDERS
    if src == dst or (src, dst) in EXTRA_ALLOWED:
        return True
    return LEVEL_OF[dst] < LEVEL_OF[src]


def resolve(root, including, header):
    """Repository-relative path of a quoted include, as the compiler would find it. A header that
    is not in the tree (generated, or a third-party one in quotes) gets the path it would have."""
    candidates = [os.path.join(os.path.dirname(including), header)]
    candidates += [os.path.join(r, header) for r in INCLUDE_ROOTS]
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, c)):
            return c.replace(os.sep, "/")
    guess = os.path.join("include" if header.startswith("dp/") else "src", header)
    return os.path.normpath(guess).replace(os.sep, "/")


def source_files(root):
    for d in SCAN_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


Edge = collections.namedtuple("Edge", "file line header src dst")


def scan(root):
    """(number of files, number of quoted includes checked, backward edges, files in SCAN_DIRS
    that no FOLDERS entry covers)."""
    files = includes = 0
    backward, unmapped = [], []
    for rel in source_files(root):
        src = layer_of(rel)
        if src is None:
            unmapped.append(rel)
            continue
        files += 1
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, text in enumerate(f, 1):
                m = INCLUDE_RE.match(text)
                if not m:
                    continue
                header = m.group(1)
                target = resolve(root, rel, header)
                dst = layer_of(target)
                if dst is None:
                    continue  # not a header of this repository
                includes += 1
                if not allowed(src, dst, rel, target):
                    backward.append(Edge(rel, lineno, header, src, dst))
    return files, includes, backward, unmapped


def key(edge):
    return f"{edge.file} -> {edge.header}"


def read_exceptions(path):
    """{entry: (line number, comment)} from the exception list; missing file: empty."""
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            body, _, comment = text.partition("#")
            body = body.strip()
            if not body:
                continue
            if " -> " not in body:
                sys.exit(f"{path}:{lineno}: expected 'including-file -> included-header  # why'")
            a, _, b = body.partition(" -> ")
            entries[f"{a.strip()} -> {b.strip()}"] = (lineno, comment.strip())
    return entries


EXCEPTIONS_HEADER = """\
# Known backward #include edges (see "Layers and the direction of includes" in
# docs/architecture.md). One per line:  including-file -> included-header  # why
# scripts/check_layers.py fails on a backward edge that is not listed here and on an entry that
# no longer occurs, so this list only shrinks: when a refactoring removes an edge, delete its line.
# Do not add lines for new code; include downwards instead.
"""


def write_exceptions(path, backward, old):
    seen = {}
    for e in backward:
        seen.setdefault(key(e), e)
    by_pair = collections.defaultdict(list)
    for k, e in seen.items():
        by_pair[(e.src, e.dst)].append(k)
    out = [EXCEPTIONS_HEADER]
    for (src, dst) in sorted(by_pair, key=lambda p: (LEVEL_OF[p[0]], p[0], LEVEL_OF[p[1]], p[1])):
        out.append(f"\n# {src} -> {dst}\n")
        for k in sorted(by_pair[(src, dst)]):
            why = old.get(k, (0, ""))[1] or f"{src} includes {dst}: predates the check"
            out.append(f"{k}  # {why}\n")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(out))
    return len(seen)


def print_counts(backward):
    lines = collections.Counter((e.src, e.dst) for e in backward)
    files = collections.defaultdict(set)
    for e in backward:
        files[(e.src, e.dst)].add(e.file)
    print(f"{'including':<12} {'included':<12} {'includes':>8} {'files':>6}")
    for (src, dst), n in sorted(lines.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{src:<12} {dst:<12} {n:>8} {len(files[(src, dst)]):>6}")
    print(f"{'total':<25} {sum(lines.values()):>8} {len({e.file for e in backward}):>6}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   help="repository root (default: the folder above scripts/)")
    p.add_argument("--exceptions", default=None,
                   help=f"exception list (default: ROOT/{EXCEPTIONS_FILE})")
    p.add_argument("--write-exceptions", action="store_true",
                   help="write every backward edge of today's tree to the exception list, "
                        "keeping the comments of entries already there")
    p.add_argument("--counts", action="store_true",
                   help="print the backward edges by pair of layers (listed or not) and exit")
    p.add_argument("--self-test", action="store_true", help="test this script and exit")
    args = p.parse_args(argv)
    check_table()
    if args.self_test:
        return self_test()

    root = os.path.abspath(args.root)
    exc_path = args.exceptions or os.path.join(root, EXCEPTIONS_FILE)
    exc_name = os.path.relpath(exc_path, root) if exc_path.startswith(root + os.sep) else exc_path
    files, includes, backward, unmapped = scan(root)
    if files == 0:
        print(f"layers: no sources under {', '.join(SCAN_DIRS)} in {root}", file=sys.stderr)
        return 1
    for rel in unmapped:
        print(f"{rel}: in no layer: add its folder to FOLDERS in scripts/check_layers.py")
    if unmapped:
        return 1

    if args.counts:
        print_counts(backward)
        return 0
    if args.write_exceptions:
        n = write_exceptions(exc_path, backward, read_exceptions(exc_path))
        print(f"layers: wrote {n} entries to {exc_name}")
        return 0

    known = read_exceptions(exc_path)
    new = [e for e in backward if key(e) not in known]
    occurring = {key(e) for e in backward}
    stale = sorted((v[0], k) for k, v in known.items() if k not in occurring)

    for e in new:
        print(f"{e.file}:{e.line}: layer {e.src} includes layer {e.dst} ({e.header})")
    if new:
        print(f"layers: {len(new)} new backward include(s). A layer may include itself and the "
              f"layers below it (bottom first): {' < '.join('/'.join(l) for l in LEVELS)}. "
              f"Move what the file needs into a lower layer (or the file into a higher one); see "
              f"\"Layers and the direction of includes\" in docs/architecture.md. Do not add "
              f"new edges to {exc_name}.")
    for lineno, k in stale:
        print(f"{exc_name}:{lineno}: stale entry, the edge no longer occurs: {k}")
    if stale:
        print(f"layers: {len(stale)} stale entr{'y' if len(stale) == 1 else 'ies'}: delete "
              f"{'this line' if len(stale) == 1 else 'these lines'} from {exc_name} "
              f"(the list only shrinks).")
    if new or stale:
        return 1
    print(f"layers: {files} files, {includes} includes, 0 new backward edges, "
          f"{len(occurring)} known ({exc_name})")
    return 0


# ------------------------------------------------------------------------------------------------
# --self-test: run the script (as a program, so exit codes and output are what CI sees) on small
# trees in a temporary folder.

def self_test():
    me = os.path.abspath(__file__)
    failures = []

    def run(root, *extra):
        r = subprocess.run([sys.executable, me, "--root", root, *extra],
                           capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def expect(name, cond, output):
        print(f"{'ok  ' if cond else 'FAIL'} {name}")
        if not cond:
            failures.append(name)
            print("     output was:\n" + "".join("       " + l + "\n" for l in output.splitlines()))

    def write(root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    with tempfile.TemporaryDirectory(prefix="check_layers_") as tmp:
        root = os.path.join(tmp, "repo")
        # A good tree: every edge points down (or stays inside a layer).
        write(root, "include/dp/core/tensor.h", "#pragma once\n#include <vector>\n")
        write(root, "include/dp/ops/add.h", '#pragma once\n#include "dp/core/tensor.h"\n')
        write(root, "src/ops/common.h", '#pragma once\n#include "dp/ops/add.h"\n')
        write(root, "src/ops/add.cpp",
              '#include "dp/ops/add.h"\n#include "ops/common.h"\n#include "core/kernels/k.h"\n')
        write(root, "src/core/kernels/k.h", '#pragma once\n#include "dp/core/tensor.h"\n')
        write(root, "src/nn/linear.cpp", '#include "dp/ops/add.h"\n#include "gloo/x.h"\n')
        write(root, "tools/run/main.cpp", '#include "dp/dp.h"\n#include "local.h"\n')
        write(root, "tools/run/local.h", '#pragma once\n#include "dp/nn/linear.h"\n')
        write(root, "include/dp/dp.h", '#pragma once\n#include "dp/ops/add.h"\n')
        code, out = run(root)
        expect("good tree passes", code == 0 and
               "layers: 9 files, 11 includes, 0 new backward edges, 0 known" in out, out)

        # A backward edge: core includes ops.
        write(root, "src/core/tensor.cpp",
              '#include "dp/core/tensor.h"\n  #  include "dp/ops/add.h"\n')
        code, out = run(root)
        expect("backward edge fails", code == 1 and
               "src/core/tensor.cpp:2: layer core includes layer ops (dp/ops/add.h)" in out, out)

        # Siblings: optim must not include data.
        write(root, "src/optim/sgd.cpp", '#include "dp/data/loader.h"\n')
        write(root, "include/dp/data/loader.h", '#pragma once\n')
        code, out = run(root)
        expect("sibling edge fails", code == 1 and
               "src/optim/sgd.cpp:1: layer optim includes layer data (dp/data/loader.h)" in out,
               out)

        # A backend in its planned folder may not include ops.
        write(root, "src/backend/cpu/gemm.cpp", '#include "ops/common.h"\n')
        code, out = run(root)
        expect("future backend folder is checked", code == 1 and
               "src/backend/cpu/gemm.cpp:1: layer cpu includes layer ops (ops/common.h)" in out,
               out)

        # The umbrella headers are for programs: library code including one fails.
        write(root, "include/dp/core.h", '#pragma once\n#include "dp/ops/add.h"\n')
        write(root, "src/nn/umbrella_user.cpp", '#include "dp/core.h"\n#include "dp/dp.h"\n')
        code, out = run(root)
        expect("library code including an umbrella header fails", code == 1 and
               "src/nn/umbrella_user.cpp:1: layer nn includes layer umbrella (dp/core.h)" in out and
               "src/nn/umbrella_user.cpp:2: layer nn includes layer umbrella (dp/dp.h)" in out, out)
        os.remove(os.path.join(root, "src/nn/umbrella_user.cpp"))
        os.remove(os.path.join(root, "include/dp/core.h"))

        # A backend's headers are private: an op including one fails, though the backend is a lower
        # layer; the backend's own files and the registry may.
        write(root, "src/backend/cpu/blas.h", '#pragma once\n#include "dp/core/tensor.h"\n')
        write(root, "src/backend/cpu/gemm2.cpp", '#include "backend/cpu/blas.h"\n')
        write(root, "src/backend/registry.cpp", '#include "backend/cpu/blas.h"\n')
        write(root, "src/ops/fast.cpp", '#include "backend/cpu/blas.h"\n')
        code, out = run(root)
        expect("an op including a backend's header fails", code == 1 and
               "src/ops/fast.cpp:1: layer ops includes layer cpu (backend/cpu/blas.h)" in out and
               "gemm2.cpp" not in out and "registry.cpp" not in out, out)
        for f in ("src/backend/cpu/blas.h", "src/backend/cpu/gemm2.cpp", "src/backend/registry.cpp", "src/ops/fast.cpp"):
            os.remove(os.path.join(root, f))

        # A file in a folder the table does not know fails: new folders must be placed.
        write(root, "src/newlayer/x.cpp", '#include "dp/core/tensor.h"\n')
        code, out = run(root)
        expect("unmapped folder fails", code == 1 and "src/newlayer/x.cpp: in no layer" in out, out)
        os.remove(os.path.join(root, "src/newlayer/x.cpp"))

        # Listed, the three edges pass; --write-exceptions lists them, grouped by pair.
        code, out = run(root, "--write-exceptions")
        exc = os.path.join(root, EXCEPTIONS_FILE)
        text = open(exc, encoding="utf-8").read() if os.path.exists(exc) else ""
        expect("--write-exceptions lists the edges", code == 0 and
               "src/core/tensor.cpp -> dp/ops/add.h  # core includes ops" in text and
               "src/optim/sgd.cpp -> dp/data/loader.h  #" in text and
               sum(1 for l in text.splitlines() if " -> " in l and not l.startswith("#")) == 3,
               out + text)
        code, out = run(root)
        expect("listed edges pass", code == 0 and
               "0 new backward edges, 3 known (scripts/layer-exceptions.txt)" in out, out)

        # A hand-written comment survives a rewrite.
        write(root, EXCEPTIONS_FILE, text.replace("# core includes ops: predates the check",
                                                  "# Tensor methods forward to the ops"))
        run(root, "--write-exceptions")
        text2 = open(exc, encoding="utf-8").read()
        expect("--write-exceptions keeps comments",
               "src/core/tensor.cpp -> dp/ops/add.h  # Tensor methods forward to the ops" in text2,
               text2)

        # The edge goes away: its entry is stale and the check fails, naming the line to delete.
        write(root, "src/core/tensor.cpp", '#include "dp/core/tensor.h"\n')
        code, out = run(root)
        lineno = next(i for i, l in enumerate(text2.splitlines(), 1)
                      if l.startswith("src/core/tensor.cpp -> "))
        expect("stale entry fails", code == 1 and
               f"scripts/layer-exceptions.txt:{lineno}: stale entry, the edge no longer occurs: "
               "src/core/tensor.cpp -> dp/ops/add.h" in out and "delete this line" in out, out)

        # Deleting the line makes it pass again.
        write(root, EXCEPTIONS_FILE, "".join(
            l for l in text2.splitlines(True) if not l.startswith("src/core/tensor.cpp -> ")))
        code, out = run(root)
        expect("after deleting the entry it passes", code == 0 and "2 known" in out, out)

        # A new edge beside listed ones still fails, and only it is reported.
        write(root, "src/autograd/engine.cpp", '#include <map>\n#include "dp/nn/linear.h"\n')
        write(root, "include/dp/nn/linear.h", '#pragma once\n')
        code, out = run(root)
        expect("new edge among known ones fails", code == 1 and
               "src/autograd/engine.cpp:2: layer autograd includes layer nn" in out and
               "sgd.cpp" not in out, out)

    if failures:
        print(f"check_layers self-test: {len(failures)} failed: {', '.join(failures)}")
        return 1
    print("check_layers self-test: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
