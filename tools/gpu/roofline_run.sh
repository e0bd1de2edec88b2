#!/usr/bin/env bash
# One device-tool call for the decode roofline study (docs/perf.md "GPU
# model executor (H200)", docs/kernel-notes.md "Decode GEMMs"): from the
# folder worker/gpu/stage_gpu_run.sh filled on the CPU machine (the Bazel
# binaries and their shared libraries, xz-compressed), in this order, each
# step under a timeout carved from one budget (ROOFLINE_BUDGET_S, default
# 530 s, so the call ends inside the device tool's 10 minutes):
#   1. unpacks the binaries; writes the test checkpoint, the 1.71 GB bench
#      checkpoint, and in the background the 16 GB Llama-3.1-8B-shape one
#      (make_random_checkpoint --preset=llama3-8b, with its tokenizer.json)
#      under /dev/shm when it has room, else /tmp;
#   2. the device tests the GEMM change touches: golden logits (fp32 and
#      bf16, default GEMM rule), the tensor-core / streaming GEMM case, the
#      sanitizer small case (graphs) and the GEMM autotuning case (tuned vs
#      default vs fp32);
#   3. gpu_model_benchmark on both checkpoints: ceilings measured in the
#      process, decode B = 1, 16, 64, 256 x 1,024 with both GEMM arms
#      (default rule, autotuned), the ROOFLINE table;
#   4. tools/gpu/hf_anchor.py (transformers + torch.compile, CUDA graphs,
#      StaticCache) on both checkpoints;
#   5. compute-sanitizer memcheck of the GEMM autotuning case, if time is
#      left;
# and prints a summary table last (radixkv A / B, floor, HF, ratios).
#
#   tools/gpu/roofline_run.sh [RUN_DIR]        (default .gpu-run)
# Environment: ROOFLINE_BUDGET_S; ROOFLINE_BATCHES (default 1,16,64,256);
# ROOFLINE_SKIP (comma list of test,small,8b,anchor,memcheck);
# ROOFLINE_ANCHOR_SMALL_S / ROOFLINE_ANCHOR_8B_S (the anchor's caps, default
# 170 / 400 s); ROOFLINE_ANCHOR_STATIC=1 compiles the anchor once per batch size instead
# of once with a dynamic batch dimension (slower to compile).
# Logs under $OUT (device tool) or /tmp/roofline, six files (the device tool
# returns at most 8): test.log, bench-small.log, bench-8b.log, anchor.log,
# memcheck.log, summary.txt (GPU, commit, step times, the tables).
set -uo pipefail
R="${1:-.gpu-run}"
LOG="${OUT:-/tmp/roofline}"
BUDGET="${ROOFLINE_BUDGET_S:-530}"
BATCHES="${ROOFLINE_BATCHES:-1,16,64,256}"
SKIP=",${ROOFLINE_SKIP:-},"
W=/tmp/roofline-work  # step times, GPU line, anchor rows: into summary.txt
source "$(dirname "$0")/device_call_common.sh"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv,noheader
  cat "${R}/commit.txt" 2>/dev/null
  date -u
} >"${W}/gpu.txt" 2>&1
stamp "unpacked"

"${B}/make_random_checkpoint" --out=/tmp/tc-model --layers=2 --hidden=512 \
  --heads=8 --kv_heads=2 --head_dim=64 --intermediate=1024 --vocab=1000 \
  --dtype=bf16 >/dev/null
"${B}/make_random_checkpoint" --out=/tmp/bench-model >/dev/null
if [[ "${SKIP}" != *,8b,* ]]; then
  ("${B}/make_random_checkpoint" --out="${M8}" --preset=llama3-8b \
    >"${W}/ckpt-8b.log" 2>&1; echo "rc=$? ${SECONDS}" >>"${W}/ckpt-8b.log") &
  ckpt_pid=$!
fi
stamp "checkpoints written (8B in the background, ${M8})"

if [[ "${SKIP}" != *,test,* ]]; then
  FILTER="GpuGolden.LogitsFp32AndBf16:GpuExecutor.TensorCoreAttentionMatchesGenericKernel:GpuExecutor.SanitizerSmallCase:GpuExecutor.GemmAutotuneMatchesDefaultGemm"
  RADIXKV_TC_MODEL_DIR=/tmp/tc-model timeout "$(cap 150)" \
    "${B}/gpu_model_executor_device_test" --gtest_filter="${FILTER}" \
    >"${LOG}/test.log" 2>&1
  rc[test]=$?
  stamp "device tests rc=${rc[test]}"
fi

bench() {  # bench LABEL MODEL_DIR TIMEOUT EXTRA_ARGS...
  local label=$1 dir=$2 t=$3
  shift 3
  timeout "$(cap "${t}")" "${B}/gpu_model_benchmark" --model_dir="${dir}" \
    --batches="${BATCHES}" --cpu=false --label="${label}" "$@" \
    >"${LOG}/bench-${label}.log" 2>&1
  rc[bench_${label}]=$?
  stamp "bench ${label} rc=${rc[bench_${label}]}"
}
[[ "${SKIP}" != *,small,* ]] && bench small /tmp/bench-model 120
if [[ "${SKIP}" != *,8b,* ]]; then
  wait "${ckpt_pid}"
  stamp "8B checkpoint: $(tail -2 "${W}/ckpt-8b.log" | tr '\n' ' ')"
  # Host sampling of 128,256-entry rows is the host's cost, measured on the
  # small checkpoint: off here.
  bench 8b "${M8}" 200 --serving=false
fi

if [[ "${SKIP}" != *,anchor,* ]]; then
  export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache PYTHONUNBUFFERED=1
  dyn=--dynamic_batch
  [[ "${ROOFLINE_ANCHOR_STATIC:-0}" == 1 ]] && dyn=
  : >"${LOG}/anchor.log"
  for entry in "small:/tmp/bench-model:${ROOFLINE_ANCHOR_SMALL_S:-170}" \
               "8b:${M8}:${ROOFLINE_ANCHOR_8B_S:-400}"; do
    IFS=: read -r label dir t <<<"${entry}"
    [[ -f "${dir}/config.json" ]] || continue
    (($(left) > 60)) || { stamp "anchor ${label} skipped (budget)"; continue; }
    timeout "$(cap "${t}")" "${PY_ENV[@]}" python3 tools/gpu/hf_anchor.py --model_dir="${dir}" \
      --batches="${BATCHES}" --label="${label}" --out="${W}/anchor.jsonl" \
      ${dyn} >>"${LOG}/anchor.log" 2>&1
    rc[anchor_${label}]=$?
    stamp "anchor ${label} rc=${rc[anchor_${label}]}"
  done
fi

if [[ "${SKIP}" != *,memcheck,* ]] && (($(left) > 90)); then
  RADIXKV_TC_MODEL_DIR=/tmp/tc-model timeout "$(cap 120)" \
    compute-sanitizer --tool memcheck --error-exitcode 9 \
    "${B}/gpu_model_executor_device_test" \
    --gtest_filter=GpuExecutor.GemmAutotuneMatchesDefaultGemm \
    >"${LOG}/memcheck.log" 2>&1
  rc[memcheck]=$?
  stamp "memcheck rc=${rc[memcheck]}"
fi
rm -rf "${M8}"

{
  echo "== gpu: $(head -1 "${W}/gpu.txt")"
  echo "== $(sed -n 2,3p "${W}/gpu.txt" | tr '\n' ' ')"
  echo "== steps"; cat "${W}/steps.txt"
  if [[ -f "${LOG}/test.log" ]]; then
    echo "== device tests"
    grep -E "^(golden|tensor-core|small-batch|GEMM autotune|sanitizer|GemmAutotune|gemm m=)|\[  FAILED|\[  PASSED|Failure" \
      "${LOG}/test.log" | head -40
  fi
  [[ -f "${LOG}/memcheck.log" ]] && { echo "== memcheck"; grep -E "ERROR SUMMARY|\[  (PASSED|FAILED)" "${LOG}/memcheck.log"; }
  for label in small 8b; do
    f="${LOG}/bench-${label}.log"
    [[ -f "${f}" ]] || continue
    echo "== bench ${label}"
    grep -E "^(ceilings|model|prefilled|WARNING|TTFT|decode B=)" "${f}"
    grep -E "^gemm m=" "${f}" | head -24
    tail -3 "${f}" | grep -v "^|" || true
  done
  [[ -f "${LOG}/anchor.log" ]] && { echo "== anchor"; grep -E "^hf_anchor|^\| [0-9]|Error|error" "${LOG}/anchor.log" | head -20; }
  "${PY_ENV[@]}" python3 tools/gpu/roofline_summary.py "${LOG}" "${W}/anchor.jsonl"
  for k in "${!rc[@]}"; do echo "step ${k}: rc=${rc[$k]}"; done
} 2>&1 | tee "${LOG}/summary.txt"
status=0
for k in "${!rc[@]}"; do [[ "${rc[$k]}" == 0 ]] || status=1; done
exit "${status}"
