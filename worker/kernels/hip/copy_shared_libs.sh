#!/usr/bin/env bash
# Copies the shared libraries that the given binaries load (ldd) into
# LIB_DIR, except those every GPU machine has: glibc (libc, libm, libdl,
# librt, libpthread, the loader), libstdc++, libgcc_s, and the CUDA
# libraries of /usr/local/cuda. What is left are the Debian packages' (Abseil,
# gRPC, ...), which the GPU machine (another distribution) lacks.
#
#   worker/kernels/hip/copy_shared_libs.sh LIB_DIR BINARY...
set -euo pipefail
lib_dir="$1"
shift
mkdir -p "${lib_dir}"
for bin in "$@"; do ldd "${bin}"; done |
  awk '/=>/ {print $3}' | sort -u |
  grep -Ev 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so|/usr/local/cuda' |
  while read -r so; do cp -L "${so}" "${lib_dir}/"; done
