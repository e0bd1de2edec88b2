#include "model/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace radixkv::model {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", what));
}

// Reads an integer field; `required` fields must be present and non-null.
absl::Status ReadInt(const Json& j, const char* key, bool required,
                     int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Invalid(absl::StrCat("missing field '", key, "'"));
    return absl::OkStatus();
  }
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return Invalid(absl::StrCat("field '", key, "' is not an integer"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadDouble(const Json& j, const char* key, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return Invalid(absl::StrCat("field '", key, "' is not a number"));
  }
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return Invalid(absl::StrCat("field '", key, "' is not a boolean"));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

// Parses a rope dict: transformers-5 `rope_parameters` or transformers-4
// `rope_scaling` (which uses "type" in older checkpoints).
absl::Status ParseRopeDict(const Json& d, RopeConfig* rope) {
  if (!d.is_object()) return Invalid("rope parameters are not an object");
  for (const auto& [key, value] : d.items()) {
    if (key != "rope_type" && key != "type" && key != "rope_theta" &&
        key != "factor" && key != "low_freq_factor" &&
        key != "high_freq_factor" &&
        key != "original_max_position_embeddings") {
      return Invalid(
          absl::StrCat("rope parameter '", key, "' is not implemented"));
    }
  }
  std::string type = "default";
  if (auto it = d.find("rope_type"); it != d.end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (auto it2 = d.find("type"); it2 != d.end() && it2->is_string()) {
    type = it2->get<std::string>();
  }
  if (type == "default") {
    rope->type = RopeType::kDefault;
  } else if (type == "llama3") {
    rope->type = RopeType::kLlama3;
  } else {
    return Invalid(absl::StrCat("unsupported rope_type '", type, "'"));
  }
  if (absl::Status s = ReadDouble(d, "rope_theta", &rope->theta); !s.ok()) {
    return s;
  }
  if (rope->type == RopeType::kLlama3) {
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"}) {
      if (!d.contains(key)) {
        return Invalid(absl::StrCat("llama3 rope needs '", key, "'"));
      }
    }
    if (absl::Status s = ReadDouble(d, "factor", &rope->factor); !s.ok()) {
      return s;
    }
    if (absl::Status s =
            ReadDouble(d, "low_freq_factor", &rope->low_freq_factor);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            ReadDouble(d, "high_freq_factor", &rope->high_freq_factor);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadInt(d, "original_max_position_embeddings", true,
                                 &rope->original_max_position_embeddings);
        !s.ok()) {
      return s;
    }
    if (rope->factor <= 0 || rope->high_freq_factor <= rope->low_freq_factor ||
        rope->original_max_position_embeddings <= 0) {
      return Invalid("llama3 rope parameters out of range");
    }
  }
  return absl::OkStatus();
}

// The architectures the executors implement, by config.json `architectures`
// entry and `model_type` (docs/architecture.md, "Model families").
constexpr std::pair<const char*, const char*> kArchitectures[] = {
    {"LlamaForCausalLM", "llama"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen3ForCausalLM", "qwen3"},
};

// Keys the executors read, or that do not change the forward pass:
// transformers' PretrainedConfig bookkeeping, token ids, training-only
// settings (dropout, initializer_range, pretraining_tp: a sliced matmul
// with the same result) and generation defaults (the request's sampling
// parameters govern). Any other key is a feature we do not implement
// (MoE, soft-capping, quantization, other norms, ...) and is refused by
// name.
constexpr const char* kKnownKeys[] = {
    // read by ParseModelConfig
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "bos_token_id",
    "eos_token_id",
    "dtype",
    "torch_dtype",
    // read by ParseSlidingWindows
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "use_mrope",
    // no effect on the forward pass
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "transformers_version",
    "_name_or_path",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "pretraining_tp",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "is_decoder",
    "is_encoder_decoder",
    "add_cross_attention",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
    "chunk_size_feed_forward",
    "finetuning_task",
    "id2label",
    "label2id",
    "tokenizer_class",
    "prefix",
    "task_specific_params",
    "problem_type",
    // generation defaults of older config.json files
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
};

// INVALID_ARGUMENT naming the first key the executors do not implement.
absl::Status CheckKnownKeys(const Json& j) {
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnownKeys) known = known || key == k;
    if (!known) {
      return Invalid(
          absl::StrCat("field '", key,
                       "' is a feature radixkv's executors do not implement "
                       "(docs/architecture.md lists the accepted fields)"));
    }
  }
  return absl::OkStatus();
}

// The architecture must be one the executors implement; returns model_type.
absl::StatusOr<std::string> CheckArchitecture(const Json& j) {
  auto type = j.find("model_type");
  if (type == j.end() || !type->is_string()) {
    return Invalid("missing string field 'model_type'");
  }
  const std::string model_type = type->get<std::string>();
  const char* expected_architecture = nullptr;
  for (const auto& [architecture, t] : kArchitectures) {
    if (model_type == t) expected_architecture = architecture;
  }
  if (expected_architecture == nullptr) {
    return Invalid(absl::StrCat("model_type '", model_type,
                                "' is not supported (supported: llama, "
                                "qwen2, qwen3, mistral)"));
  }
  if (auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string()) {
      return Invalid("'architectures' must be a list of one name");
    }
    const std::string name = (*a)[0].get<std::string>();
    if (name != expected_architecture) {
      return Invalid(absl::StrCat(
          "architecture '", name, "' is not supported for model_type '",
          model_type, "' (supported: ", expected_architecture, ")"));
    }
  }
  return model_type;
}

// Fills c->sliding_window_by_layer the way transformers does:
//   - Mistral: every layer uses `sliding_window` when it is not null
//     (MistralModel: create_sliding_window_causal_mask for all layers);
//   - Qwen2 / Qwen3: `sliding_window` counts only with `use_sliding_window`
//     (Qwen2Config: sliding_window = None otherwise), and then layer i uses
//     it iff i >= max_window_layers (Qwen2Config.layer_types; default 28);
//   - an explicit `layer_types` list ("full_attention" /
//     "sliding_attention", one per layer) overrides the rule, as in
//     transformers 5, which writes that list into config.json;
//   - LLaMA has no window: a `sliding_window` there is refused, since
//     transformers' LlamaModel would ignore it and the checkpoint was
//     probably meant for something else.
// Requires c->model_type and c->num_hidden_layers.
absl::Status ParseSlidingWindows(const Json& j, ModelConfig* c) {
  const bool qwen = c->model_type == "qwen2" || c->model_type == "qwen3";
  if (!qwen && j.contains("use_sliding_window")) {
    return Invalid(absl::StrCat("field 'use_sliding_window' is not a ",
                                c->model_type, " field"));
  }
  bool use_sliding_window = !qwen;
  if (absl::Status s = ReadBool(j, "use_sliding_window", &use_sliding_window);
      !s.ok()) {
    return s;
  }
  int64_t window = 0;
  if (auto w = j.find("sliding_window"); w != j.end() && !w->is_null()) {
    if (c->model_type == "llama") {
      return Invalid(absl::StrCat("sliding_window ", w->dump(),
                                  " is not a llama field (LLaMA attends to "
                                  "the whole context)"));
    }
    if (absl::Status s = ReadInt(j, "sliding_window", true, &window); !s.ok()) {
      return s;
    }
    if (use_sliding_window && (window <= 0 || window > (int64_t{1} << 30))) {
      return Invalid(absl::StrCat("sliding_window out of range: ", window));
    }
    if (!use_sliding_window) window = 0;
  } else if (qwen && use_sliding_window) {
    return Invalid("use_sliding_window is true but sliding_window is null");
  }
  int64_t max_window_layers = 28;  // Qwen2Config / Qwen3Config default
  if (absl::Status s =
          ReadInt(j, "max_window_layers", false, &max_window_layers);
      !s.ok()) {
    return s;
  }
  const int n = c->num_hidden_layers;
  c->sliding_window_by_layer.assign(n, 0);
  if (auto t = j.find("layer_types"); t != j.end() && !t->is_null()) {
    if (!t->is_array() || static_cast<int>(t->size()) != n) {
      return Invalid(absl::StrCat("'layer_types' is not a list of ", n,
                                  " layer types (num_hidden_layers)"));
    }
    for (int i = 0; i < n; ++i) {
      const Json& e = (*t)[i];
      const std::string type = e.is_string() ? e.get<std::string>() : "";
      if (type == "sliding_attention") {
        if (window <= 0) {
          return Invalid(absl::StrCat(
              "layer type sliding_attention of layer ", i,
              " without a sliding_window (or with use_sliding_window false)"));
        }
        c->sliding_window_by_layer[i] = static_cast<int32_t>(window);
      } else if (type != "full_attention") {
        return Invalid(absl::StrCat("layer type ", e.dump(),
                                    " is not implemented (only "
                                    "full_attention and sliding_attention)"));
      }
    }
  } else if (window > 0) {
    for (int i = 0; i < n; ++i) {
      if (!qwen || i >= max_window_layers) {
        c->sliding_window_by_layer[i] = static_cast<int32_t>(window);
      }
    }
  }
  if (auto m = j.find("use_mrope");
      m != j.end() && m->is_boolean() && m->get<bool>()) {
    return Invalid("use_mrope (multimodal RoPE) is not implemented");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid("malformed JSON");

  ModelConfig c;
  absl::StatusOr<std::string> model_type = CheckArchitecture(j);
  if (!model_type.ok()) return model_type.status();
  c.model_type = *model_type;
  if (absl::Status s = CheckKnownKeys(j); !s.ok()) return s;
  int64_t v = 0;
  struct IntField {
    const char* key;
    int32_t* dst;
  };
  for (IntField f : {IntField{"vocab_size", &c.vocab_size},
                     IntField{"hidden_size", &c.hidden_size},
                     IntField{"intermediate_size", &c.intermediate_size},
                     IntField{"num_hidden_layers", &c.num_hidden_layers},
                     IntField{"num_attention_heads", &c.num_attention_heads}}) {
    if (absl::Status s = ReadInt(j, f.key, true, &v); !s.ok()) return s;
    if (v <= 0 || v > (int64_t{1} << 30)) {
      return Invalid(absl::StrCat("field '", f.key, "' out of range: ", v));
    }
    *f.dst = static_cast<int32_t>(v);
  }
  if (absl::Status s = ParseSlidingWindows(j, &c); !s.ok()) return s;
  v = c.num_attention_heads;
  if (absl::Status s = ReadInt(j, "num_key_value_heads", false, &v); !s.ok()) {
    return s;
  }
  c.num_key_value_heads = static_cast<int32_t>(v);
  if (c.num_key_value_heads <= 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    return Invalid(absl::StrCat("num_attention_heads ", c.num_attention_heads,
                                " not divisible by num_key_value_heads ",
                                c.num_key_value_heads));
  }
  v = c.hidden_size / c.num_attention_heads;
  if (absl::Status s = ReadInt(j, "head_dim", false, &v); !s.ok()) return s;
  c.head_dim = static_cast<int32_t>(v);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return Invalid(
        absl::StrCat("head_dim must be positive and even, got ", c.head_dim));
  }
  if (absl::Status s = ReadDouble(j, "rms_norm_eps", &c.rms_norm_eps);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadInt(j, "max_position_embeddings", false,
                               &c.max_position_embeddings);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadBool(j, "tie_word_embeddings", &c.tie_word_embeddings);
      !s.ok()) {
    return s;
  }
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string()) {
    const std::string act = it->get<std::string>();
    if (act != "silu" && act != "swish") {
      return Invalid(absl::StrCat("unsupported hidden_act '", act, "'"));
    }
  }
  c.qk_norm = c.model_type == "qwen3";  // Qwen3Attention q_norm / k_norm
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v bias, no o bias.
    c.o_bias = false;
  } else {  // LLaMA, Mistral, Qwen3: attention_bias on all four projections
    bool attention_bias = false;
    if (absl::Status s = ReadBool(j, "attention_bias", &attention_bias);
        !s.ok()) {
      return s;
    }
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  bool mlp_bias = false;
  if (absl::Status s = ReadBool(j, "mlp_bias", &mlp_bias); !s.ok()) return s;
  if (mlp_bias) return Invalid("mlp_bias is not supported");

  // RoPE: transformers 5 `rope_parameters`, else transformers 4 `rope_theta`
  // plus optional `rope_scaling`.
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (absl::Status s = ParseRopeDict(*it, &c.rope); !s.ok()) return s;
  } else {
    if (absl::Status s = ReadDouble(j, "rope_theta", &c.rope.theta); !s.ok()) {
      return s;
    }
    if (auto sc = j.find("rope_scaling"); sc != j.end() && !sc->is_null()) {
      Json d = *sc;
      if (d.is_object() && !d.contains("rope_theta")) {
        d["rope_theta"] = c.rope.theta;
      }
      if (absl::Status s = ParseRopeDict(d, &c.rope); !s.ok()) return s;
    }
  }
  if (c.rope.theta <= 0) return Invalid("rope_theta must be positive");

  v = -1;
  if (absl::Status s = ReadInt(j, "bos_token_id", false, &v); !s.ok()) {
    return s;
  }
  c.bos_token_id = static_cast<int32_t>(v);
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int32_t>());
    } else if (it->is_array()) {
      for (const Json& e : *it) {
        if (!e.is_number_integer()) return Invalid("eos_token_id list");
        c.eos_token_ids.push_back(e.get<int32_t>());
      }
    } else {
      return Invalid("eos_token_id is neither an integer nor a list");
    }
  }
  if (auto it = j.find("dtype"); it != j.end() && it->is_string()) {
    c.dtype = it->get<std::string>();
  } else if (auto it2 = j.find("torch_dtype");
             it2 != j.end() && it2->is_string()) {
    c.dtype = it2->get<std::string>();
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ss.str());
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat(path, ": ", c.status().message()));
  }
  return c;
}

}  // namespace radixkv::model
