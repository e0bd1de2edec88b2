#!/usr/bin/env bash
# GPU-machine half of the worker GPU backend validation. The
# binaries are built on the CPU machine with Bazel and carried in a folder
# (default .gpu-run, made by worker/gpu/stage_gpu_run.sh):
#   .gpu-run/bin/      gpu_model_executor_device_test, gpu_model_benchmark,
#                      make_random_checkpoint, greedy_text_client, and the
#                      cluster layout
#                      cache_service/ worker/ (= //worker/gpu:worker_gpu)
#                      router/router, tools/workload/workload_runner,
#                      tools/local_cluster/local_cluster,
#                      tools/fork_memory/fork_memory_benchmark
#   .gpu-run/lib.tar.xz  Debian shared libraries the binaries need
#   .gpu-run/bin.tar.xz  the binaries of bin/, xz-compressed
#   .gpu-run/shared/golden  copy of shared/golden
#
#   worker/gpu/run_gpu_backend_suite.sh [RUN_DIR] [STEPS]
#     STEPS: comma list of test,families,sanitize,bench,e2e,fork (default
#     all but fork)
#   test      the device test (golden checkpoints, GPU vs CPU, graphs, device
#             sampling, the scheduler's serving path on the device)
#   families  gpu_model_family_device_test on .gpu-run/model_families (Qwen3,
#             sliding windows vs transformers; skipped when not staged)
#   sanitize  compute-sanitizer racecheck on the device test's small case
#             (SanitizerSmallCase: tensor-core and generic attention, bf16,
#             prefill + graph decode steps, greedy and sampled) and memcheck
#             on it plus DeviceSampling, TensorCoreAttention and the
#             device logit processors (penalties, min_p, logprobs) and
#             prompt logprobs
#   bench     gpu_model_benchmark (decode B = 1..256, serving step with
#             device vs host sampling, TTFT)
#   e2e       greedy text of 12 prompts through a cluster whose worker is
#             --device=cpu vs one whose worker is --device=gpu (must be
#             identical), then the multi-turn / shared-prefix workloads
#   fork      fork_memory_benchmark against one GPU worker (fp32, embedded
#             demo model): n = 8 samples as one request (the lease forked)
#             vs 8 requests, prefix cache off and on; peak KV slots, output
#             tokens/s, TTFT and TPOT p50/p99 (docs/perf.md "Parallel
#             sampling"); not in the default list (its own run)
# Logs go to $OUT (device tool) or /tmp/gpu-backend; prints a summary last.
set -uo pipefail
R="${1:-.gpu-run}"
STEPS=",${2:-test,families,sanitize,bench,e2e},"
LOG="${OUT:-/tmp/gpu-backend}"
mkdir -p "${LOG}" "${R}/lib"
[[ -f "${R}/lib.tar.xz" ]] && tar -xJf "${R}/lib.tar.xz" -C "${R}/lib"
[[ -f "${R}/bin.tar.xz" ]] && tar -xJf "${R}/bin.tar.xz" -C "${R}"
export LD_LIBRARY_PATH="${PWD}/${R}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export RADIXKV_SHARED_DIR="${PWD}/${R}/shared"
B="${R}/bin"
declare -A rc
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat "${R}/commit.txt"; } >"${LOG}/gpu.txt" 2>&1

if [[ "${STEPS}" == *,test,* ]]; then
  "${B}/make_random_checkpoint" --out=/tmp/tc-model --layers=2 --hidden=512 \
    --heads=8 --kv_heads=2 --head_dim=64 --intermediate=1024 --vocab=1000 \
    --dtype=bf16 >/dev/null
  RADIXKV_TC_MODEL_DIR=/tmp/tc-model timeout "${TEST_TIMEOUT:-240}" \
    "${B}/gpu_model_executor_device_test" >"${LOG}/test.log" 2>&1
  rc[test]=$?
fi
if [[ "${STEPS}" == *,families,* && -d "${R}/model_families" ]]; then
  RADIXKV_MODEL_FAMILY_DIR="${PWD}/${R}/model_families" \
    timeout "${TEST_TIMEOUT:-240}" "${B}/gpu_model_family_device_test" \
    >"${LOG}/families.log" 2>&1
  rc[families]=$?
fi
if [[ "${STEPS}" == *,sanitize,* ]]; then
  [[ -d /tmp/tc-model ]] || "${B}/make_random_checkpoint" --out=/tmp/tc-model \
    --layers=2 --hidden=512 --heads=8 --kv_heads=2 --head_dim=64 \
    --intermediate=1024 --vocab=1000 --dtype=bf16 >/dev/null
  SAN=/usr/local/cuda/bin/compute-sanitizer
  # The serving path's kernels are those of DeviceSampling (argmax, sample)
  # and the forward; the scheduler test itself is too many steps to
  # instrument within the step's budget.
  # racecheck instruments every shared-memory access (DeviceSampling alone
  # ran past 75 s): it gets the small case only.
  FILTER="GpuExecutor.SanitizerSmallCase:GpuExecutor.DeviceSampling:GpuExecutor.TensorCoreAttentionMatchesGenericKernel:GpuExecutor.AllLogitsBeyondTheLogitRowBoundAreChunkedExactly:GpuExecutor.DeviceProcessorsMatchAFloat64ReferenceOfTheDeviceLogits:GpuExecutor.PromptLogprobsMatchAFloat64ReferenceOfTheDeviceLogits"
  : >"${LOG}/sanitize.log"
  for tool in racecheck memcheck; do
    extra=""
    filter="${FILTER}"
    [[ "${tool}" == racecheck ]] && extra="--racecheck-report all" &&
      filter="GpuExecutor.SanitizerSmallCase"
    echo "== compute-sanitizer --tool ${tool}" >>"${LOG}/sanitize.log"
    RADIXKV_TC_MODEL_DIR=/tmp/tc-model timeout "${SAN_TIMEOUT:-150}" \
      "${SAN}" --tool "${tool}" ${extra} --error-exitcode 9 \
      "${B}/gpu_model_executor_device_test" --gtest_filter="${filter}" \
      >>"${LOG}/sanitize.log" 2>&1
    rc[${tool}]=$?
  done
fi
if [[ "${STEPS}" == *,bench,* ]]; then
  "${B}/make_random_checkpoint" --out=/tmp/bench-model >"${LOG}/bench.log" 2>&1
  timeout "${BENCH_TIMEOUT:-240}" "${B}/gpu_model_benchmark" \
    --model_dir=/tmp/bench-model ${BENCH_ARGS:-} >>"${LOG}/bench.log" 2>&1
  rc[bench]=$?
fi
if [[ "${STEPS}" == *,e2e,* ]]; then
  # Greedy text, CPU worker vs GPU worker (fp32, embedded demo model): the
  # GPU worker's scheduler samples on the device, the CPU worker's on the
  # host; the outputs must be identical.
  for dev in cpu gpu; do
    rm -rf "/tmp/cmp-${dev}" && mkdir -p "/tmp/cmp-${dev}"
    "${B}/tools/local_cluster/local_cluster" --bin_dir="${B}" --run_dir="/tmp/cmp-${dev}" \
      --model_dir=models/radixkv-demo-llama --num_workers=1 --redis=false \
      --worker_threads=4 --kv_capacity_tokens=65536 --serve \
      --ready_file="/tmp/cmp-${dev}/ready" \
      --worker_args="--device=${dev} --kv_dtype=f32 --max_running_requests=64" \
      >"${LOG}/cmp-${dev}.log" 2>&1 &
    pid=$!
    for _ in $(seq 90); do
      [[ -s "/tmp/cmp-${dev}/ready" ]] && break
      sleep 1
    done
    timeout 120 "${B}/greedy_text_client" \
      --router="$(head -1 "/tmp/cmp-${dev}/ready" 2>/dev/null)" \
      --out="${LOG}/greedy-${dev}.txt" >>"${LOG}/cmp-${dev}.log" 2>&1
    rc[greedy_${dev}]=$?
    kill -TERM "${pid}" 2>/dev/null
    wait "${pid}"
  done
  # (ready file: router address, then cache service address)
  if [[ "${rc[greedy_cpu]}" == 0 && "${rc[greedy_gpu]}" == 0 ]] &&
    diff "${LOG}/greedy-cpu.txt" "${LOG}/greedy-gpu.txt" >"${LOG}/greedy.diff"; then
    rc[greedy_cpu_eq_gpu]=0
  else
    rc[greedy_cpu_eq_gpu]=1
  fi
  # cache service + router + one GPU worker (fp32, embedded demo model) on
  # loopback, bounded multi-turn + shared-prefix workloads.
  timeout "${E2E_TIMEOUT:-150}" "${B}/tools/local_cluster/local_cluster" --bin_dir="${B}" \
    --run_dir=/tmp/e2e-run --model_dir=models/radixkv-demo-llama \
    --num_workers=1 --redis=false --worker_nice=0 --kv_capacity_tokens=65536 \
    --worker_args="--device=gpu --kv_dtype=f32 --max_running_requests=64" \
    -- --workloads=multi-turn,shared-prefix --configs=cache_aware,cache_off \
    --max_run_seconds="${E2E_RUN_SECONDS:-30}" >"${LOG}/e2e.log" 2>&1
  rc[e2e]=$?
  cp /tmp/e2e-run/*.log "${LOG}/" 2>/dev/null
  tar -czf "${LOG}/e2e-logs.tgz" -C /tmp e2e-run 2>/dev/null
  rm -f "${LOG}"/worker-*.log "${LOG}"/router.log "${LOG}"/cache_service.log
fi
if [[ "${STEPS}" == *,fork,* ]]; then
  # cache service + router + one GPU worker (fp32, embedded demo model) on
  # loopback; the table goes to fork.log, the processes' logs to fork-logs.tgz.
  rm -rf /tmp/fork-run
  timeout "${FORK_TIMEOUT:-300}" "${B}/tools/fork_memory/fork_memory_benchmark" \
    --bin_dir="${B}" --run_dir=/tmp/fork-run \
    --model_dir=models/radixkv-demo-llama --kv_capacity_tokens=32768 \
    --worker_args="--device=gpu --kv_dtype=f32 --max_running_requests=64" \
    >"${LOG}/fork.log" 2>&1
  rc[fork]=$?
  tar -czf "${LOG}/fork-logs.tgz" -C /tmp fork-run 2>/dev/null
fi

echo "== gpu: $(cat "${LOG}/gpu.txt")"
if [[ -f "${LOG}/test.log" ]]; then
  echo "== device test"
  grep -E "^(golden|greedy|prefix|gpu-vs-cpu|graphs|serving|sanitizer|tensor-core|\[  FAILED|\[  PASSED|.*seed=)" \
    "${LOG}/test.log" | tail -70
  grep -E "Failure|error:" -A3 "${LOG}/test.log" | head -30
fi
if [[ -f "${LOG}/sanitize.log" ]]; then
  echo "== sanitize"
  grep -E "^== compute|ERROR SUMMARY|RACECHECK SUMMARY|hazard|Error|\[  (PASSED|FAILED)" \
    "${LOG}/sanitize.log" | head -40
fi
[[ -f "${LOG}/bench.log" ]] && { echo "== bench"; grep -E "^model|^prefilled|WARNING" "${LOG}/bench.log"; sed -n '/SUMMARY/,$p' "${LOG}/bench.log"; tail -3 "${LOG}/bench.log"; }
if [[ -f "${LOG}/greedy.diff" ]]; then
  echo "== greedy text cpu vs gpu worker: $(wc -l <"${LOG}/greedy-gpu.txt") prompts, diff lines $(wc -l <"${LOG}/greedy.diff")"
  head -3 "${LOG}/greedy-gpu.txt" | cut -c1-200
fi
[[ -f "${LOG}/e2e.log" ]] && { echo "== e2e"; tail -40 "${LOG}/e2e.log"; }
[[ -f "${LOG}/fork.log" ]] && { echo "== fork"; tail -8 "${LOG}/fork.log"; }
status=0
for k in "${!rc[@]}"; do
  echo "step ${k}: rc=${rc[$k]}"
  [[ "${rc[$k]}" == 0 ]] || status=1
done
exit "${status}"
