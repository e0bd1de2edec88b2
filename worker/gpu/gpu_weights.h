// The model's weights on the device, uploaded once by GpuModelExecutor.
// Matrices are stored row-major in the compute dtype, with the projections
// that read the same input fused along rows (one GEMM each): qkv is
// [(Hq + 2 Hkv) D, H] (q_proj, k_proj, v_proj rows) and gate_up [2 I, H]
// (gate_proj rows, then up_proj). Norm weights, biases and the RoPE
// inverse frequencies stay fp32.
#ifndef RADIXKV_WORKER_GPU_GPU_WEIGHTS_H_
#define RADIXKV_WORKER_GPU_GPU_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

class DeviceMemory;

// One decoder layer (HF LlamaDecoderLayer); device pointers.
struct GpuLayerWeights {
  float* input_norm = nullptr;  // [H]
  float* post_norm = nullptr;   // [H]
  void* qkv = nullptr;          // [(Hq + 2 Hkv) D, H]
  float* qkv_bias = nullptr;    // [(Hq + 2 Hkv) D], config.qkv_bias only
  void* o = nullptr;            // [H, Hq D]
  float* o_bias = nullptr;      // [H], config.o_bias only
  float* q_norm = nullptr;      // [D], config.qk_norm only (Qwen3)
  float* k_norm = nullptr;      // [D], config.qk_norm only
  void* gate_up = nullptr;      // [2 I, H]
  void* down = nullptr;         // [H, I]
};

struct GpuWeights {
  void* embed = nullptr;        // [V, H]
  void* lm_head = nullptr;      // [V, H]; == embed with tied embeddings
  float* final_norm = nullptr;  // [H]
  float* inv_freq = nullptr;    // [D / 2], model::RopeInvFreq(config)
  std::vector<GpuLayerWeights> layers;
};

// Opens the safetensors checkpoint in `model_dir`, refuses it unless
// model::CheckCheckpointTensors(config, reader) passes, and uploads every
// tensor the forward reads, converted to `dtype` (matrices) or fp32 (norms,
// biases) on the host where the checkpoint stores another type or shape.
// Allocations come from `memory` and are added to *bytes. Errors: those of the
// reader and of model::CheckCheckpointTensors (NOT_FOUND, INVALID_ARGUMENT),
// RESOURCE_EXHAUSTED / INTERNAL from the device.
absl::StatusOr<GpuWeights> UploadWeights(const model::ModelConfig& config,
                                         const std::string& model_dir,
                                         DType dtype, DeviceMemory* memory,
                                         int64_t* bytes);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_WEIGHTS_H_
