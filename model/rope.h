// Rotary position embedding (RoPE) inverse frequencies of a LLaMA-family
// model, shared by the CPU (worker/cpu/cpu_model_executor.cc) and GPU
// (worker/gpu/gpu_model_executor.cc) executors.
#ifndef RADIXKV_MODEL_ROPE_H_
#define RADIXKV_MODEL_ROPE_H_

#include <vector>

#include "model/model_config.h"

namespace radixkv::model {

// Returns the RoPE inverse frequencies inv_freq[D/2] (float32, radians per
// token position; D = config.head_dim), exactly as Hugging Face transformers
// computes them in float32:
//   - default (RoFormer, Su et al. 2021, arXiv:2104.09864):
//       inv_freq[i] = 1 / theta ** (2i / D), the power taken in double and
//       rounded to float32 (torch's float32 pow; at most 1 ulp apart);
//   - llama3 (Llama 3.1 frequency smoothing; transformers
//     modeling_rope_utils._compute_llama3_parameters): with
//     wavelen = 2*pi / inv_freq[i], low/high_freq_wavelen =
//     original_max_position_embeddings / low/high_freq_factor, frequencies
//     with wavelen > low_freq_wavelen are divided by `factor`, those with
//     wavelen < high_freq_wavelen are kept, and the ones in between are
//     interpolated with smooth = (original_max_position_embeddings / wavelen
//     - low_freq_factor) / (high_freq_factor - low_freq_factor) as
//     (1 - smooth) * f / factor + smooth * f;
// every operation rounded to float32 as torch does. No errors: the config is
// validated by LoadModelConfig (head_dim even, rope_type default or llama3).
std::vector<float> RopeInvFreq(const ModelConfig& config);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_ROPE_H_
