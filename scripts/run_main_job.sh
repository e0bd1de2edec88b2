#!/bin/bash
# README command 1: installs what is missing, builds radixkv and runs the main
# job on the embedded default model through the C++ launcher
# (tools/local_cluster/local_cluster_main.cc): redis-server on a private port and dir, the
# cache service journaling to it, two CPU workers, the router, all on
# loopback; health checks; the workload runner (shared-prefix, multi-turn,
# document-qa, compared per placement policy and with the cache off); a
# report. Everything it starts is stopped on exit, also on Ctrl-C.
# Extra arguments go to the launcher (see `bazel-bin/tools/local_cluster/local_cluster
# --help`); arguments after `--` go to the workload runner, e.g.
#   scripts/run_main_job.sh -- --workloads=multi-turn --json=/tmp/run.json
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh run
# The launcher's data dependencies are every process it starts.
bazel build //tools/local_cluster
exec bazel-bin/tools/local_cluster/local_cluster "$@"
