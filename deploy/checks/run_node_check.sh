#!/bin/bash
# Runs one of deploy/checks/*.js under Node.js with the npm packages of
# deploy/package.json (kubernetes-models, yaml):
#   run_node_check.sh SCRIPT.js [ARGS...]
# Under `bazel test` the script runs from the runfiles tree; the packages are
# taken from deploy/node_modules of the source tree (installed by
# scripts/install_deps.sh with `npm ci`) when present and in step with
# package-lock.json, otherwise installed with `npm ci` into the test's
# temporary folder (needs the npm registry, or npm's cache); run by hand,
# into deploy/node_modules.
set -euo pipefail

die() { echo "run_node_check: $*" >&2; exit 1; }
command -v node >/dev/null || die "node not found (scripts/install_deps.sh installs nodejs)"

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
else
  root="$(cd "$(dirname "$0")/../.." && pwd)"
fi
script="$1"
shift

# The real deploy/ folder behind the runfiles symlinks.
lock="$(readlink -f "${root}/deploy/package-lock.json")"
deploy_src="$(dirname "$lock")"
modules=""
if [[ -f "${deploy_src}/node_modules/.package-lock.json" ]] &&
   node -e '
     const a = require(process.argv[1]).packages, b = require(process.argv[2]).packages;
     for (const [k, v] of Object.entries(a)) {
       if (k === "") continue;
       if (!b[k] || b[k].version !== v.version) process.exit(1);
     }' "$lock" "${deploy_src}/node_modules/.package-lock.json"; then
  modules="${deploy_src}/node_modules"
else
  if [[ -n "${TEST_TMPDIR:-}" ]]; then
    tmp="${TEST_TMPDIR}/npm"
    mkdir -p "$tmp"
    cp "${root}/deploy/package.json" "$lock" "$tmp/"
  else
    # By hand: into deploy/node_modules, as scripts/install_deps.sh does,
    # so that the next run finds it (a fresh temporary folder per run left
    # 36 MB in /tmp each time).
    tmp="$deploy_src"
  fi
  echo "run_node_check: deploy/node_modules missing or stale; npm ci in $tmp" >&2
  # Bazel's sandbox mounts the home directory read-only: then npm's cache
  # (~/.npm) cannot be written, and a private one under TEST_TMPDIR is used.
  cache_args=()
  npm_cache="$(npm config get cache 2>/dev/null || true)"
  if [[ -z "$npm_cache" ]] || ! mkdir -p "$npm_cache" 2>/dev/null ||
     [[ ! -w "$npm_cache" ]]; then
    cache_args=(--cache "${TEST_TMPDIR:-$tmp}/npm-cache")
  fi
  (cd "$tmp" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error \
     ${cache_args[@]+"${cache_args[@]}"}) >&2 ||
    die "npm ci failed (run scripts/install_deps.sh)"
  modules="$tmp/node_modules"
fi

export NODE_PATH="$modules"
# Inputs of the checks: deploy/ and the binaries from the runfiles tree; the
# source tree behind it for files no Bazel target exports (main.cc).
export RADIXKV_DEPLOY_DIR="${RADIXKV_DEPLOY_DIR:-${root}/deploy}"
export RADIXKV_BIN_DIR="${RADIXKV_BIN_DIR:-${root}}"
export RADIXKV_SOURCE_ROOT="${RADIXKV_SOURCE_ROOT:-$(dirname "$deploy_src")}"
exec node "${root}/deploy/checks/${script}" "$@"
