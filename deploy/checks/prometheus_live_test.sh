#!/bin/bash
# Test: a real Prometheus (Debian's `prometheus`) with the repository's scrape
# configuration and alert rules (deploy/monitoring/prometheus.yml, templated
# to loopback targets by prometheus_local_config.js) scrapes a local radixkv
# cluster on loopback (redis-server, cache service journaling to it, two CPU
# workers with the demo model, the router) while the workload runner drives
# a short bounded multi-turn workload; then prometheus_live_check.js queries
# Prometheus' HTTP API and asserts that the Grafana dashboard's queries return
# values (hit rate > 0, pool usage by state, ...) and that every alert rule
# evaluates. `promtool check metrics` must pass on each process's /metrics.
# Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
  bin="${RADIXKV_BIN_DIR:-$root}"
else
  root="$(cd "$(dirname "$0")/../.." && pwd)"
  bin="${RADIXKV_BIN_DIR:-$root/bazel-bin}"
  export RUNFILES_DIR="${RUNFILES_DIR:-$bin/tools/workload/workload_runner.runfiles}"
fi
node_check="${root}/deploy/checks/run_node_check.sh"
model="${root}/models/radixkv-demo-llama"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/prom-live.XXXXXX")"
for tool in prometheus promtool redis-server curl node; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found (scripts/install_deps.sh)"; exit 1; }
done

pids=()
cleanup() {
  local rc=$?
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  local deadline=$((SECONDS + 20))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if ((rc != 0)); then
    for f in "$work"/*.log; do
      [[ -f "$f" ]] && { echo "---- $(basename "$f") (last lines)"; tail -n 15 "$f"; }
    done
    echo "logs and Prometheus data kept in $work"
  elif [[ -z "${TEST_TMPDIR:-}" ]]; then
    rm -rf "$work"  # by hand, passed: ~65 MB of Prometheus data per run
  fi
}
trap cleanup EXIT

# Ten free loopback ports.
read -r -a P <<<"$(node -e '
  const net = require("net");
  const servers = [];
  (async () => {
    const ports = [];
    for (let i = 0; i < 10; i++) {
      const s = net.createServer();
      await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
      servers.push(s);
      ports.push(s.address().port);
    }
    servers.forEach((s) => s.close());
    console.log(ports.join(" "));
  })();')"
redis_port=${P[0]} cache_grpc=${P[1]} cache_metrics=${P[2]} router_grpc=${P[3]} router_metrics=${P[4]}
w0_grpc=${P[5]} w0_metrics=${P[6]} w1_grpc=${P[7]} w1_metrics=${P[8]} prom_port=${P[9]}
# Worker ids are pod names, as in the StatefulSet (--worker_id=$(POD_NAME)).
w0=radixkv-worker-0 w1=radixkv-worker-1

start() {  # name, argv... (argv[0] an executable, so that $! is its pid)
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}
wait_http() {  # url, seconds
  local deadline=$((SECONDS + $2))
  until curl -sf -o /dev/null "$1"; do
    ((SECONDS < deadline)) || { echo "FAIL: $1 did not answer in $2 s"; exit 1; }
    sleep 0.2
  done
}

echo "== image layout (deploy/docker/collect_runtime_libs.sh, as the Dockerfile stages it)"
# The processes run from a copy laid out like the images: binaries and their
# collected libraries, the dlopen'ed tokenizer plug-in found through
# RADIXKV_SENTENCEPIECE_PLUGIN (the images' ENV), no Bazel runfiles.
img="$work/image"
"${root}/deploy/docker/collect_runtime_libs.sh" "$img" "$bin/cache_service/cache_service" \
  "$bin/router/router" "$bin/worker/worker" "$bin/model/tokenizer/libradixkv_sentencepiece.so"
# Like the images: the plug-in under lib/, not next to the binaries.
mkdir -p "$img/lib/radixkv"
mv "$img/bin/libradixkv_sentencepiece.so" "$img/lib/radixkv/"
# A command prefix, not a function: `start` must background the process
# itself (env execs it), so that its pid is the one SIGTERM reaches.
as_image=(env -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE -u TEST_SRCDIR -u JAVA_RUNFILES
  LD_LIBRARY_PATH="$img/lib" RADIXKV_SENTENCEPIECE_PLUGIN="$img/lib/radixkv/libradixkv_sentencepiece.so")

echo "== local cluster on 127.0.0.1 (logs in $work)"
start redis /usr/bin/redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" \
  --save "" --appendonly no --daemonize no
start cache_service "${as_image[@]}" "$img/bin/cache_service" --bind_address=127.0.0.1 \
  --grpc_port="$cache_grpc" --metrics_port="$cache_metrics" --redis="127.0.0.1:$redis_port" \
  --sweep_interval_ms=100
wait_http "http://127.0.0.1:$cache_metrics/metrics" 30
for i in 0 1; do
  id_var=w$i grpc_var=w${i}_grpc metrics_var=w${i}_metrics
  start "worker$i" "${as_image[@]}" "$img/bin/worker" --bind_address=127.0.0.1 \
    --grpc_port="${!grpc_var}" --metrics_port="${!metrics_var}" \
    --worker_id="${!id_var}" --advertise_address="127.0.0.1:${!grpc_var}" \
    --cache_service="127.0.0.1:$cache_grpc" --model_dir="$model" --threads=1 \
    --drain_timeout_s=5
done
start router "${as_image[@]}" "$img/bin/router" --bind_address=127.0.0.1 --grpc_port="$router_grpc" \
  --metrics_port="$router_metrics" --cache_service="127.0.0.1:$cache_grpc" --model_dir="$model"
for port in "$w0_metrics" "$w1_metrics" "$router_metrics"; do wait_http "http://127.0.0.1:$port/metrics" 60; done
# Both workers registered: the cache service exports their slots.
deadline=$((SECONDS + 60))
until curl -sf "http://127.0.0.1:$cache_metrics/metrics" | grep -q "radixkv_cache_slots{.*worker=\"$w1\"" &&
      curl -sf "http://127.0.0.1:$cache_metrics/metrics" | grep -q "radixkv_cache_slots{.*worker=\"$w0\""; do
  ((SECONDS < deadline)) || { echo "FAIL: workers did not register"; exit 1; }
  sleep 0.2
done
grep -q "tokenizer and chat template from" "$work/router.log" ||
  { echo "FAIL: the router did not load the tokenizer plug-in"; exit 1; }
echo "cluster up: cache service, $w0, $w1, router (tokenizer plug-in from RADIXKV_SENTENCEPIECE_PLUGIN)"

echo "== Prometheus with deploy/monitoring/prometheus.yml (targets templated to loopback)"
mkdir -p "$work/prometheus"
cp "${root}/deploy/monitoring/alerts.yml" "$work/prometheus/alerts.yml"
"$node_check" prometheus_local_config.js "$work/prometheus/prometheus.yml" \
  "radixkv-router=radixkv-router-0@127.0.0.1:$router_metrics" \
  "radixkv-cache-service=radixkv-cache-service-0@127.0.0.1:$cache_metrics" \
  "radixkv-worker=$w0@127.0.0.1:$w0_metrics,$w1@127.0.0.1:$w1_metrics"
promtool check config "$work/prometheus/prometheus.yml"
start prometheus prometheus --config.file="$work/prometheus/prometheus.yml" \
  --storage.tsdb.path="$work/prometheus/data" --web.listen-address="127.0.0.1:$prom_port" \
  --web.console.templates="$work/prometheus" --web.console.libraries="$work/prometheus"
wait_http "http://127.0.0.1:$prom_port/-/ready" 30
# Prometheus applies discovered targets every few seconds: wait for the
# first scrape of all four, so that rates have a sample before the workload.
deadline=$((SECONDS + 30))
until [[ $(curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=count(up%3D%3D1)" |
          grep -o '"value":\[[^]]*\]' | grep -o '"[0-9]*"]' | tr -dc 0-9) == 4 ]]; do
  ((SECONDS < deadline)) || { echo "FAIL: Prometheus did not scrape the four targets"; exit 1; }
  sleep 0.5
done
echo "Prometheus scrapes 4 targets"

echo "== workload: multi-turn, bounded, in two runs"
# Two runs a few scrapes apart: series that the first run creates (labelled
# counters) get increments in the second, so rate() sees them grow.
for seed in 1 2; do
  timeout 120 "$bin/tools/workload/workload_runner" --router="127.0.0.1:$router_grpc" \
    --router_metrics="127.0.0.1:$router_metrics" --model_dir="$model" \
    --workloads=multi-turn --configs=cache_aware --seed="$seed" \
    --mt_conversations=4 --mt_rounds=3 --mt_system_tokens=96 --mt_user_tokens=24 \
    --mt_output_tokens=8 --concurrency=4 --max_run_seconds=40 --request_timeout_seconds=60 \
    >"$work/workload$seed.log" 2>&1 && rc=0 || rc=$?
  # Judged by its report, not its exit code (which may also reflect the
  # runner's performance targets): all 12 requests ok, none failed.
  if ! grep -Eq "requests ok / errors +\| +12 / 0$" "$work/workload$seed.log"; then
    echo "FAIL: workload run $seed (exit $rc) did not complete 12 requests without error"
    cat "$work/workload$seed.log"
    exit 1
  fi
  grep -E "requests ok|prefix hit rate|per-worker share|TTFT" "$work/workload$seed.log"
  # Let Prometheus scrape the counters (scrape interval 1 s).
  sleep 3
done

echo "== promtool check metrics on every process's /metrics"
for target in "cache_service:$cache_metrics" "$w0:$w0_metrics" "$w1:$w1_metrics" "router:$router_metrics"; do
  name=${target%%:*} port=${target##*:}
  curl -sf "http://127.0.0.1:$port/metrics" >"$work/$name.metrics"
  if ! out=$(promtool check metrics <"$work/$name.metrics" 2>&1); then
    echo "FAIL: promtool check metrics for $name:"
    echo "$out"
    exit 1
  fi
  echo "$name: $(grep -c '^# TYPE' "$work/$name.metrics") metric families, promtool check metrics ok"
done

echo "== dashboard queries against Prometheus"
"$node_check" prometheus_live_check.js "http://127.0.0.1:$prom_port" "$w0" "$w1"

echo "== graceful termination of $w1 (what the kubelet does: SIGTERM, SIGKILL after the grace period)"
# The grace period of the cpu-demo worker StatefulSet.
grace=$(RADIXKV_DEPLOY_DIR="${root}/deploy" "$node_check" kustomize_render.js "${root}/deploy/k8s/overlays/cpu-demo" \
  StatefulSet/radixkv-worker /spec/template/spec/terminationGracePeriodSeconds)
[[ "$grace" =~ ^[0-9]+$ ]] || { echo "FAIL: cannot read the worker's grace period: $grace"; exit 1; }
worker1_pid=${pids[3]}
kill -TERM "$worker1_pid"
deadline=$((SECONDS + grace))
while kill -0 "$worker1_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || { echo "FAIL: $w1 still running when the grace period ends"; exit 1; }
  sleep 0.2
done
wait "$worker1_pid" && rc=0 || rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: $w1 exited with $rc after SIGTERM"; exit 1; }
grep -q "deregistered from the cache service" "$work/worker1.log" ||
  { echo "FAIL: $w1 did not deregister on SIGTERM"; exit 1; }
# The cache service drops the worker: its slot series disappear.
deadline=$((SECONDS + 30))
while curl -sf "http://127.0.0.1:$cache_metrics/metrics" | grep -q "radixkv_cache_slots{.*worker=\"$w1\""; do
  ((SECONDS < deadline)) || { echo "FAIL: the cache service still exports $w1 after it deregistered"; exit 1; }
  sleep 0.2
done
echo "$w1: exit 0 on SIGTERM within the ${grace} s grace period, $(grep -o 'deregistered from the cache service.*' "$work/worker1.log"), gone from the cache service"
echo "prometheus live test ok"
