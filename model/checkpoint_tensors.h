// CheckCheckpointTensors: the loaders' fail-closed rule for weights. A
// checkpoint may hold exactly the tensors the LLaMA-family executors
// consume for its config; a tensor they would not read (q_norm/k_norm on a
// non-Qwen3 model, MoE experts, a quantization scale, ...) means the
// checkpoint computes something we do not, so it is refused instead of
// silently ignored.
#ifndef RADIXKV_MODEL_CHECKPOINT_TENSORS_H_
#define RADIXKV_MODEL_CHECKPOINT_TENSORS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "model/safetensors_reader.h"

namespace radixkv::model {

// Names of the tensors the executors read for `config`, in load order:
// model.embed_tokens.weight, model.norm.weight, lm_head.weight (untied
// only), and per layer l `model.layers.l.` + input_layernorm.weight,
// post_attention_layernorm.weight, self_attn.{q,k,v,o}_proj.weight (+ q/k/v
// bias with config.qkv_bias, o bias with config.o_bias,
// self_attn.{q,k}_norm.weight with config.qk_norm),
// mlp.{gate,up,down}_proj.weight.
std::vector<std::string> ConsumedTensorNames(const ModelConfig& config);

// OK when `reader` holds every consumed tensor and nothing else, except
// for two tensors that carry no information of their own and are checked
// instead of read: `model.layers.l.self_attn.rotary_emb.inv_freq` (a buffer
// older transformers versions saved; it must equal RopeInvFreq(config) to
// 1e-6 relative) and, with tied embeddings, an `lm_head.weight` whose bytes
// equal model.embed_tokens.weight's. NOT_FOUND naming the first consumed
// tensor that is missing; INVALID_ARGUMENT naming the first tensor that is
// not consumed.
absl::Status CheckCheckpointTensors(const ModelConfig& config,
                                    const SafetensorsReader& reader);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_CHECKPOINT_TENSORS_H_
