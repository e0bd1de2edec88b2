#!/bin/bash
# README command 1: installs what is missing, builds radixkv and runs the main
# job on the embedded default model: a local cluster on loopback (redis,
# cache service, workers, router), a bounded workload, a report. Everything it
# starts is stopped on exit, also on Ctrl-C. Extra arguments go to the
# launcher (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
bazel build //cache_service //worker //router
exec scripts/local_cluster.sh "$@"
