#!/bin/bash
# Installs the Debian 12 packages radixkv builds, tests and runs with.
# Idempotent and fast when everything is present; needs root (or sudo).
#   install_deps.sh run    what the main job needs (Debian's archive only)
#   install_deps.sh test   + the test-only tools: Prometheus, Node.js and
#                          deploy/'s npm packages (npm registry), hipcc
# README command 1 uses "run", command 2 (and CI) "test".
set -euo pipefail

PROFILE=${1:-test}
if [[ "$PROFILE" != run && "$PROFILE" != test ]]; then
  echo "usage: $0 [run|test]" >&2
  exit 2
fi

PACKAGES=(
  # build + test
  bazel-bootstrap g++ pkg-config git
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  # RPC, errors, flags
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc
  libprotobuf-dev libabsl-dev
  # cache service persistence + metrics
  redis-server libhiredis-dev prometheus-cpp-dev
  # router: the OpenAI-compatible HTTP API (evhttp)
  libevent-dev
  # worker: tokenizer, BLAS, JSON, logging
  libsentencepiece-dev libopenblas-dev nlohmann-json3-dev libspdlog-dev
  libfmt-dev
  # tokenizer.json (regex of the split patterns) and chat templates
  # (Unicode normalization, character properties, case mapping)
  libpcre2-dev libicu-dev
  # cross-language clients (tests, examples): run on /usr/bin/python3
  python3 python3-grpcio python3-grpc-tools
  # misc tools the scripts use
  curl procps
)
TEST_PACKAGES=(
  # deploy checks: a real Prometheus + promtool, Node.js for the manifest checks
  prometheus nodejs
  # chat templates: jinja2 as the differential oracle of model/chat
  python3-jinja2
  # the sampler reference (worker/testdata/sampler_reference.py)
  python3-numpy
  # GPU kernels: AMD gfx9 compile-only CI of worker/kernels/hip (ROCm 5.2 HIP,
  # clang 15; ~650 MB). NVIDIA builds use /usr/local/cuda/bin/nvcc.
  hipcc
)

# The npm packages of deploy/ (kubernetes-models, yaml: the manifest checks)
# and tests/openai_sdk/ (the official OpenAI SDK) from their
# package-lock.json; each skipped when already in step (or when
# RADIXKV_SKIP_NPM=1, e.g. in image builds).
install_npm_packages() {
  local root dir
  root="$(cd "$(dirname "$0")/.." && pwd)"
  [[ "$PROFILE" != test || "${RADIXKV_SKIP_NPM:-0}" == 1 ]] && return 0
  for dir in "$root/deploy" "$root/tests/openai_sdk"; do
    [[ -f "$dir/package-lock.json" ]] || continue
    if ! command -v npm >/dev/null; then
      ${SUDO:-} apt-get install -y -q --no-install-recommends npm
    fi
    if [[ -f "$dir/node_modules/.package-lock.json" &&
          "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]]; then
      continue
    fi
    echo "install_deps: npm ci in ${dir#$root/}/"
    (cd "$dir" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
  done
}

if [[ "$PROFILE" == test ]]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  install_npm_packages
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_npm_packages
