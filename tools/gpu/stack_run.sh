#!/usr/bin/env bash
# One device-tool call for the host overhead of the whole serving stack
# (docs/perf.md, docs/deploy.md "Dashboard panels"): cache service + router
# + one GPU worker on loopback, from the folder worker/gpu/stage_gpu_run.sh
# filled on the CPU machine. In this order, each step under a timeout carved
# from one budget (STACK_BUDGET_S, default 530 s, so the call ends inside
# the device tool's 10 minutes):
#   1. unpacks the binaries; writes the Llama-3.1-8B-shape random checkpoint
#      with its byte-level tokenizer.json (make_random_checkpoint
#      --preset=llama3-8b) under /dev/shm when it has room, else /tmp;
#   2. starts tools/local_cluster --serve with one worker (--device=gpu,
#      bf16 KV, --max_running_requests = STACK_CONCURRENCY, its own /metrics
#      port) and no Redis;
#   3. runs tools/workload/workload_runner against the router: a short
#      warm-up, then shared-prefix and multi-turn (cache_aware) with
#      STACK_CONCURRENCY client streams each, scraping the worker's
#      /metrics before and after each workload;
#   4. stops the cluster and runs gpu_model_benchmark on the same checkpoint
#      at B = 64 and at each workload's mean batch, at the workloads' mean
#      context: the executor's decode step alone (graphs; greedy, as the
#      workload runner decodes, and sampled through ForwardSample);
# and prints a summary table last (tools/gpu/stack_summary.py): output
# tokens/s, TTFT and TPOT p50/p99 per workload; the worker's mean batch,
# mean forward (radixkv_worker_forward_seconds) and iteration
# (radixkv_worker_iteration_seconds) time; host overhead = 1 - forward /
# iteration, and per output token; the benchmark's step at that batch and
# the overhead against its greedy step (1 - benchmark step / iteration).
#
#   tools/gpu/stack_run.sh [RUN_DIR]        (default .gpu-run)
# Environment:
#   STACK_DEVICE        gpu (default) or cpu (smoke test of the flow on the
#                       CPU backend: no checkpoint written, no benchmark)
#   STACK_MODEL_DIR     checkpoint to serve instead of the 8B-shape one
#                       (cpu: default models/radixkv-demo-llama)
#   STACK_CONCURRENCY   client streams and the worker's running batch (64;
#                       cpu: 4)
#   STACK_RUN_SECONDS   no new session after this many seconds of a
#                       workload (90; cpu: 20)
#   STACK_KV_TOKENS     the worker's KV pool, tokens (262144 = 32 GiB of
#                       bf16 8B-shape KV; cpu: 65536)
#   STACK_WORKER_ARGS   extra worker flags
#   STACK_SP_ARGS / STACK_MT_ARGS  workload_runner flags replacing the
#                       shared-prefix / multi-turn shape below
#   STACK_WARMUP        1 (default): a short shared-prefix run first, not
#                       measured (graph capture, allocator, first RPCs)
#   STACK_BUDGET_S      the whole call's budget, seconds (530)
# Logs under $OUT (device tool) or /tmp/stack-run, four files (the device
# tool returns at most 8): workloads.log, bench.log, stack-logs.tar.gz (the
# cluster's logs, the /metrics scrapes, the runner's JSON), summary.txt.
set -uo pipefail
R="${1:-.gpu-run}"
LOG="${OUT:-/tmp/stack-run}"
BUDGET="${STACK_BUDGET_S:-530}"
DEV="${STACK_DEVICE:-gpu}"
W=/tmp/stack-run-work
source "$(dirname "$0")/device_call_common.sh"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null ||
    echo "no GPU (STACK_DEVICE=${DEV})"
  cat "${R}/commit.txt" 2>/dev/null
  date -u
} >"${W}/gpu.txt" 2>&1
stamp "unpacked"

if [[ "${DEV}" == gpu ]]; then
  CONC="${STACK_CONCURRENCY:-64}"
  RUN_S="${STACK_RUN_SECONDS:-90}"
  KV_TOKENS="${STACK_KV_TOKENS:-262144}"
  KV_DTYPE=bf16
  THREADS=1
  # Both workloads: ~1,100-1,300 tokens of mean context, 128 output tokens per
  # request, so decode steps of a full batch dominate.
  SP_ARGS="${STACK_SP_ARGS:---sp_groups=24 --sp_prompts_per_group=32 --sp_system_tokens=1024 --sp_question_tokens=64 --sp_output_tokens=128}"
  MT_SYSTEM=512 MT_USER=64 MT_OUTPUT=128 MT_ROUNDS=8
  WARM_ARGS="--sp_groups=2 --sp_prompts_per_group=${CONC} --sp_system_tokens=256 --sp_question_tokens=32 --sp_output_tokens=32"
else
  CONC="${STACK_CONCURRENCY:-4}"
  RUN_S="${STACK_RUN_SECONDS:-20}"
  KV_TOKENS="${STACK_KV_TOKENS:-65536}"
  KV_DTYPE=f32
  THREADS=2
  SP_ARGS="${STACK_SP_ARGS:---sp_groups=2 --sp_prompts_per_group=4 --sp_system_tokens=128 --sp_question_tokens=16 --sp_output_tokens=8}"
  MT_SYSTEM=64 MT_USER=16 MT_OUTPUT=8 MT_ROUNDS=2
  WARM_ARGS="--sp_groups=1 --sp_prompts_per_group=${CONC} --sp_system_tokens=32 --sp_question_tokens=8 --sp_output_tokens=4"
fi

WROTE_8B=
if [[ -n "${STACK_MODEL_DIR:-}" ]]; then
  MODEL="$(realpath "${STACK_MODEL_DIR}")"
elif [[ "${DEV}" == gpu ]]; then
  MODEL="${M8}"
  WROTE_8B=1
  timeout "$(cap 150)" "${B}/make_random_checkpoint" --out="${M8}" \
    --preset=llama3-8b >"${W}/ckpt-8b.log" 2>&1
  rc[checkpoint]=$?
  stamp "8B checkpoint rc=${rc[checkpoint]} (${M8}): $(tail -1 "${W}/ckpt-8b.log")"
else
  MODEL="${PWD}/models/radixkv-demo-llama"
fi
# A multi-turn conversation grows to MT_SYSTEM + MT_ROUNDS x (MT_USER +
# MT_OUTPUT) tokens: fewer rounds for a model with fewer positions than one
# round more than that (the demo model's 2,048 on the GPU shape: 6 rounds).
MAX_POS=$(sed -n 's/.*"max_position_embeddings": *\([0-9]*\).*/\1/p' \
  "${MODEL}/config.json" 2>/dev/null | head -1)
MT_TURN=$((MT_USER + MT_OUTPUT))
if [[ -n "${MAX_POS}" ]] &&
  ((MT_SYSTEM + (MT_ROUNDS + 1) * MT_TURN > MAX_POS)); then
  MT_ROUNDS=$(((MAX_POS - MT_SYSTEM) / MT_TURN - 2))
fi
MT_ARGS="${STACK_MT_ARGS:---mt_conversations=${CONC} --mt_rounds=${MT_ROUNDS} --mt_system_tokens=${MT_SYSTEM} --mt_user_tokens=${MT_USER} --mt_output_tokens=${MT_OUTPUT}}"

# The cluster: one worker, its own /metrics port (--process_metrics), no
# Redis (the cache service journals nothing; Redis is not on the device
# machine), the worker at the launcher's priority.
CL="${W}/cluster"
rm -rf "${CL}" && mkdir -p "${CL}"
"${B}/tools/local_cluster/local_cluster" --bin_dir="${B}" --run_dir="${CL}" \
  --model_dir="${MODEL}" --num_workers=1 --redis=false --worker_nice=0 \
  --worker_threads="${THREADS}" --kv_capacity_tokens="${KV_TOKENS}" \
  --process_metrics --serve --ready_file="${W}/ready" \
  --worker_args="--device=${DEV} --kv_dtype=${KV_DTYPE} --max_running_requests=${CONC} ${STACK_WORKER_ARGS:-}" \
  >"${W}/cluster.log" 2>&1 &
cluster_pid=$!
ready_wait=$(cap 240)
for _ in $(seq "${ready_wait}"); do
  [[ -s "${W}/ready" ]] && break
  kill -0 "${cluster_pid}" 2>/dev/null || break
  sleep 1
done
# ready file: router gRPC, cache service, router HTTP API, router /metrics,
# cache service /metrics; the worker's /metrics from the launcher's log.
ROUTER="$(sed -n 1p "${W}/ready" 2>/dev/null)"
CACHE="$(sed -n 2p "${W}/ready" 2>/dev/null)"
ROUTER_METRICS="$(sed -n 4p "${W}/ready" 2>/dev/null)"
WORKER_METRICS="$(grep -o 'registered (metrics [^)]*)' "${W}/cluster.log" |
  head -1 | sed 's/.*metrics \([^)]*\))/\1/')"
stamp "cluster router=${ROUTER:-none} worker metrics=${WORKER_METRICS:-none}"

scrape() {  # scrape FILE: the worker's /metrics text
  "${PY_ENV[@]}" python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=10).read().decode())' \
    "${WORKER_METRICS}" >"$1" 2>>"${W}/scrape.err"
}
workload() {  # workload LABEL NAME TIMEOUT ARGS...: one workload_runner run
  local label=$1 name=$2 t=$3
  shift 3
  echo "== ${label}: ${name} $*" >>"${LOG}/workloads.log"
  timeout "$(cap "${t}")" "${B}/tools/workload/workload_runner" \
    --router="${ROUTER}" --cache_service="${CACHE}" \
    --router_metrics="${ROUTER_METRICS}" --model_dir="${MODEL}" \
    --workloads="${name}" --configs=cache_aware --concurrency="${CONC}" \
    --json="${W}/${label}.json" "$@" >>"${LOG}/workloads.log" 2>&1
  rc[${label}]=$?
  stamp "workload ${label} rc=${rc[${label}]}"
}

: >"${LOG}/workloads.log"
if [[ -n "${ROUTER}" && -n "${WORKER_METRICS}" ]]; then
  if [[ "${STACK_WARMUP:-1}" == 1 ]]; then
    # shellcheck disable=SC2086
    workload warmup shared-prefix 60 --max_run_seconds=10 ${WARM_ARGS}
  fi
  for entry in "shared-prefix:${SP_ARGS}" "multi-turn:${MT_ARGS}"; do
    name="${entry%%:*}"
    args="${entry#*:}"
    (($(left) > 60)) || { stamp "${name} skipped (budget)"; continue; }
    scrape "${W}/metrics-${name}-before.txt"
    # shellcheck disable=SC2086
    workload "${name}" "${name}" $((RUN_S + 90)) --max_run_seconds="${RUN_S}" ${args}
    scrape "${W}/metrics-${name}-after.txt"
  done
else
  rc[cluster]=1
  stamp "cluster did not become ready"
fi
kill -TERM "${cluster_pid}" 2>/dev/null
for _ in $(seq 30); do
  kill -0 "${cluster_pid}" 2>/dev/null || break
  sleep 1
done
kill -KILL "${cluster_pid}" 2>/dev/null
wait "${cluster_pid}" 2>/dev/null
stamp "cluster stopped"

# The executor alone at B = 64 and the workloads' mean batches, at their
# mean context (stack_summary.py --bench_args prints the flags).
if [[ "${DEV}" == gpu && -x "${B}/gpu_model_benchmark" ]] && (($(left) > 60)); then
  read -r batches context < <("${PY_ENV[@]}" python3 tools/gpu/stack_summary.py \
    --work="${W}" --bench_args --max_batch="${CONC}")
  stamp "bench --batches=${batches} --context=${context}"
  timeout "$(cap 200)" "${B}/gpu_model_benchmark" --model_dir="${MODEL}" \
    --batches="${batches}" --context="${context}" --cpu=false --ttft=false \
    --ab_rounds=0 --decode_steps=16 --label=stack >"${LOG}/bench.log" 2>&1
  rc[bench]=$?
  stamp "bench rc=${rc[bench]}"
fi
[[ -n "${WROTE_8B}" ]] && rm -rf "${M8}"

"${PY_ENV[@]}" python3 tools/gpu/stack_summary.py --work="${W}" \
  --bench_log="${LOG}/bench.log" >"${W}/table.txt" 2>&1
rc[summary]=$?
cp "${W}/cluster.log" "${CL}/" 2>/dev/null
tar -czf "${LOG}/stack-logs.tar.gz" -C "${W}" . 2>/dev/null
{
  echo "== machine: $(head -1 "${W}/gpu.txt")"
  echo "== $(sed -n 2,3p "${W}/gpu.txt" | tr '\n' ' ')"
  echo "== model ${MODEL}, device ${DEV}, KV ${KV_DTYPE} x ${KV_TOKENS} tokens, ${CONC} streams"
  echo "== steps"; cat "${W}/steps.txt"
  grep -E "ERROR|FAILED|UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED" "${LOG}/workloads.log" | head -10
  [[ -f "${LOG}/bench.log" ]] && grep -E "^(model|prefilled|WARNING)" "${LOG}/bench.log"
  for k in "${!rc[@]}"; do echo "step ${k}: rc=${rc[$k]}"; done
  cat "${W}/table.txt"
} 2>&1 | tee "${LOG}/summary.txt"
status=0
for k in "${!rc[@]}"; do [[ "${rc[$k]}" == 0 ]] || status=1; done
exit "${status}"
