#!/usr/bin/env bash
# Builds the GPU kernel library, the device test and the benchmark with plain
# nvcc (no Bazel), for NVIDIA sm_90a (H100/H200).
#
#   worker/kernels/hip/build_gpu_binaries.sh [OUT_DIR]   (default: build-gpu)
#
# Run it from the repository root on a machine that has /usr/local/cuda/bin/
# nvcc and Debian's Abseil (the CI/dev machine). The outputs are
#   OUT_DIR/gpu_attention_device_test   float64-reference validation
#   OUT_DIR/gpu_attention_benchmark     ceilings + kernel table
#   OUT_DIR/lib/                        the Abseil shared libraries they need
#   OUT_DIR/ptxas.log                   registers / spills per kernel
# The binaries find lib/ through an $ORIGIN rpath and cuBLAS in
# /usr/local/cuda/lib64, so OUT_DIR can be carried to the GPU machine as is
# (docs/development.md "GPU runs"). Override the compiler with NVCC=..., the
# target with GPU_ARCH_FLAGS=....
set -euo pipefail

OUT="${1:-build-gpu}"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
ARCH="${GPU_ARCH_FLAGS:--gencode arch=compute_90a,code=sm_90a}"
SRC=worker/kernels/hip
mkdir -p "${OUT}/obj" "${OUT}/lib"

COMMON=(-std=c++20 -O3 -I. -lineinfo ${ARCH} -Xcompiler -Wall
        -diag-suppress 177)
KERNELS=(kv_cache_ops paged_decode extend_attention)

: >"${OUT}/ptxas.log"
pids=()
for k in "${KERNELS[@]}"; do
  "${NVCC}" "${COMMON[@]}" -x cu -Xptxas -v -c "${SRC}/${k}.hip" \
    -o "${OUT}/obj/${k}.o" 2>"${OUT}/obj/${k}.ptxas" &
  pids+=($!)
done
"${NVCC}" "${COMMON[@]}" -x c++ -c "${SRC}/gpu_attention.cc" \
  -o "${OUT}/obj/gpu_attention.o"
"${NVCC}" "${COMMON[@]}" -x cu -c "${SRC}/gpu_attention_device_test.hip" \
  -o "${OUT}/obj/gpu_attention_device_test.o"
"${NVCC}" "${COMMON[@]}" -x cu -c "${SRC}/gpu_attention_benchmark.hip" \
  -o "${OUT}/obj/gpu_attention_benchmark.o"
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    cat "${OUT}/obj/${KERNELS[$i]}.ptxas" >&2
    exit 1
  fi
  cat "${OUT}/obj/${KERNELS[$i]}.ptxas" >>"${OUT}/ptxas.log"
done

LIB_OBJS=()
for k in "${KERNELS[@]}" gpu_attention; do LIB_OBJS+=("${OUT}/obj/${k}.o"); done
ABSL=(-labsl_status -labsl_statusor -labsl_strings -labsl_cord
      -labsl_str_format_internal -labsl_int128 -labsl_throw_delegate
      -labsl_raw_logging_internal)
LINK=(${ARCH} -Xlinker "-rpath,\$ORIGIN/lib:/usr/local/cuda/lib64")
"${NVCC}" "${LINK[@]}" "${OUT}/obj/gpu_attention_device_test.o" \
  "${LIB_OBJS[@]}" "${ABSL[@]}" -o "${OUT}/gpu_attention_device_test"
"${NVCC}" "${LINK[@]}" "${OUT}/obj/gpu_attention_benchmark.o" \
  "${LIB_OBJS[@]}" "${ABSL[@]}" -lcublas -o "${OUT}/gpu_attention_benchmark"

# Carry the Abseil shared libraries (Debian) next to the binaries.
for bin in gpu_attention_device_test gpu_attention_benchmark; do
  ldd "${OUT}/${bin}" | awk '/libabsl/ {print $3}' | while read -r so; do
    [ -e "${OUT}/lib/$(basename "${so}")" ] || cp -L "${so}" "${OUT}/lib/"
  done
done
echo "built ${OUT}/gpu_attention_device_test ${OUT}/gpu_attention_benchmark"
