#!/bin/bash
# Starts the three radixkv processes on loopback, waits until each answers
# grpc.health.v1, reports it, and stops them all (SIGTERM) on exit or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN_DIR=${RUN_DIR:-$(mktemp -d /tmp/radixkv-run.XXXXXX)}
BASE_PORT=${BASE_PORT:-57000}
declare -A PORTS=([cache_service]=$((BASE_PORT)) [worker]=$((BASE_PORT + 1)) [router]=$((BASE_PORT + 2)))
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

echo "radixkv: logs in $RUN_DIR"
for name in cache_service worker router; do
  "bazel-bin/$name/$name" --bind_address=127.0.0.1 --grpc_port="${PORTS[$name]}" \
    --metrics_port=0 >"$RUN_DIR/$name.log" 2>&1 &
  pids+=($!)
done

/usr/bin/python3 - "$@" <<PY
import sys, time
sys.path.insert(0, "tests/python")
import grpc, radixkv_stubs
s = radixkv_stubs.generate("proto")
for name, port in (("cache_service", ${PORTS[cache_service]}), ("worker", ${PORTS[worker]}), ("router", ${PORTS[router]})):
    stub = s.health_pb2_grpc.HealthStub(grpc.insecure_channel("127.0.0.1:%d" % port))
    deadline = time.time() + 30
    while True:
        try:
            r = stub.Check(s.health_pb2.HealthCheckRequest(), timeout=1)
            if r.status == s.health_pb2.HealthCheckResponse.SERVING:
                break
        except grpc.RpcError:
            pass
        if time.time() > deadline:
            sys.exit("%s on port %d did not become healthy" % (name, port))
        time.sleep(0.1)
    print("  %-14s 127.0.0.1:%d  grpc.health.v1 SERVING" % (name, port))
print("radixkv: all three processes healthy")
PY
