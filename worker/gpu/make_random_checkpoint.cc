// Writes a random-weight LLaMA-style checkpoint in the Hugging Face format
// (config.json in the transformers 5 form + model.safetensors) for GPU
// benchmarks and tests, e.g. gpu_model_benchmark's default model:
//
//   make_random_checkpoint --out=/tmp/bench-llama --layers=16 --hidden=2048
//       --heads=32 --kv_heads=8 --head_dim=64 --intermediate=5632
//       --vocab=32000 --dtype=bf16
//
// Weights: linear layers uniform in +-sqrt(3) * std with std =
// init_std (HF initializer_range), norms 1 + uniform(+-0.1), from a
// SplitMix64 stream seeded by --seed (reproducible, no RNG library; the
// stream is counter-based, so threads fill disjoint ranges of it and the
// bytes do not depend on --threads).
//
//   make_random_checkpoint --out=/tmp/llama3-8b --preset=llama3-8b
//
// writes the Llama-3.1-8B shape (vocab 128,256, hidden 4,096, 32 layers, 32
// heads, 8 KV heads, head_dim 128, intermediate 14,336, llama3 RoPE, bf16,
// 16.06 GB) with a byte-level tokenizer.json of its vocabulary
// (random_tokenizer.h; bos 128,000, eos 128,001). --tokenizer writes one for
// any shape (vocab >= 257: the last 256 ids are special when vocab >= 512).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/gpu/random_tokenizer.h"
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
ABSL_FLAG(std::string, preset, "",
          "llama3-8b: the Llama-3.1-8B shape (sets the shape, RoPE and "
          "tokenizer flags; other shape flags are ignored)");
ABSL_FLAG(std::string, rope_type, "default",
          "default or llama3 (factor 8, low/high_freq_factor 1/4, original "
          "max positions 8192)");
ABSL_FLAG(double, rope_theta, 500000.0, "rope_theta");
ABSL_FLAG(bool, tokenizer, false, "Also write a byte-level tokenizer.json.");
ABSL_FLAG(int, threads, 0, "Threads drawing the weights (0 = all cores).");

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Draw j (0-based) of the SplitMix64 stream seeded by `seed`.
uint64_t SplitMix64At(uint64_t seed, uint64_t j) {
  uint64_t z = seed + (j + 1) * kGolden;
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

struct Shape {
  int layers, hidden, heads, kv_heads, head_dim, intermediate, vocab,
      max_positions;
  std::string rope_type;
  bool tokenizer;
  int bos, eos;
};

Shape ShapeFromFlags() {
  Shape s{absl::GetFlag(FLAGS_layers),
          absl::GetFlag(FLAGS_hidden),
          absl::GetFlag(FLAGS_heads),
          absl::GetFlag(FLAGS_kv_heads),
          absl::GetFlag(FLAGS_head_dim),
          absl::GetFlag(FLAGS_intermediate),
          absl::GetFlag(FLAGS_vocab),
          absl::GetFlag(FLAGS_max_positions),
          absl::GetFlag(FLAGS_rope_type),
          absl::GetFlag(FLAGS_tokenizer),
          1,
          2};
  if (absl::GetFlag(FLAGS_preset) == "llama3-8b") {
    // meta-llama/Llama-3.1-8B config.json.
    s = {32,     4096,   32,       8,    128,    14336,
         128256, 131072, "llama3", true, 128000, 128001};
  }
  if (s.tokenizer && s.vocab >= 512) {
    s.bos = s.vocab - 256;
    s.eos = s.vocab - 255;
  }
  return s;
}

std::vector<Tensor> Tensors(const Shape& s, float w) {
  const int H = s.hidden, Hq = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const int I = s.intermediate, V = s.vocab;
  std::vector<Tensor> tensors;
  tensors.push_back({"model.embed_tokens.weight", {V, H}, 0, w});
  for (int l = 0; l < s.layers; ++l) {
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
  return tensors;
}

int64_t Elements(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// Elements [0, n) of `t`, draws first..first + n of the stream, into buf
// (eb bytes each), on `threads` threads.
void Fill(const Tensor& t, uint64_t seed, uint64_t first, int64_t n, int eb,
          int threads, std::vector<char>& buf) {
  buf.resize(static_cast<size_t>(n) * eb);
  auto part = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const double u =
          static_cast<double>(SplitMix64At(seed, first + i) >> 11) * 0x1.0p-53 *
              2 -
          1;
      const float v = t.center + t.half_width * static_cast<float>(u);
      if (eb == 2) {
        const radixkv::worker::bf16_t b = radixkv::worker::FloatToBf16(v);
        std::memcpy(&buf[i * 2], &b.bits, 2);
      } else {
        std::memcpy(&buf[i * 4], &v, 4);
      }
    }
  };
  const int64_t per = (n + threads - 1) / threads;
  if (n < (int64_t{1} << 20) || threads == 1) return part(0, n);
  std::vector<std::thread> pool;
  for (int64_t lo = 0; lo < n; lo += per) {
    pool.emplace_back(part, lo, std::min(n, lo + per));
  }
  for (std::thread& th : pool) th.join();
}

nlohmann::json Config(const Shape& s, const std::string& dtype) {
  nlohmann::json rope = {{"rope_type", s.rope_type},
                         {"rope_theta", absl::GetFlag(FLAGS_rope_theta)}};
  if (s.rope_type == "llama3") {
    rope["factor"] = 8.0;
    rope["low_freq_factor"] = 1.0;
    rope["high_freq_factor"] = 4.0;
    rope["original_max_position_embeddings"] = 8192;
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"hidden_act", "silu"},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", s.max_positions},
          {"rope_parameters", rope},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"bos_token_id", s.bos},
          {"eos_token_id", s.eos},
          {"dtype", dtype == "bf16" ? "bfloat16" : "float32"}};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  const Shape sh = ShapeFromFlags();
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const std::string preset = absl::GetFlag(FLAGS_preset);
  if (out.empty() || (dtype != "bf16" && dtype != "f32") || sh.layers < 1 ||
      sh.hidden < 1 || sh.heads < 1 || sh.kv_heads < 1 ||
      sh.heads % sh.kv_heads != 0 || sh.head_dim < 2 || sh.head_dim % 2 != 0 ||
      sh.intermediate < 1 || sh.vocab < 1 ||
      (sh.rope_type != "default" && sh.rope_type != "llama3") ||
      (!preset.empty() && preset != "llama3-8b") ||
      (sh.tokenizer && sh.vocab < 257)) {
    std::fprintf(
        stderr,
        "usage: make_random_checkpoint --out=DIR [--preset=llama3-8b | "
        "--layers ...] (heads divisible by kv_heads, even head_dim, dtype "
        "bf16|f32, rope_type default|llama3, vocab >= 257 with "
        "--tokenizer)\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  const float w =
      static_cast<float>(std::sqrt(3.0) * absl::GetFlag(FLAGS_init_std));
  const std::vector<Tensor> tensors = Tensors(sh, w);
  const int eb = dtype == "bf16" ? 2 : 4;
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = Elements(t);
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
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int threads =
      absl::GetFlag(FLAGS_threads) > 0
          ? absl::GetFlag(FLAGS_threads)
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<char> buf;
  uint64_t drawn = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = Elements(t);
    Fill(t, seed, drawn, n, eb, threads, buf);
    drawn += n;
    f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  f.close();
  if (!f.good()) {
    std::fprintf(stderr, "write failed: %s\n", out.c_str());
    return 1;
  }
  std::ofstream(out + "/config.json") << Config(sh, dtype).dump(2) << "\n";
  if (sh.tokenizer && !radixkv::worker::gpu::WriteByteLevelTokenizer(
                          out + "/tokenizer.json", sh.vocab,
                          sh.vocab >= 512 ? sh.vocab - 256 : sh.vocab)) {
    std::fprintf(stderr, "tokenizer write failed: %s\n", out.c_str());
    return 1;
  }
  std::printf("wrote %s: %zu tensors, %.1f MiB%s\n", out.c_str(),
              tensors.size(), offset / 1048576.0,
              sh.tokenizer ? " + tokenizer.json" : "");
  return 0;
}
