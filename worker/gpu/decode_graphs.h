// Decode steps as CUDA/HIP graphs. A decode batch is padded to a batch
// bucket (1, 2, 4, ..., max_batch_size; padded rows are 0-length sequences
// whose K/V writes are skipped) and its context to a power-of-two context
// bucket, so that one captured graph serves every step of its (batch
// bucket, context bucket, output) key: the step's metadata lives in
// persistent device buffers the graph reads. The first step of a key runs
// eagerly (it does the lazy initialization of the kernels and BLAS, which
// must not happen during capture), the second is captured and replayed, and
// every later one replays.
#ifndef RADIXKV_WORKER_GPU_DECODE_GRAPHS_H_
#define RADIXKV_WORKER_GPU_DECODE_GRAPHS_H_

#include <compare>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace radixkv::worker::gpu {

// Smallest context bucket (tokens).
inline constexpr int32_t kMinContextBucket = 256;

// The smallest power of two >= v, starting from min_value (a power of two).
int32_t RoundUpPow2(int32_t v, int32_t min_value);

struct DecodeBucket {
  int32_t batch = 0;    // padded batch size
  int32_t context = 0;  // longest context the graph's attention covers
};

// The bucket of a decode step of `batch` sequences whose longest context is
// max_seq_len tokens (max_seq_len <= max_context_len): the batch rounded up
// to a power of two but at most max_batch_size, the context rounded up to a
// power of two >= kMinContextBucket but at most max_context_len's bucket.
DecodeBucket ChooseDecodeBucket(int32_t batch, int32_t max_seq_len,
                                int32_t max_batch_size,
                                int32_t max_context_len);

// Calls fn(batch_bucket, context_bucket) for every power-of-two pair up to
// the buckets of (max_batch_size, max_context_len): a superset of what
// ChooseDecodeBucket returns, for sizing per-bucket temporaries.
void ForEachDecodeBucket(int32_t max_batch_size, int32_t max_context_len,
                         absl::FunctionRef<void(int32_t, int32_t)> fn);

struct DecodeGraphKey {
  int32_t batch_bucket = 0;
  int32_t context_bucket = 0;
  int output = 0;  // StepOutput (step_metadata.h)
  auto operator<=>(const DecodeGraphKey&) const = default;
};

// The captured graphs, by key. Not thread-safe.
class DecodeGraphCache {
 public:
  DecodeGraphCache();
  ~DecodeGraphCache();  // destroys every graph
  DecodeGraphCache(const DecodeGraphCache&) = delete;
  DecodeGraphCache& operator=(const DecodeGraphCache&) = delete;

  // Runs the step of `key` on `stream` (a hipStream_t): `enqueue` enqueues
  // its kernels. First step of the key: enqueue runs eagerly. Second: it is
  // captured (the capture mode is thread-local), instantiated and the graph
  // launched. Later: the graph is launched. *replayed is set true when a
  // graph was launched and left unchanged otherwise. Errors: enqueue's,
  // INTERNAL / RESOURCE_EXHAUSTED from capture, instantiation or launch.
  absl::Status Run(const DecodeGraphKey& key, void* stream,
                   absl::FunctionRef<absl::Status()> enqueue, bool* replayed);

  // Destroys every graph and forgets which keys ran (the next step of each
  // key is eager again).
  void Clear();

  // Number of captured graphs.
  int size() const;

 private:
  struct Graphs;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_DECODE_GRAPHS_H_
