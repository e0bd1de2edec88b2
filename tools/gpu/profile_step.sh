#!/usr/bin/env bash
# One device-tool call: a per-kernel profile of one decode step or prefill (Nsight
# Compute, docs/kernel-notes.md "Decode step, kernel by kernel") on the
# 1.71 GB checkpoint and the Llama-3.1-8B shape, from the folder
# worker/gpu/stage_gpu_run.sh filled on the CPU machine. For each
# (checkpoint, batch): gpu_model_benchmark --profile_batch=B runs the step
# once unprofiled (its graph time) and once inside the profiler range under
#   ncu --profile-from-start off --graph-profiling node --clock-control none
#       --cache-control none
# (each graph node a kernel of its own, serialized, clocks left alone), and
# tools/gpu/kernel_breakdown.py turns the CSV into a table (launches, time,
# DRAM bandwidth per kernel; the time outside kernels).
#
#   tools/gpu/profile_step.sh [RUN_DIR]        (default .gpu-run)
# Environment: PROFILE_MODELS (default small,8b), PROFILE_BATCHES (default
# 1,64), PROFILE_PREFILL (prompt lengths, default none: each one cold
# prefill, --profile_prefill), PROFILE_CONTEXT (default 1024), PROFILE_ARGS
# (more gpu_model_benchmark flags, e.g. --fuse_rms_norm=false),
# PROFILE_BUDGET_S (default 500). Logs under $OUT (or /tmp/profile): per
# case <model>-B<b>.txt or <model>-P<tokens>.txt (benchmark line + table)
# and the CSVs in csv.tgz; summary.txt last.
set -uo pipefail
R="${1:-.gpu-run}"
LOG="${OUT:-/tmp/profile}"
MODELS="${PROFILE_MODELS:-small,8b}"
BATCHES="${PROFILE_BATCHES:-1,64}"
PREFILL="${PROFILE_PREFILL:-}"
CTX="${PROFILE_CONTEXT:-1024}"
BUDGET="${PROFILE_BUDGET_S:-500}"
NCU=/usr/local/cuda/bin/ncu
[[ -x "${NCU}" ]] || NCU=ncu
W=/tmp/profile-csv
source "$(dirname "$0")/device_call_common.sh"

declare -A DIR=([small]=/tmp/bench-model [8b]="${M8}")
[[ -f /tmp/bench-model/config.json ]] ||
  "${B}/make_random_checkpoint" --out=/tmp/bench-model >/dev/null
if [[ ",${MODELS}," == *,8b,* && ! -f "${DIR[8b]}/config.json" ]]; then
  "${B}/make_random_checkpoint" --out="${DIR[8b]}" --preset=llama3-8b >/dev/null
fi
: >"${LOG}/summary.txt"
CASES=()
for b in ${BATCHES//,/ }; do CASES+=("B${b}"); done
for p in ${PREFILL//,/ }; do CASES+=("P${p}"); done
for m in ${MODELS//,/ }; do
  for case in "${CASES[@]}"; do
    out="${LOG}/${m}-${case}.txt"
    csv="${W}/${m}-${case}.csv"
    args=(--model_dir="${DIR[$m]}" --context="${CTX}" --cpu=false ${PROFILE_ARGS:-})
    if [[ "${case}" == B* ]]; then
      args+=(--batches="${case#B}" --profile_batch="${case#B}")
    else
      args+=(--batches=1 --profile_prefill="${case#P}")
    fi
    timeout "$(cap 200)" "${B}/gpu_model_benchmark" "${args[@]}" >"${out}" 2>&1
    step_ms=$(sed -n -e 's/^profile: decode B=[0-9]* step \([0-9.]*\) ms.*/\1/p' \
      -e 's/^profile: prefill of [0-9]* tokens \([0-9.]*\) ms.*/\1/p' "${out}")
    timeout "$(cap 300)" "${NCU}" --profile-from-start off --graph-profiling node \
      --clock-control none --cache-control none --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "${B}/gpu_model_benchmark" "${args[@]}" >"${csv}" 2>>"${out}"
    echo "rc ncu=$?" >>"${out}"
    {
      echo "== ${m} ${case} context ${CTX}: $(grep '^model ' "${out}" | cut -c1-90)"
      "${PY_ENV[@]}" python3 tools/gpu/kernel_breakdown.py "${csv}" --step_ms "${step_ms:-0}"
    } >>"${LOG}/summary.txt" 2>&1
  done
done
tar -czf "${LOG}/csv.tgz" -C /tmp profile-csv
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat "${R}/commit.txt"; } >>"${LOG}/summary.txt" 2>&1
cat "${LOG}/summary.txt"
