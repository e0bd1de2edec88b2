#!/usr/bin/env bash
# CPU-machine half: builds the GPU backend binaries and the cluster binaries
# with Bazel and stages them for the GPU machine in RUN_DIR (default
# .gpu-run, ignored by .gitignore; name it in the device tool's carry
# list), with the Debian shared libraries they need (xz-compressed: the
# device tool carries at most 64 MiB) and a copy of shared/golden.
#   worker/gpu/stage_gpu_run.sh [RUN_DIR] [SHARED_DIR]
set -euo pipefail
R="${1:-.gpu-run}"
SHARED="${2:-../shared}"
bazel build //worker/gpu:worker_gpu //worker/gpu:gpu_model_executor_device_test \
  //worker/gpu:gpu_model_family_device_test \
  //worker/gpu:gpu_model_benchmark //worker/gpu:make_random_checkpoint \
  //worker/gpu:greedy_text_client \
  //router:router //tools/workload:workload_runner //tools/local_cluster \
  //tools/fork_memory:fork_memory_benchmark \
  //cache_service:cache_service //model/tokenizer:libradixkv_sentencepiece.so
rm -rf "${R}"
mkdir -p "${R}"/bin/{worker,router,cache_service,tools/workload,tools/local_cluster,tools/fork_memory} \
  "${R}/lib" "${R}/shared"
cp bazel-bin/worker/gpu/worker_gpu "${R}/bin/worker/worker"
cp bazel-bin/worker/gpu/{gpu_model_executor_device_test,gpu_model_family_device_test,gpu_model_benchmark,make_random_checkpoint,greedy_text_client} "${R}/bin/"
cp bazel-bin/router/router "${R}/bin/router/"
cp bazel-bin/tools/workload/workload_runner "${R}/bin/tools/workload/"
cp bazel-bin/tools/local_cluster/local_cluster "${R}/bin/tools/local_cluster/"
# (sends token ids only: no tokenizer plug-in next to it)
cp bazel-bin/tools/fork_memory/fork_memory_benchmark "${R}/bin/tools/fork_memory/"
cp bazel-bin/cache_service/cache_service "${R}/bin/cache_service/"
# The tokenizer plug-in is found next to each executable.
for d in worker router tools/workload tools/local_cluster; do
  cp bazel-bin/model/tokenizer/libradixkv_sentencepiece.so "${R}/bin/${d}/"
done
cp bazel-bin/model/tokenizer/libradixkv_sentencepiece.so "${R}/bin/"
find "${R}/bin" -type f -print0 |
  xargs -0 worker/kernels/hip/copy_shared_libs.sh "${R}/lib"
tar -cJf "${R}/lib.tar.xz" -C "${R}/lib" . && rm -rf "${R}/lib"
# The binaries too (~70 MB uncompressed with the CUDA runtime linked in).
tar -cf - -C "${R}" bin | xz -T2 -6 >"${R}/bin.tar.xz" && rm -rf "${R}/bin"
cp -r "${SHARED}/golden" "${R}/shared/" && rm -f "${R}/shared/golden/corpus.txt"
# The model-family golden (tools/golden/make_model_family_golden.py), when
# generated: gpu_model_family_device_test reads RADIXKV_MODEL_FAMILY_DIR.
if [[ -d worker/testdata/model_families ]]; then
  cp -r worker/testdata/model_families "${R}/model_families"
fi
# The commit the binaries were built from (the GPU machine has no history).
git describe --always --dirty >"${R}/commit.txt"
chmod -R u+w "${R}"
du -sh "${R}"
