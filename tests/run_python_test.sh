#!/bin/bash
# Runs a Python test from tests/python on /usr/bin/python3 (Debian's
# interpreter with python3-grpcio) with the Bazel runfiles tree as the repo
# root, so binaries and protos resolve at their workspace paths.
set -euo pipefail
export RADIXKV_REPO_ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
cd "${RADIXKV_REPO_ROOT}"
exec /usr/bin/python3 "$@"
