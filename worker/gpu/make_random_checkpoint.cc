// Writes a random-weight LLaMA-style checkpoint in the Hugging Face format
// (config.json in the transformers 5 form + model.safetensors) for GPU
// benchmarks and tests, e.g. the benchmark model of docs/perf.md
// "GPU model executor (H200)":
//
//   make_random_checkpoint --out=/tmp/bench-llama --layers=16 --hidden=2048
//       --heads=32 --kv_heads=8 --head_dim=64 --intermediate=5632
//       --vocab=32000 --dtype=bf16
//
// Weights: linear layers uniform in +-sqrt(3) * std with std =
// init_std (HF initializer_range), norms 1 + uniform(+-0.1), from a
// SplitMix64 stream seeded by --seed (reproducible, no RNG library). No
// tokenizer is written (benchmarks feed token ids).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/numeric_types.h"

ABSL_FLAG(std::string, out, "", "Output directory (created).");
ABSL_FLAG(int, layers, 16, "num_hidden_layers");
ABSL_FLAG(int, hidden, 2048, "hidden_size");
ABSL_FLAG(int, heads, 32, "num_attention_heads");
ABSL_FLAG(int, kv_heads, 8, "num_key_value_heads");
ABSL_FLAG(int, head_dim, 64, "head_dim");
ABSL_FLAG(int, intermediate, 5632, "intermediate_size");
ABSL_FLAG(int, vocab, 32000, "vocab_size");
ABSL_FLAG(int, max_positions, 8192, "max_position_embeddings");
ABSL_FLAG(std::string, dtype, "bf16", "bf16 or f32");
ABSL_FLAG(double, init_std, 0.02, "std of the linear weights");
ABSL_FLAG(uint64_t, seed, 1, "random seed");

namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float center;  // 0 for linear weights, 1 for norms
  float half_width;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  const int L = absl::GetFlag(FLAGS_layers), H = absl::GetFlag(FLAGS_hidden);
  const int Hq = absl::GetFlag(FLAGS_heads),
            Hkv = absl::GetFlag(FLAGS_kv_heads);
  const int D = absl::GetFlag(FLAGS_head_dim);
  const int I = absl::GetFlag(FLAGS_intermediate);
  const int V = absl::GetFlag(FLAGS_vocab);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (out.empty() || (dtype != "bf16" && dtype != "f32") || L < 1 || H < 1 ||
      Hq < 1 || Hkv < 1 || Hq % Hkv != 0 || D < 2 || D % 2 != 0 || I < 1 ||
      V < 1) {
    std::fprintf(
        stderr,
        "usage: make_random_checkpoint --out=DIR [--layers ...] "
        "(heads divisible by kv_heads, even head_dim, dtype bf16|f32)\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  const float w =
      static_cast<float>(std::sqrt(3.0) * absl::GetFlag(FLAGS_init_std));
  std::vector<Tensor> tensors;
  tensors.push_back({"model.embed_tokens.weight", {V, H}, 0, w});
  for (int l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    tensors.push_back({p + "input_layernorm.weight", {H}, 1, 0.1f});
    tensors.push_back({p + "self_attn.q_proj.weight", {Hq * D, H}, 0, w});
    tensors.push_back({p + "self_attn.k_proj.weight", {Hkv * D, H}, 0, w});
    tensors.push_back({p + "self_attn.v_proj.weight", {Hkv * D, H}, 0, w});
    tensors.push_back({p + "self_attn.o_proj.weight", {H, Hq * D}, 0, w});
    tensors.push_back({p + "post_attention_layernorm.weight", {H}, 1, 0.1f});
    tensors.push_back({p + "mlp.gate_proj.weight", {I, H}, 0, w});
    tensors.push_back({p + "mlp.up_proj.weight", {I, H}, 0, w});
    tensors.push_back({p + "mlp.down_proj.weight", {H, I}, 0, w});
  }
  tensors.push_back({"model.norm.weight", {H}, 1, 0.1f});
  tensors.push_back({"lm_head.weight", {V, H}, 0, w});

  const int eb = dtype == "bf16" ? 2 : 4;
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    header[t.name] = {{"dtype", dtype == "bf16" ? "BF16" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n * eb}}};
    offset += n * eb;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  std::ofstream f(out + "/model.safetensors", std::ios::binary);
  const uint64_t len = text.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  uint64_t state = absl::GetFlag(FLAGS_seed);
  std::vector<char> buf;
  for (const Tensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    buf.resize(static_cast<size_t>(n) * eb);
    for (int64_t i = 0; i < n; ++i) {
      const double u =
          static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53 * 2 - 1;
      const float v = t.center + t.half_width * static_cast<float>(u);
      if (eb == 2) {
        const radixkv::worker::bf16_t b = radixkv::worker::FloatToBf16(v);
        std::memcpy(&buf[i * 2], &b.bits, 2);
      } else {
        std::memcpy(&buf[i * 4], &v, 4);
      }
    }
    f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  if (!f.good()) {
    std::fprintf(stderr, "write failed: %s\n", out.c_str());
    return 1;
  }
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", V},
      {"hidden_size", H},
      {"intermediate_size", I},
      {"num_hidden_layers", L},
      {"num_attention_heads", Hq},
      {"num_key_value_heads", Hkv},
      {"head_dim", D},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"max_position_embeddings", absl::GetFlag(FLAGS_max_positions)},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
      {"tie_word_embeddings", false},
      {"attention_bias", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"dtype", dtype == "bf16" ? "bfloat16" : "float32"}};
  std::ofstream(out + "/config.json") << config.dump(2) << "\n";
  std::printf("wrote %s: %zu tensors, %.1f MiB\n", out.c_str(), tensors.size(),
              offset / 1048576.0);
  return 0;
}
