#!/bin/bash
# Runs tests/openai_sdk/openai_sdk_test.cjs under Node.js's test runner with
# the npm packages of tests/openai_sdk/package.json (the official `openai`
# SDK) and the local cluster launcher of the runfiles tree.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
command -v node >/dev/null ||
  { echo "node not found (scripts/install_deps.sh installs nodejs)" >&2; exit 1; }
# shellcheck source=../../scripts/node_modules_dir.sh
source "${root}/scripts/node_modules_dir.sh"
NODE_PATH="$(node_modules_dir "${root}/tests/openai_sdk")"
export NODE_PATH
export RADIXKV_LOCAL_CLUSTER="${root}/tools/local_cluster/local_cluster"
exec node --test "${root}/tests/openai_sdk/openai_sdk_test.cjs"
