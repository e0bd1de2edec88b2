#!/usr/bin/env bash
# GPU-machine half of the kernel validation (docs/development.md "GPU runs"):
# runs the float64-reference device test (plus its extend cases on the
# mma.sync kernel and on the persistent wgmma kernel), compute-sanitizer
# memcheck and racecheck on a small subset, and the benchmark, from binaries
# built by build_gpu_binaries.sh on the CPU machine and carried over.
#
#   worker/kernels/hip/run_device_suite.sh [BIN_DIR] [STEPS]
#     BIN_DIR  default build-gpu
#     STEPS    comma list of test,memcheck,racecheck,bench (default: all)
# Logs go to $OUT (the device tool's result folder) or /tmp/gpu-suite.
# Prints a short summary last; exits non-zero if any step failed.
set -uo pipefail
BIN="${1:-build-gpu}"
STEPS=",${2:-test,memcheck,racecheck,bench},"
LOG="${OUT:-/tmp/gpu-suite}"
mkdir -p "${LOG}"
export LD_LIBRARY_PATH="${BIN}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
TEST="${BIN}/gpu_attention_device_test"
SMALL=(--quick "--filter=decode bshd ps16,extend bshd ps16,decode group3,extend group3,reshape_and_cache bshd ps16,copy_blocks bshd ps16,decode page ids")
declare -A rc

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv >"${LOG}/gpu.txt" 2>&1
(cd "$(dirname "$0")/../../.." && git rev-parse --short HEAD 2>/dev/null) \
  >>"${LOG}/gpu.txt" || true

# run_cases NAME [VAR=VALUE ...] -- [TEST ARGS ...]: the device test with
# those environment variables, logged to ${LOG}/NAME.log, rc[NAME].
run_cases() {
  local name=$1 vars=()
  shift
  while [[ "$1" != -- ]]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" timeout "${TEST_TIMEOUT:-240}" "${TEST}" "$@" \
    >"${LOG}/${name}.log" 2>&1
  rc[${name}]=$?
}
if [[ "${STEPS}" == *,test,* ]]; then
  run_cases test -- ${TEST_ARGS:-}
  # The extend cases again on the mma.sync kernel (the tensor-core path runs
  # the wgmma kernel on sm_90a by default).
  run_cases test_mma RADIXKV_EXTEND_KERNEL=mma -- --filter=extend
  # The extend cases again on the opt-in persistent wgmma kernel, its grid
  # capped at 3 blocks so that every block runs many work items.
  run_cases test_persistent RADIXKV_WGMMA_VARIANT=persistent \
    RADIXKV_EXTEND_PERSISTENT_BLOCKS=3 -- --filter=extend
  # The decode cases again with the opt-in fused combine.
  run_cases test_fused RADIXKV_DECODE_FUSED_COMBINE=1 -- --filter=decode
fi
if [[ "${STEPS}" == *,memcheck,* ]]; then
  timeout "${SANITIZER_TIMEOUT:-150}" compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "${TEST}" "${SMALL[@]}" >"${LOG}/memcheck.log" 2>&1
  rc[memcheck]=$?
fi
if [[ "${STEPS}" == *,racecheck,* ]]; then
  timeout "${SANITIZER_TIMEOUT:-150}" compute-sanitizer --tool racecheck --racecheck-report hazard \
    --error-exitcode 9 "${TEST}" "${SMALL[@]}" >"${LOG}/racecheck.log" 2>&1
  rc[racecheck]=$?
fi
if [[ "${STEPS}" == *,bench,* ]]; then
  timeout "${BENCH_TIMEOUT:-200}" "${BIN}/gpu_attention_benchmark" ${BENCH_ARGS:-} \
    >"${LOG}/bench.log" 2>&1
  rc[bench]=$?
fi

echo "== gpu"; cat "${LOG}/gpu.txt"
# Failures and summary of each device-test log: name, lines kept, title.
for entry in "test:40:test" "test_mma:20:test, extend on mma.sync" \
  "test_persistent:20:test, extend on the persistent wgmma kernel, 3 blocks" \
  "test_fused:20:test, decode with the fused combine"; do
  IFS=: read -r name lines title <<<"${entry}"
  [[ -f "${LOG}/${name}.log" ]] || continue
  echo "== ${title} (failures + summary)"
  grep -E "FAIL|cases,|seed=" "${LOG}/${name}.log" | tail -"${lines}"
done
for t in memcheck racecheck; do
  [[ -f "${LOG}/${t}.log" ]] && { echo "== ${t}"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases," "${LOG}/${t}.log" | tail -4; }
done
if [[ -f "${LOG}/bench.log" ]]; then
  echo "== bench"; sed -n '/SUMMARY/,$p' "${LOG}/bench.log"
fi
status=0
for k in "${!rc[@]}"; do
  echo "step ${k}: rc=${rc[$k]}"
  [[ "${rc[$k]}" == 0 ]] || status=1
done
exit "${status}"
