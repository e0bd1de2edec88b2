#include "worker/cpu/cpu_model_executor.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/checkpoint_tensors.h"
#include "model/rope.h"
#include "model/safetensors_reader.h"
#include "spdlog/spdlog.h"
#include "worker/forward_batch_validation.h"
#include "worker/kernels/cpu/copy_blocks.h"
#include "worker/kernels/cpu/decode_attention.h"
#include "worker/kernels/cpu/extend_attention.h"
#include "worker/kernels/cpu/reshape_and_cache.h"

// OpenBLAS DYNAMIC_ARCH entry points (exported by Debian's libopenblas, not
// declared in cblas.h). Weak: absent in a single-target OpenBLAS build.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace radixkv::worker {
namespace {

// OpenBLAS 0.3.21 identifies CPUs by family/model number; newer Xeons (e.g.
// model 207, Emerald Rapids) are unknown to it and fall back to its SSE3
// "Prescott" kernels, 3-4x slower than its AVX2 "Haswell" kernels on them.
// When that happens on a CPU with AVX2 + FMA, and the user did not choose
// OPENBLAS_CORETYPE, re-run OpenBLAS's core selection with Haswell. Done once,
// before the first GEMM.
void SelectOpenBlasKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string core = openblas_get_corename();
    const bool generic = core == "Prescott" || core == "Core2" ||
                         core == "Penryn" || core == "Dunnington" ||
                         core == "Nehalem" || core == "Atom" ||
                         core == "Sandybridge" || core == "Unknown";
    if (!generic || std::getenv("OPENBLAS_CORETYPE") != nullptr ||
        !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) {
      spdlog::info("OpenBLAS kernels: {}", core);
      return;
    }
    ::setenv("OPENBLAS_CORETYPE", "Haswell", /*overwrite=*/0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    spdlog::info(
        "OpenBLAS detected this AVX2 CPU as {}; switched to {} kernels "
        "(set OPENBLAS_CORETYPE to override)",
        core, openblas_get_corename());
  });
}

// C[M, N] = A[M, K] * W[N, K]^T + beta * C  (row-major; W is an HF Linear
// weight [out, in]). Up to gemv_max_rows rows it runs one GEMV per row instead
// of a GEMM: OpenBLAS's GEMM packs the whole weight matrix on every call,
// which for a decode step (few rows) costs more than the multiply itself.
void MatMulWeightT(const float* a, const float* w, float* c, int64_t m,
                   int64_t n, int64_t k, float beta, int64_t gemv_max_rows) {
  if (m <= gemv_max_rows) {
    for (int64_t r = 0; r < m; ++r) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n),
                  static_cast<int>(k), 1.0f, w, static_cast<int>(k), a + r * k,
                  1, beta, c + r * n, 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(k), w, static_cast<int>(k), beta, c,
              static_cast<int>(n));
}

// HF LlamaRMSNorm in fp32: y = w * (x * rsqrt(mean(x^2) + eps)).
void RmsNorm(const float* x, const float* w, float* y, int64_t rows,
             int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) {
      sum_sq += static_cast<double>(xr[i]) * xr[i];
    }
    const float variance = static_cast<float>(sum_sq / dim);
    const float inv_rms = 1.0f / std::sqrt(variance + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv_rms);
  }
}

// In-place rotate-half RoPE on one head vector: dim i pairs with i + D/2.
inline void ApplyRope(float* v, const float* cos, const float* sin,
                      int32_t half) {
  for (int32_t i = 0; i < half; ++i) {
    const float a = v[i];
    const float b = v[i + half];
    v[i] = a * cos[i] - b * sin[i];
    v[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

CpuModelExecutor::~CpuModelExecutor() = default;

absl::StatusOr<std::unique_ptr<CpuModelExecutor>> CpuModelExecutor::Create(
    const CpuModelExecutorOptions& options) {
  std::unique_ptr<CpuModelExecutor> e(new CpuModelExecutor());
  e->options_ = options;
  absl::StatusOr<model::ModelConfig> config =
      model::LoadModelConfig(options.model_dir);
  if (!config.ok()) return config.status();
  e->config_ = *config;
  if (absl::Status s = e->LoadWeights(); !s.ok()) return s;
  e->inv_freq_ = model::RopeInvFreq(e->config_);

  const model::ModelConfig& c = e->config_;
  absl::StatusOr<std::unique_ptr<KvPool>> pool =
      options.kv_capacity_slots > 0
          ? KvPool::CreateFromCapacity(
                c.num_hidden_layers, options.kv_capacity_slots,
                options.page_size, c.num_key_value_heads, c.head_dim,
                options.kv_layout, options.kv_dtype)
          : KvPool::CreateFromBudget(c.num_hidden_layers,
                                     options.kv_budget_bytes, options.page_size,
                                     c.num_key_value_heads, c.head_dim,
                                     options.kv_layout, options.kv_dtype);
  if (!pool.ok()) return pool.status();
  e->pool_ = std::move(*pool);
  if (options.decode_partition_size < 0) {
    return absl::InvalidArgumentError("decode_partition_size must be >= 0");
  }
  const int threads = std::max(1, options.num_threads);
  e->threads_ = std::make_unique<CpuThreadPool>(threads);
  SelectOpenBlasKernels();
  openblas_set_num_threads(threads);
  return e;
}

absl::Status CpuModelExecutor::LoadWeights() {
  absl::StatusOr<std::unique_ptr<model::SafetensorsReader>> reader =
      model::SafetensorsReader::Open(options_.model_dir);
  if (!reader.ok()) return reader.status();
  const model::SafetensorsReader& r = **reader;
  const model::ModelConfig& c = config_;
  if (absl::Status s = model::CheckCheckpointTensors(c, r); !s.ok()) return s;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t inter = c.intermediate_size;
  absl::Status status;
  auto read = [&](const std::string& name,
                  std::vector<int64_t> shape) -> std::vector<float> {
    if (!status.ok()) return {};
    absl::StatusOr<std::vector<float>> t = r.ReadFloat32(name, shape);
    if (!t.ok()) {
      status = t.status();
      return {};
    }
    return std::move(*t);
  };
  auto append = [](std::vector<float>& dst, const std::vector<float>& src) {
    dst.insert(dst.end(), src.begin(), src.end());
  };

  embed_ = read("model.embed_tokens.weight", {c.vocab_size, hidden});
  final_norm_ = read("model.norm.weight", {hidden});
  if (!c.tie_word_embeddings) {
    lm_head_ = read("lm_head.weight", {c.vocab_size, hidden});
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LayerWeights& w = layers_[l];
    w.input_norm = read(p + "input_layernorm.weight", {hidden});
    w.post_norm = read(p + "post_attention_layernorm.weight", {hidden});
    append(w.qkv, read(p + "self_attn.q_proj.weight", {q_dim, hidden}));
    append(w.qkv, read(p + "self_attn.k_proj.weight", {kv_dim, hidden}));
    append(w.qkv, read(p + "self_attn.v_proj.weight", {kv_dim, hidden}));
    if (c.qkv_bias) {
      append(w.qkv_bias, read(p + "self_attn.q_proj.bias", {q_dim}));
      append(w.qkv_bias, read(p + "self_attn.k_proj.bias", {kv_dim}));
      append(w.qkv_bias, read(p + "self_attn.v_proj.bias", {kv_dim}));
    }
    w.o = read(p + "self_attn.o_proj.weight", {hidden, q_dim});
    if (c.o_bias) w.o_bias = read(p + "self_attn.o_proj.bias", {hidden});
    if (c.qk_norm) {
      w.q_norm = read(p + "self_attn.q_norm.weight", {c.head_dim});
      w.k_norm = read(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    append(w.gate_up, read(p + "mlp.gate_proj.weight", {inter, hidden}));
    append(w.gate_up, read(p + "mlp.up_proj.weight", {inter, hidden}));
    w.down = read(p + "mlp.down_proj.weight", {hidden, inter});
  }
  return status;
}

void CpuModelExecutor::ComputeRope(const std::vector<int32_t>& positions) {
  const int32_t half = config_.head_dim / 2;
  rope_cos_.resize(positions.size() * half);
  rope_sin_.resize(positions.size() * half);
  for (size_t t = 0; t < positions.size(); ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int32_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];  // fp32 product, as HF
      rope_cos_[t * half + i] = std::cos(angle);
      rope_sin_[t * half + i] = std::sin(angle);
    }
  }
}

absl::Status CpuModelExecutor::Forward(const ForwardBatch& batch,
                                       std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("logits is null");
  if (absl::Status s =
          ValidateForwardBatch(batch, config_.vocab_size,
                               pool_->capacity_slots(), pool_->page_size());
      !s.ok()) {
    return s;
  }
  if (!batch.copy_ops.empty()) {
    if (absl::Status s = CopyBlocks(*pool_, batch.copy_ops); !s.ok()) {
      return s;
    }
  }
  const model::ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.input_ids.size());
  const int64_t H = c.hidden_size;
  const int64_t D = c.head_dim;
  const int64_t Hq = c.num_attention_heads;
  const int64_t Hkv = c.num_key_value_heads;
  const int64_t qkv_dim = (Hq + 2 * Hkv) * D;
  const int64_t I = c.intermediate_size;
  const int32_t half = static_cast<int32_t>(D / 2);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float sm_scale = static_cast<float>(1.0 / std::sqrt(double(D)));

  x_.resize(T * H);
  h_.resize(T * H);
  qkv_.resize(T * qkv_dim);
  q_.resize(T * Hq * D);
  k_.resize(T * Hkv * D);
  v_.resize(T * Hkv * D);
  attn_.resize(T * Hq * D);
  gate_up_.resize(T * 2 * I);
  act_.resize(T * I);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(&x_[t * H], &embed_[int64_t{batch.input_ids[t]} * H],
                H * sizeof(float));
  }
  ComputeRope(batch.positions);

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layers_[l];
    // Attention block.
    RmsNorm(x_.data(), w.input_norm.data(), h_.data(), T, H, eps);
    MatMulWeightT(h_.data(), w.qkv.data(), qkv_.data(), T, qkv_dim, H, 0.0f,
                  options_.gemv_max_rows);
    for (int64_t t = 0; t < T; ++t) {
      float* row = &qkv_[t * qkv_dim];
      if (!w.qkv_bias.empty()) {
        for (int64_t i = 0; i < qkv_dim; ++i) row[i] += w.qkv_bias[i];
      }
      if (!w.q_norm.empty()) {  // Qwen3Attention: norm per head, then RoPE
        RmsNorm(row, w.q_norm.data(), row, Hq, D, eps);
        RmsNorm(row + Hq * D, w.k_norm.data(), row + Hq * D, Hkv, D, eps);
      }
      const float* cos = &rope_cos_[t * half];
      const float* sin = &rope_sin_[t * half];
      for (int64_t h = 0; h < Hq; ++h) ApplyRope(row + h * D, cos, sin, half);
      for (int64_t h = 0; h < Hkv; ++h) {
        ApplyRope(row + (Hq + h) * D, cos, sin, half);
      }
      std::memcpy(&q_[t * Hq * D], row, Hq * D * sizeof(float));
      std::memcpy(&k_[t * Hkv * D], row + Hq * D, Hkv * D * sizeof(float));
      std::memcpy(&v_[t * Hkv * D], row + (Hq + Hkv) * D,
                  Hkv * D * sizeof(float));
    }
    ReshapeAndCache(*pool_, l, k_.data(), v_.data(), batch.out_cache_loc,
                    threads_.get());
    if (batch.is_decode) {
      DecodeAttentionArgs args;
      args.q = q_.data();
      args.kv_indptr = batch.kv_indptr;
      args.kv_indices = batch.kv_indices;
      args.num_q_heads = static_cast<int32_t>(Hq);
      args.sm_scale = sm_scale;
      args.partition_size = options_.decode_partition_size;
      args.window_left = c.window_left(l);
      args.out = attn_.data();
      DecodeAttention(*pool_, l, args, threads_.get());
    } else {
      ExtendAttentionArgs args;
      args.q = q_.data();
      args.k_extend = k_.data();
      args.v_extend = v_.data();
      args.qo_indptr = batch.qo_indptr;
      args.kv_indptr = batch.kv_indptr;
      args.kv_indices = batch.kv_indices;
      args.num_q_heads = static_cast<int32_t>(Hq);
      args.sm_scale = sm_scale;
      args.window_left = c.window_left(l);
      args.out = attn_.data();
      ExtendAttention(*pool_, l, args, threads_.get());
    }
    if (!w.o_bias.empty()) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < H; ++i) x_[t * H + i] += w.o_bias[i];
      }
    }
    // x += attn Wo^T
    MatMulWeightT(attn_.data(), w.o.data(), x_.data(), T, H, Hq * D, 1.0f,
                  options_.gemv_max_rows);
    // MLP block.
    RmsNorm(x_.data(), w.post_norm.data(), h_.data(), T, H, eps);
    MatMulWeightT(h_.data(), w.gate_up.data(), gate_up_.data(), T, 2 * I, H,
                  0.0f, options_.gemv_max_rows);
    for (int64_t t = 0; t < T; ++t) {
      const float* g = &gate_up_[t * 2 * I];
      const float* u = g + I;
      float* a = &act_[t * I];
      for (int64_t i = 0; i < I; ++i) {
        const float silu = g[i] / (1.0f + std::exp(-g[i]));
        a[i] = silu * u[i];
      }
    }
    MatMulWeightT(act_.data(), w.down.data(), x_.data(), T, H, I, 1.0f,
                  options_.gemv_max_rows);
  }

  // Rows whose logits are returned.
  const size_t num_seqs = batch.qo_indptr.size() - 1;
  const int64_t R =
      batch.return_all_logits ? T : static_cast<int64_t>(num_seqs);
  rows_.resize(R * H);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t =
        batch.return_all_logits ? r : int64_t{batch.qo_indptr[r + 1]} - 1;
    RmsNorm(&x_[t * H], final_norm_.data(), &rows_[r * H], 1, H, eps);
  }
  const float* head = lm_head_.empty() ? embed_.data() : lm_head_.data();
  logits->resize(R * c.vocab_size);
  MatMulWeightT(rows_.data(), head, logits->data(), R, c.vocab_size, H, 0.0f,
                options_.gemv_max_rows);
  return absl::OkStatus();
}

}  // namespace radixkv::worker
