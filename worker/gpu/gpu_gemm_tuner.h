// GemmTuner: picks, per GEMM shape, the fastest of several implementations
// of GpuGemm's C[m, n] (fp32, row-major) = A[m, k] W[n, k]^T + beta C by
// timing them once on the device (the approach of TensorRT-LLM's GEMM
// plugin profiler and of cuBLASLt's documented autotuning: ask
// cublasLtMatmulAlgoGetHeuristic for candidates, time them, keep the best):
//   - the vendor GemmEx (gpu_blas.h), what GpuGemm runs by default;
//   - the weight-streaming kernel of model_kernels.h (m <= 16);
//   - cuBLASLt's heuristic algorithms for the shape, and split-K variants
//     (2, 4, 8, 16 slices of K, reduced in fp32 in the BLAS workspace) of
//     those that support it: at decode-sized m a 128-wide tile grid over n
//     leaves most of the 132 SMs idle, split-K gives them work
//     (docs/kernel-notes.md "Decode GEMMs"). NVIDIA only: the AMD build
//     has no hipBLASLt and times the first two.
// Shapes are tuned when m is a power of two <= kMaxTunedRows (the decode
// graphs' batch buckets, decode_graphs.h), never while the stream is being
// captured; other shapes run the caller's default. Not thread-safe (one
// stream, like the executor).
#ifndef RADIXKV_WORKER_GPU_GPU_GEMM_TUNER_H_
#define RADIXKV_WORKER_GPU_GPU_GEMM_TUNER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/gpu/gpu_blas.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

// Largest m that is tuned.
inline constexpr int64_t kMaxTunedRows = 512;

// The vendor GEMM of GpuGemm: c = a w^T + beta c (row-major, fp32 c),
// a and w of `dtype`. Returns the BLAS status.
BlasStatus RunGemmEx(BlasHandle blas, DType dtype, const void* a, const void* w,
                     float* c, int64_t m, int64_t n, int64_t k, float beta);

class GemmTuner {
 public:
  GemmTuner();
  ~GemmTuner();
  GemmTuner(const GemmTuner&) = delete;
  GemmTuner& operator=(const GemmTuner&) = delete;

  // Binds the stream and GemmEx handle; creates the cuBLASLt handle on
  // NVIDIA builds. INTERNAL when that fails.
  absl::Status Init(hipStream_t stream, BlasHandle blas, DType dtype);
  // The BLAS workspace (shared with GemmEx: one stream) and a scratch of
  // `floats` fp32 elements the candidates of beta != 0 shapes write while
  // being timed (the executor binds its logits buffer, which a step writes
  // only after its last layer); shapes with m * n > floats and beta != 0
  // are not tuned.
  void BindWorkspace(void* workspace, size_t bytes);
  void BindScratch(float* scratch, size_t floats);

  // Enqueues c = a w^T + beta c with the shape's tuned implementation,
  // tuning it first when it is new and tunable (synchronizes the stream:
  // eager steps only). Returns false, having enqueued nothing, for a shape
  // that is not tuned: the caller runs its default. INTERNAL when the
  // chosen implementation fails to launch.
  absl::StatusOr<bool> Run(const void* a, const void* w, float* c, int64_t m,
                           int64_t n, int64_t k, float beta);

  // One line per tuned shape: "m n k beta: choice us (default us, N
  // candidates)", for benchmark logs.
  std::string Describe() const;

  // cuBLASLt state (NVIDIA builds; empty on AMD), defined in the .cc.
  struct Lt;

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;
  absl::StatusOr<Plan*> Tune(const Key& key, const void* a, const void* w,
                             float* c, float beta);

  hipStream_t stream_ = nullptr;
  BlasHandle blas_ = nullptr;
  DType dtype_ = DType::kBF16;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  std::unique_ptr<Lt> lt_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_GEMM_TUNER_H_
