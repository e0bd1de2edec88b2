#include "worker/model/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace radixkv::worker {
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

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid("malformed JSON");

  ModelConfig c;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    c.model_type = it->get<std::string>();
  }
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
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v bias, no o bias.
    c.o_bias = false;
  } else {
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

}  // namespace radixkv::worker
