#include "model/checkpoint_tensors.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/rope.h"

namespace radixkv::model {
namespace {

constexpr char kInvFreqSuffix[] = ".self_attn.rotary_emb.inv_freq";

// The saved RoPE buffer must be the one we compute.
absl::Status CheckInvFreq(const ModelConfig& config,
                          const SafetensorsReader& reader,
                          const std::string& name) {
  const std::vector<float> expected = RopeInvFreq(config);
  absl::StatusOr<std::vector<float>> stored =
      reader.ReadFloat32(name, {static_cast<int64_t>(expected.size())});
  if (!stored.ok()) return stored.status();
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::abs((*stored)[i] - expected[i]) > 1e-6f * std::abs(expected[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name,
                       " differs from the RoPE frequencies of config.json "
                       "at index ",
                       i, ": ", (*stored)[i], " vs ", expected[i]));
    }
  }
  return absl::OkStatus();
}

// With tied embeddings a stored lm_head is only accepted as a copy.
absl::Status CheckTiedLmHead(const SafetensorsReader& reader) {
  absl::StatusOr<const SafetensorsTensor*> head = reader.Find("lm_head.weight");
  absl::StatusOr<const SafetensorsTensor*> embed =
      reader.Find("model.embed_tokens.weight");
  if (!head.ok() || !embed.ok()) return absl::OkStatus();
  if ((*head)->num_bytes != (*embed)->num_bytes ||
      (*head)->dtype_name != (*embed)->dtype_name ||
      std::memcmp((*head)->data, (*embed)->data, (*head)->num_bytes) != 0) {
    return absl::InvalidArgumentError(
        "tensor lm_head.weight differs from model.embed_tokens.weight but "
        "config.json sets tie_word_embeddings: the executor would use the "
        "embedding");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ConsumedTensorNames(const ModelConfig& c) {
  std::vector<std::string> names = {"model.embed_tokens.weight",
                                    "model.norm.weight"};
  if (!c.tie_word_embeddings) names.push_back("lm_head.weight");
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    for (const char* t :
         {"input_layernorm.weight", "post_attention_layernorm.weight",
          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight",
          "mlp.down_proj.weight"}) {
      names.push_back(p + t);
    }
    if (c.qkv_bias) {
      for (const char* t : {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                            "self_attn.v_proj.bias"}) {
        names.push_back(p + t);
      }
    }
    if (c.o_bias) names.push_back(p + "self_attn.o_proj.bias");
    if (c.qk_norm) {
      names.push_back(p + "self_attn.q_norm.weight");
      names.push_back(p + "self_attn.k_norm.weight");
    }
  }
  return names;
}

absl::Status CheckCheckpointTensors(const ModelConfig& config,
                                    const SafetensorsReader& reader) {
  const std::vector<std::string> consumed = ConsumedTensorNames(config);
  for (const std::string& name : consumed) {
    if (!reader.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("checkpoint lacks tensor ", name,
                                              " (model_type ",
                                              config.model_type, ")"));
    }
  }
  const absl::flat_hash_set<std::string> expected(consumed.begin(),
                                                  consumed.end());
  for (const std::string& name : reader.TensorNames()) {
    if (expected.contains(name)) continue;
    if (absl::EndsWith(name, kInvFreqSuffix)) {
      if (absl::Status s = CheckInvFreq(config, reader, name); !s.ok()) {
        return s;
      }
      continue;
    }
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      if (absl::Status s = CheckTiedLmHead(reader); !s.ok()) return s;
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint tensor ", name, " is not used by the ", config.model_type,
        " executor: the checkpoint computes something radixkv does not "
        "implement (docs/architecture.md, \"Model families\")"));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::model
