#!/bin/bash
# Runs one of deploy/checks/*.js under Node.js with the npm packages of
# deploy/package.json (kubernetes-models, yaml):
#   run_node_check.sh SCRIPT.js [ARGS...]
# Under `bazel test` the script runs from the runfiles tree; the packages
# come from scripts/node_modules_dir.sh.
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

# shellcheck source=../../scripts/node_modules_dir.sh
source "${root}/scripts/node_modules_dir.sh"
modules="$(node_modules_dir "${root}/deploy")" ||
  die "npm ci failed (run scripts/install_deps.sh)"
deploy_src="$(dirname "$(readlink -f "${root}/deploy/package-lock.json")")"

export NODE_PATH="$modules"
# Inputs of the checks: deploy/ and the binaries from the runfiles tree; the
# source tree behind it for files no Bazel target exports (main.cc).
export RADIXKV_DEPLOY_DIR="${RADIXKV_DEPLOY_DIR:-${root}/deploy}"
export RADIXKV_BIN_DIR="${RADIXKV_BIN_DIR:-${root}}"
export RADIXKV_SOURCE_ROOT="${RADIXKV_SOURCE_ROOT:-$(dirname "$deploy_src")}"
exec node "${root}/deploy/checks/${script}" "$@"
