#include "worker/gpu/decode_graphs.h"

#include <algorithm>
#include <map>

#include "worker/gpu/gpu_runtime_compat.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {

int32_t RoundUpPow2(int32_t v, int32_t min_value) {
  int32_t r = min_value;
  while (r < v) r *= 2;
  return r;
}

DecodeBucket ChooseDecodeBucket(int32_t batch, int32_t max_seq_len,
                                int32_t max_batch_size,
                                int32_t max_context_len) {
  DecodeBucket b;
  b.batch = std::min(RoundUpPow2(batch, 1), max_batch_size);
  b.context = std::min(RoundUpPow2(max_seq_len, kMinContextBucket),
                       RoundUpPow2(max_context_len, kMinContextBucket));
  return b;
}

void ForEachDecodeBucket(int32_t max_batch_size, int32_t max_context_len,
                         absl::FunctionRef<void(int32_t, int32_t)> fn) {
  for (int32_t bb = 1; bb <= RoundUpPow2(max_batch_size, 1); bb *= 2) {
    for (int32_t cb = kMinContextBucket;
         cb <= RoundUpPow2(max_context_len, kMinContextBucket); cb *= 2) {
      fn(bb, cb);
    }
  }
}

struct DecodeGraphCache::Graphs {
  std::map<DecodeGraphKey, hipGraphExec_t> exec;
  // Steps run per key while it had no graph.
  std::map<DecodeGraphKey, int> seen;
};

DecodeGraphCache::DecodeGraphCache() : graphs_(std::make_unique<Graphs>()) {}

DecodeGraphCache::~DecodeGraphCache() { Clear(); }

void DecodeGraphCache::Clear() {
  for (auto& [key, exec] : graphs_->exec) hipGraphExecDestroy(exec);
  graphs_->exec.clear();
  graphs_->seen.clear();
}

int DecodeGraphCache::size() const {
  return static_cast<int>(graphs_->exec.size());
}

absl::Status DecodeGraphCache::Run(const DecodeGraphKey& key, void* stream,
                                   absl::FunctionRef<absl::Status()> enqueue,
                                   bool* replayed) {
  hipStream_t s = static_cast<hipStream_t>(stream);
  auto it = graphs_->exec.find(key);
  if (it == graphs_->exec.end() && graphs_->seen[key]++ >= 1) {
    hipGraph_t graph = nullptr;
    RADIXKV_RETURN_IF_ERROR(
        RuntimeError(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal),
                     "begin capture"));
    absl::Status st = enqueue();
    hipError_t end = hipStreamEndCapture(s, &graph);
    RADIXKV_RETURN_IF_ERROR(st);
    RADIXKV_RETURN_IF_ERROR(RuntimeError(end, "end capture"));
    hipGraphExec_t exec = nullptr;
    hipError_t inst = hipGraphInstantiateWithFlags(&exec, graph, 0);
    hipGraphDestroy(graph);
    RADIXKV_RETURN_IF_ERROR(RuntimeError(inst, "graph instantiate"));
    it = graphs_->exec.emplace(key, exec).first;
  }
  if (it == graphs_->exec.end()) return enqueue();
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipGraphLaunch(it->second, s), "graph"));
  *replayed = true;
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
