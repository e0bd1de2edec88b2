#!/usr/bin/env bash
# CPU-machine half of the kernel validation (docs/development.md "GPU runs"):
# builds the GPU-machine binaries with Bazel and stages them in one folder
# for the device tool's carry list.
#
#   worker/kernels/hip/stage_device_suite.sh [OUT_DIR]   (default: build-gpu)
#
# Run it from the repository root. OUT_DIR (ignored by git) then holds
#   device-suite.tar.xz  bin/: gpu_attention_device_test (serving kernels),
#                        gpu_attention_device_test_persistent (plus the
#                        persistent wgmma kernel), ..._vdesc_swap (negative
#                        control), gpu_attention_benchmark; lib/: the Debian
#                        shared libraries they need (copy_shared_libs.sh).
#                        xz-compressed: the binaries are ~15 MB each and the
#                        device tool carries at most 64 MiB with the tree.
#   ptxas.log            registers / spills per kernel: read it before
#                        spending device time.
# run_device_suite.sh OUT_DIR unpacks the archive on the GPU machine; the
# binaries find cuBLAS in its /usr/local/cuda/lib64.
set -euo pipefail

OUT="${1:-build-gpu}"
PKG=worker/kernels/hip
BINARIES=(gpu_attention_device_test gpu_attention_device_test_persistent
          gpu_attention_device_test_vdesc_swap gpu_attention_benchmark)
targets=("//${PKG}:ptxas_log")
for b in "${BINARIES[@]}"; do targets+=("//${PKG}:${b}"); done
bazel build "${targets[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/bin"
for b in "${BINARIES[@]}"; do cp "bazel-bin/${PKG}/${b}" "${stage}/bin/"; done
"${PKG}/copy_shared_libs.sh" "${stage}/lib" "${stage}"/bin/*
chmod -R u+w "${stage}"

rm -rf "${OUT}"
mkdir -p "${OUT}"
tar -cf - -C "${stage}" bin lib | xz -T2 -9 >"${OUT}/device-suite.tar.xz"
install -m 644 "bazel-bin/${PKG}/ptxas.log" "${OUT}/ptxas.log"
du -sh "${OUT}"
