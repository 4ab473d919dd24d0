#!/usr/bin/env bash
# Installs the Debian packages that dparallel's build, tests and tools need. Idempotent: when every
# package is already installed (checked with dpkg-query) it makes no apt call at all.
#
#   bash scripts/install-deps.sh          # install what is missing
#   bash scripts/install-deps.sh --check  # only report what is missing (exit 1 if anything is)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache   # compiler, build system, compiler cache
  libopenblas-dev                            # GEMM
  libdnnl-dev                                # oneDNN: bfloat16 GEMMs on AMX / AVX512-BF16 (optional for the build)
  libgtest-dev googletest                    # tests
  libbenchmark-dev                           # micro-benchmarks
  nlohmann-json3-dev                         # golden files, benchmark results
  zlib1g-dev libfmt-dev libcli11-dev         # checkpoints, formatting, command lines
  python3-torch                              # PyTorch oracle: benchmarks and golden regeneration (tests need no Python)
  dataset-fashion-mnist                      # training data for the examples
  fortunes                                   # plain-text English (/usr/share/games/fortunes/): dp-train's language models
  libgloo-dev                                # collectives for DistributedDataParallel (TCP transport)
  libssl-dev                                 # the TCP store's authentication (libcrypto: HMAC-SHA256, random nonces)
  pkg-config dpkg-dev                        # install tests (dparallel.pc), cpack -G DEB (dpkg-shlibdeps)
  tmux                                       # a real terminal for dp-train's progress-bar test
  doxygen                                    # the API reference (scripts/api-docs.sh), kept warning-free by a test
  clang-format-14                            # the C++ style (.clang-format, scripts/format.sh), checked by a test
  clang-tidy-19                              # unused #includes (.clang-tidy, scripts/lint.sh), checked by a test
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ "$status" == ii* ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi
echo "install-deps: missing: ${missing[*]}"
[[ "${1:-}" == "--check" ]] && exit 1

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "install-deps: not root and sudo is not available; install as root: apt-get install ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
