#include "model/rope.h"

#include <cmath>
#include <cstdint>

namespace radixkv::model {

std::vector<float> RopeInvFreq(const ModelConfig& c) {
  const int32_t half = c.head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int32_t i = 0; i < half; ++i) {
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    const float p = static_cast<float>(
        std::pow(c.rope.theta, static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / p;
  }
  if (c.rope.type != RopeType::kLlama3) return inv_freq;
  const float factor = static_cast<float>(c.rope.factor);
  const float low = static_cast<float>(c.rope.low_freq_factor);
  const double old_ctx =
      static_cast<double>(c.rope.original_max_position_embeddings);
  const float low_freq_wavelen =
      static_cast<float>(old_ctx / c.rope.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(old_ctx / c.rope.high_freq_factor);
  const float two_pi = static_cast<float>(2 * M_PI);
  const float old_ctx_f = static_cast<float>(old_ctx);
  const float high_minus_low =
      static_cast<float>(c.rope.high_freq_factor - c.rope.low_freq_factor);
  for (int32_t i = 0; i < half; ++i) {
    const float f = inv_freq[i];
    const float wavelen = two_pi / f;
    float llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = (old_ctx_f / wavelen - low) / high_minus_low;
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const bool medium =
        !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) llama = smoothed;
    inv_freq[i] = llama;
  }
  return inv_freq;
}

}  // namespace radixkv::model
