#!/usr/bin/env bash
# GPU-machine half of the kernel validation (docs/development.md "GPU runs"):
# runs the float64-reference device test (plus its extend cases on the
# mma.sync kernel and on the persistent wgmma kernel, its decode cases with
# the fused combine), compute-sanitizer memcheck and racecheck on a small
# subset, the benchmark, and the negative control (the extend cases with a
# deliberately wrong wgmma V descriptor must fail), from the folder that
# stage_device_suite.sh filled on the CPU machine and the device tool
# carried over.
#
#   worker/kernels/hip/run_device_suite.sh [STAGE_DIR] [STEPS]
#     STAGE_DIR  default build-gpu (device-suite.tar.xz: bin/ and lib/)
#     STEPS      comma list of test,memcheck,racecheck,bench,fault
#                (default: all)
# Logs go to $OUT (the device tool's result folder) or /tmp/gpu-suite.
# Prints a short summary last; exits non-zero if any step failed.
set -uo pipefail
STAGE="${1:-build-gpu}"
STEPS=",${2:-test,memcheck,racecheck,bench,fault},"
LOG="${OUT:-/tmp/gpu-suite}"
mkdir -p "${LOG}"
SCRATCH="$(mktemp -d)"
BIN="${SCRATCH}/bin"
tar -xJf "${STAGE}/device-suite.tar.xz" -C "${SCRATCH}" || {
  echo "cannot unpack ${STAGE}/device-suite.tar.xz (stage_device_suite.sh)"
  exit 1
}
export LD_LIBRARY_PATH="${SCRATCH}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
TEST="${BIN}/gpu_attention_device_test"
SMALL=(--quick "--filter=decode bshd ps16,extend bshd ps16,decode group3,extend group3,reshape_and_cache bshd ps16,copy_blocks bshd ps16,decode page ids,decode window17 ps16,extend window17 ps16")
declare -A rc

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv >"${LOG}/gpu.txt" 2>&1
(cd "$(dirname "$0")/../../.." && git rev-parse --short HEAD 2>/dev/null) \
  >>"${LOG}/gpu.txt" || true

# run_cases NAME BINARY [VAR=VALUE ...] -- [TEST ARGS ...]: a device test
# binary with those environment variables, logged to ${LOG}/NAME.log,
# exit status in rc[NAME].
run_cases() {
  local name=$1 binary=$2 vars=()
  shift 2
  while [[ "$1" != -- ]]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" timeout "${TEST_TIMEOUT:-240}" "${binary}" "$@" \
    >"${LOG}/${name}.log" 2>&1
  rc[${name}]=$?
}
if [[ "${STEPS}" == *,test,* ]]; then
  run_cases test "${TEST}" -- ${TEST_ARGS:-}
  # The extend cases again on the mma.sync kernel (the tensor-core path runs
  # the wgmma kernel on sm_90a by default).
  run_cases test_mma "${TEST}" RADIXKV_EXTEND_KERNEL=mma -- --filter=extend
  # The extend cases again on the benchmark-only persistent wgmma kernel,
  # its grid capped at 3 blocks so that every block runs many work items.
  run_cases test_persistent "${BIN}/gpu_attention_device_test_persistent" \
    RADIXKV_WGMMA_VARIANT=persistent RADIXKV_EXTEND_PERSISTENT_BLOCKS=3 \
    -- --filter=extend
  # The decode cases again with the opt-in fused combine.
  run_cases test_fused "${TEST}" RADIXKV_DECODE_FUSED_COMBINE=1 -- \
    --filter=decode
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
# Negative control: the extend layout cases (bshd / bhsd / vllm, every page
# size, head_dim 128) with the wgmma kernel's V descriptor LBO / SBO
# swapped. Passes iff the test reports failed cases (status 1) on the
# tensor-core path and none on the portable path, i.e. it sees a wrong
# wgmma operand layout and blames the right kernel. Not the head_dim 64
# case: there the swapped strides address past the tile and the launch
# faults, which ends the process before the verdicts.
if [[ "${STEPS}" == *,fault,* ]]; then
  run_cases fault "${BIN}/gpu_attention_device_test_vdesc_swap" -- \
    "--filter=extend bshd,extend bhsd,extend vllm"
  # Its log stays out of $OUT (the device tool returns at most 8 files); the
  # summary below prints its counts.
  FAULT_LOG="${SCRATCH}/fault.log"
  mv "${LOG}/fault.log" "${FAULT_LOG}"
  mma_fail=$(grep -Ec '^extend.* mma +FAIL' "${FAULT_LOG}")
  portable_fail=$(grep -Ec '^extend.* portable +FAIL' "${FAULT_LOG}")
  fault_status=${rc[fault]}
  rc[fault]=1
  [[ "${fault_status}" == 1 && "${mma_fail}" -gt 0 && "${portable_fail}" == 0 ]] &&
    rc[fault]=0
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
if [[ -n "${FAULT_LOG:-}" ]]; then
  echo "== negative control, wgmma V descriptor swapped (must fail):" \
    "${mma_fail} mma cases failed, ${portable_fail} portable cases failed," \
    "status ${fault_status}"
  grep -E "cases,|seed=" "${FAULT_LOG}" | tail -2
  # Any other status: the test stopped early; its last lines say where.
  [[ "${fault_status}" == 1 ]] || tail -4 "${FAULT_LOG}"
fi
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
