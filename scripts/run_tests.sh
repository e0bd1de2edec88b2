#!/bin/bash
# README command 2: installs what is missing, then builds everything and runs
# the whole test suite (unit tests beside the code, tests/ for cross-process
# tests). Prints a final "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh test || exit 1

# Golden data (HF transformers checkpoints and logits) lives in ../shared.
export RADIXKV_SHARED_DIR="${RADIXKV_SHARED_DIR:-$(cd .. && pwd)/shared}"

log=$(mktemp)
bazel test //... --test_output=errors 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# The shared process code (HTTP event loop, lifecycle) again under
# AddressSanitizer, which also reports leaks at exit.
bazel test --config=asan //process/... --test_output=errors 2>&1 | tee -a "$log"
asan_rc=${PIPESTATUS[0]}
if [[ $rc -eq 0 ]]; then rc=$asan_rc; fi
passed=$(grep -Ec "^//.* PASSED in" "$log" || true)
failed=$(grep -Ec "^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)" "$log" || true)
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
echo "${passed} passed, ${failed} failed"
exit $rc
