#!/bin/bash
# Copies radixkv binaries and the shared libraries they load (found with ldd)
# into an image staging folder:
#   collect_runtime_libs.sh OUT_DIR BINARY...
#   -> OUT_DIR/bin/<binary>, OUT_DIR/lib/<soname>
# The C runtime (glibc, libstdc++, libgcc_s) comes from the runtime base image
# (Debian 12 or a newer Ubuntu for the GPU variants; glibc is backward
# compatible) and is not copied; neither are GPU driver/runtime libraries
# (libcuda, libcudart, libcublas*, libamdhip64, libhipblas, librocblas), which
# the CUDA/ROCm base images and the device plugin provide.
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 OUT_DIR BINARY..." >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/bin" "$out/lib"
# sonames provided by the base image or the GPU stack, never carried
skip='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libamdhip64|libhipblas|librocblas|libhsa-runtime64)\.so'
for bin in "$@"; do
  install -m 0755 "$bin" "$out/bin/$(basename "$bin")"
  while read -r soname path; do
    [[ -z "$path" || "$soname" =~ $skip ]] && continue
    cp -L "$path" "$out/lib/$soname"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
echo "collected $# binaries, $(ls "$out/lib" | wc -l) libraries into $out"
