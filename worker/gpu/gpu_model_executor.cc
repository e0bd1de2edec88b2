#include "worker/gpu/gpu_model_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/gpu/gpu_blas.h"
#include "worker/gpu/gpu_runtime_compat.h"
#include "worker/gpu/model_kernels.h"
#include "worker/kernels/hip/gpu_attention.h"
#include "worker/kernels/hip/hip_compat.h"
#include "worker/model/checkpoint_tensors.h"
#include "worker/model/forward_batch_validation.h"
#include "worker/model/rope.h"
#include "worker/model/safetensors_reader.h"

namespace radixkv::worker {

static_assert(gpu::kDeviceSamplingFailedToken == kSamplingFailedToken,
              "the device kernels report a NaN row with the host's value");

namespace {

using gpu::BlasDataType;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", what));
}

absl::Status RuntimeError(hipError_t e, absl::string_view what) {
  if (e == hipSuccess) return absl::OkStatus();
  if (e == hipErrorOutOfMemory) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", hipGetErrorString(e)));
  }
  return absl::InternalError(absl::StrCat(what, ": ", hipGetErrorString(e)));
}

absl::Status KernelError(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", gpu::ModelKernelErrorString(e)));
}

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return _s;                              \
    }                                         \
  } while (0)

BlasDataType BlasType(DType d) {
  switch (d) {
    case DType::kF32:
      return gpu::kBlasF32;
    case DType::kBF16:
      return gpu::kBlasBF16;
    case DType::kF16:
      return gpu::kBlasF16;
  }
  return gpu::kBlasF32;
}

uint16_t ToStorage16(float f, DType d) {
  return d == DType::kBF16 ? FloatToBf16(f).bits : FloatToFp16(f).bits;
}

int32_t RoundUpPow2(int32_t v, int32_t min_value) {
  int32_t r = min_value;
  while (r < v) r *= 2;
  return r;
}

}  // namespace

absl::Status ValidateForwardBatch(const ForwardBatch& b, int32_t vocab_size,
                                  int64_t capacity, int32_t page_size) {
  RETURN_IF_ERROR(ValidateForwardBatchTokens(b, vocab_size, capacity));
  const int64_t num_pages = capacity / page_size;
  for (const PageCopy& op : b.copy_ops) {
    if (op.src_page < 0 || op.src_page >= num_pages || op.dst_page < 0 ||
        op.dst_page >= num_pages || op.num_tokens < 0 ||
        op.num_tokens > page_size) {
      return Invalid(absl::StrCat("copy op ", op.src_page, " -> ", op.dst_page,
                                  " (", op.num_tokens,
                                  " tokens) out of range"));
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------- Impl

struct GpuModelExecutor::Impl {
  struct Layer {
    float* input_norm = nullptr;
    float* post_norm = nullptr;
    void* qkv = nullptr;
    float* qkv_bias = nullptr;
    void* o = nullptr;
    float* o_bias = nullptr;
    void* gate_up = nullptr;
    void* down = nullptr;
  };
  // Host values that fully determine the enqueued work of one step (the
  // device pointers are fixed), i.e. what a graph is keyed by.
  struct Shape {
    int32_t num_tokens = 0;
    int32_t batch = 0;
    bool is_decode = false;
    int32_t max_seq_len = 0;     // decode: longest context (or its bucket)
    int32_t max_extend_len = 0;  // extend: longest new-token run
    int32_t logit_rows = 0;
    int mode = 0;  // 0 logits, 1 argmax, 2 sample
  };

  std::vector<void*> allocations;
  hipStream_t stream = nullptr;
  gpu::BlasHandle blas = nullptr;
  int num_sms = 132;
  DType dtype = DType::kBF16;
  int32_t elem = 2;
  int32_t small_gemm_rows = 0;

  // Weights.
  void* embed = nullptr;
  void* lm_head = nullptr;
  float* final_norm = nullptr;
  float* inv_freq = nullptr;
  std::vector<Layer> layers;

  // Pool.
  KvCacheGeometry geometry;
  char* pool = nullptr;
  std::vector<gpu::GpuKvCache> caches;  // per layer
  void** layer_k = nullptr;             // device [L]
  void** layer_v = nullptr;
  void* copy_scratch = nullptr;
  size_t copy_scratch_bytes = 0;
  size_t copy_scratch_ops = 0;

  // Workspace.
  float* x = nullptr;
  void* h = nullptr;
  float* qkv = nullptr;
  void* q = nullptr;
  void* k_ext = nullptr;
  void* v_ext = nullptr;
  void* attn = nullptr;
  float* gate_up = nullptr;
  void* act = nullptr;
  void* rows = nullptr;
  float* logits = nullptr;
  int32_t* tokens = nullptr;
  void* decode_ws = nullptr;
  size_t decode_ws_bytes = 0;
  void* blas_ws = nullptr;

  // Metadata: one pinned host block mirrored by one device block.
  char* meta_host = nullptr;
  char* meta_dev = nullptr;
  size_t off_qo = 0, off_kv = 0, off_ids = 0, off_pos = 0, off_seq = 0,
         off_rows = 0, off_params = 0, off_ocl = 0, off_kvi = 0, meta_bytes = 0;
  float* logits_host = nullptr;
  int32_t* tokens_host = nullptr;

  // Graphs keyed by (batch bucket, context bucket, mode).
  std::map<std::tuple<int32_t, int32_t, int>, hipGraphExec_t> graphs;
  std::map<std::tuple<int32_t, int32_t, int>, int> seen;
  Shape last_shape;
  bool have_last = false;

  template <typename T>
  T* Dev(size_t off) {
    return reinterpret_cast<T*>(meta_dev + off);
  }
  template <typename T>
  T* Host(size_t off) {
    return reinterpret_cast<T*>(meta_host + off);
  }

  ~Impl() {
    for (auto& [key, exec] : graphs) hipGraphExecDestroy(exec);
    if (blas != nullptr) gpu::BlasDestroy(blas);
    for (void* p : allocations) hipFree(p);
    if (meta_host != nullptr) hipHostFree(meta_host);
    if (logits_host != nullptr) hipHostFree(logits_host);
    if (tokens_host != nullptr) hipHostFree(tokens_host);
    if (stream != nullptr) hipStreamDestroy(stream);
  }

  absl::Status Alloc(size_t bytes, void** out, int64_t* counter) {
    *out = nullptr;
    if (bytes == 0) return absl::OkStatus();
    bytes = (bytes + 255) / 256 * 256;
    RETURN_IF_ERROR(RuntimeError(hipMalloc(out, bytes),
                                 absl::StrCat("hipMalloc(", bytes, ")")));
    allocations.push_back(*out);
    if (counter != nullptr) *counter += static_cast<int64_t>(bytes);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status AllocT(size_t count, T** out, int64_t* counter) {
    void* p = nullptr;
    RETURN_IF_ERROR(Alloc(count * sizeof(T), &p, counter));
    *out = static_cast<T*>(p);
    return absl::OkStatus();
  }

  // C[M, N] (fp32, row-major) = A[M, K] (dtype) W[N, K]^T (dtype) + beta C.
  absl::Status Gemm(const void* a, const void* w, float* c, int64_t m,
                    int64_t n, int64_t k, float beta) {
    if (m == 0) return absl::OkStatus();
    if (m <= small_gemm_rows && dtype != DType::kF32 && k % 8 == 0 &&
        gpu::LaunchSmallBatchGemm(
            a, w, c, static_cast<int32_t>(m), static_cast<int32_t>(n),
            static_cast<int32_t>(k), beta, dtype, stream) == 0) {
      return absl::OkStatus();
    }
    const float alpha = 1.0f;
    const BlasDataType t = BlasType(dtype);
    gpu::BlasStatus s = gpu::BlasGemmEx(
        blas, /*trans_a=*/true, /*trans_b=*/false, static_cast<int>(n),
        static_cast<int>(m), static_cast<int>(k), &alpha, w, t,
        static_cast<int>(k), a, t, static_cast<int>(k), &beta, c, gpu::kBlasF32,
        static_cast<int>(n));
    if (s != gpu::kBlasSuccess) {
      return absl::InternalError(absl::StrCat("BLAS GemmEx failed (status ",
                                              static_cast<int>(s), ") M=", m,
                                              " N=", n, " K=", k));
    }
    return absl::OkStatus();
  }

  // The tensor-core decode attention arguments (every layer alike) for a
  // decode step of shape `sh` over this executor's metadata and workspace:
  // Hq = config.num_attention_heads query heads, softmax scale sm_scale.
  // partition_size_option >= 0 fixes the split-KV partition (tokens; 0 = one
  // pass: v1, background.md §4.1), < 0 lets gpu::ChooseDecodePartitionSize
  // pick it; a split whose workspace would exceed decode_ws_bytes gets 0.
  gpu::GpuDecodeArgs DecodeArgs(const Shape& sh, const ModelConfig& config,
                                float sm_scale, int32_t partition_size_option) {
    gpu::GpuDecodeArgs a;
    a.q = q;
    a.kv_indptr = Dev<int32_t>(off_kv);
    a.kv_indices = Dev<int64_t>(off_kvi);
    a.batch_size = sh.batch;
    a.max_seq_len = std::max(sh.max_seq_len, 1);
    a.num_q_heads = config.num_attention_heads;
    a.sm_scale = sm_scale;
    int32_t ps = partition_size_option >= 0
                     ? partition_size_option
                     : gpu::ChooseDecodePartitionSize(
                           sh.batch, config.num_key_value_heads,
                           config.num_attention_heads, a.max_seq_len, num_sms);
    if (gpu::DecodeWorkspaceBytes(sh.batch, config.num_attention_heads,
                                  config.head_dim, a.max_seq_len,
                                  ps) > decode_ws_bytes) {
      ps = 0;
    }
    a.partition_size = ps;
    a.out = attn;
    a.workspace = decode_ws;
    a.workspace_bytes = decode_ws_bytes;
    return a;
  }

  // The tensor-core extend attention arguments (every layer alike) for an
  // extend step of shape `sh`: new tokens' Q/K/V from q, k_ext, v_ext, the
  // prefix from the pool, softmax scale sm_scale.
  gpu::GpuExtendArgs ExtendArgs(const Shape& sh, const ModelConfig& config,
                                float sm_scale) {
    gpu::GpuExtendArgs a;
    a.q = q;
    a.k_extend = k_ext;
    a.v_extend = v_ext;
    a.qo_indptr = Dev<int32_t>(off_qo);
    a.kv_indptr = Dev<int32_t>(off_kv);
    a.kv_indices = Dev<int64_t>(off_kvi);
    a.batch_size = sh.batch;
    a.max_extend_len = sh.max_extend_len;
    a.num_q_heads = config.num_attention_heads;
    a.sm_scale = sm_scale;
    a.out = attn;
    return a;
  }
};

GpuModelExecutor::~GpuModelExecutor() = default;

int64_t GpuModelExecutor::capacity_slots() const {
  return impl_->geometry.capacity_slots();
}

int64_t GpuModelExecutor::pool_bytes() const {
  return 2 * impl_->geometry.BytesPerLayer() * config_.num_hidden_layers;
}

void GpuModelExecutor::set_small_batch_gemm_max_rows(int32_t rows) {
  options_.small_batch_gemm_max_rows = std::clamp(rows, 0, 16);
  impl_->small_gemm_rows = options_.small_batch_gemm_max_rows;
  // Captured graphs hold the previous choice: drop them.
  for (auto& [key, exec] : impl_->graphs) hipGraphExecDestroy(exec);
  impl_->graphs.clear();
  impl_->seen.clear();
}

int GpuModelExecutor::num_graphs() const {
  return static_cast<int>(impl_->graphs.size());
}

std::string GpuModelExecutor::device() const {
  return absl::StrCat("cuda:", options_.device_id);
}

absl::StatusOr<std::unique_ptr<GpuModelExecutor>> GpuModelExecutor::Create(
    const GpuModelExecutorOptions& options) {
  std::unique_ptr<GpuModelExecutor> e(new GpuModelExecutor());
  e->options_ = options;
  e->impl_ = std::make_unique<Impl>();
  Impl& m = *e->impl_;
  const GpuModelExecutorOptions& o = e->options_;
  if (o.page_size < 1 || o.page_size > 128 ||
      (o.page_size & (o.page_size - 1)) != 0) {
    return absl::InvalidArgumentError(
        "page_size must be a power of two <= 128");
  }
  if (o.max_tokens_per_step < 1 || o.max_batch_size < 1 ||
      o.max_logit_rows < 1 || !(o.memory_fraction > 0) ||
      o.memory_fraction > 1) {
    return absl::InvalidArgumentError(
        "max_tokens_per_step, max_batch_size, max_logit_rows must be >= 1 and "
        "memory_fraction in (0, 1]");
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(o.model_dir);
  if (!config.ok()) return config.status();
  e->config_ = *config;
  const ModelConfig& c = e->config_;
  if (c.head_dim > 256 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("head_dim must be even and <= 256");
  }

  int count = 0;
  if (hipError_t err = hipGetDeviceCount(&count);
      err != hipSuccess || count <= o.device_id) {
    return absl::UnavailableError(
        absl::StrCat("no GPU device ", o.device_id, " (", count,
                     " visible): ", hipGetErrorString(err)));
  }
  RETURN_IF_ERROR(RuntimeError(hipSetDevice(o.device_id), "hipSetDevice"));
  hipDeviceGetAttribute(&m.num_sms, hipDeviceAttributeMultiprocessorCount,
                        o.device_id);
  RETURN_IF_ERROR(RuntimeError(hipStreamCreate(&m.stream), "stream"));
  if (gpu::BlasCreate(&m.blas) != gpu::kBlasSuccess) {
    return absl::InternalError("BLAS handle creation failed");
  }
  gpu::BlasSetStream(m.blas, m.stream);
  m.dtype = o.dtype;
  m.elem = DTypeBytes(o.dtype);
  m.small_gemm_rows = std::clamp(o.small_batch_gemm_max_rows, 0, 16);
  e->tc_attention_ =
      o.use_tensor_core_attention && o.dtype != DType::kF32 &&
      (c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256);

  // ---- weights
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(o.model_dir);
  if (!reader.ok()) return reader.status();
  const SafetensorsReader& r = **reader;
  RETURN_IF_ERROR(CheckCheckpointTensors(c, r));
  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  const int64_t qkv_dim = (Hq + 2 * Hkv) * D;
  int64_t* wb = &e->weight_bytes_;
  std::vector<char> staging;
  // Uploads tensors (concatenated along rows) converted to `to` at dst.
  auto upload =
      [&](const std::vector<std::pair<std::string, std::vector<int64_t>>>&
              parts,
          DType to, void* dst) -> absl::Status {
    size_t offset = 0;
    const int32_t eb = DTypeBytes(to);
    for (const auto& [name, shape] : parts) {
      absl::StatusOr<const SafetensorsTensor*> t = r.Find(name);
      if (!t.ok()) return t.status();
      const bool raw =
          ((*t)->dtype == SafetensorsDType::kBF16 && to == DType::kBF16) ||
          ((*t)->dtype == SafetensorsDType::kF16 && to == DType::kF16) ||
          ((*t)->dtype == SafetensorsDType::kF32 && to == DType::kF32);
      if (raw && (*t)->shape == shape) {
        RETURN_IF_ERROR(
            RuntimeError(hipMemcpy(static_cast<char*>(dst) + offset, (*t)->data,
                                   (*t)->num_bytes, hipMemcpyHostToDevice),
                         "weight upload"));
        offset += (*t)->num_bytes;
        continue;
      }
      absl::StatusOr<std::vector<float>> f = r.ReadFloat32(name, shape);
      if (!f.ok()) return f.status();
      staging.resize(f->size() * eb);
      if (to == DType::kF32) {
        std::memcpy(staging.data(), f->data(), staging.size());
      } else {
        uint16_t* s16 = reinterpret_cast<uint16_t*>(staging.data());
        for (size_t i = 0; i < f->size(); ++i)
          s16[i] = ToStorage16((*f)[i], to);
      }
      RETURN_IF_ERROR(RuntimeError(
          hipMemcpy(static_cast<char*>(dst) + offset, staging.data(),
                    staging.size(), hipMemcpyHostToDevice),
          "weight upload"));
      offset += staging.size();
    }
    return absl::OkStatus();
  };
  const int64_t eb = m.elem;
  RETURN_IF_ERROR(m.Alloc(V * H * eb, &m.embed, wb));
  RETURN_IF_ERROR(
      upload({{"model.embed_tokens.weight", {V, H}}}, o.dtype, m.embed));
  RETURN_IF_ERROR(m.AllocT(H, &m.final_norm, wb));
  RETURN_IF_ERROR(
      upload({{"model.norm.weight", {H}}}, DType::kF32, m.final_norm));
  if (c.tie_word_embeddings) {
    m.lm_head = m.embed;
  } else {
    RETURN_IF_ERROR(m.Alloc(V * H * eb, &m.lm_head, wb));
    RETURN_IF_ERROR(upload({{"lm_head.weight", {V, H}}}, o.dtype, m.lm_head));
  }
  m.layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    Impl::Layer& w = m.layers[l];
    RETURN_IF_ERROR(m.AllocT(H, &w.input_norm, wb));
    RETURN_IF_ERROR(upload({{p + "input_layernorm.weight", {H}}}, DType::kF32,
                           w.input_norm));
    RETURN_IF_ERROR(m.AllocT(H, &w.post_norm, wb));
    RETURN_IF_ERROR(upload({{p + "post_attention_layernorm.weight", {H}}},
                           DType::kF32, w.post_norm));
    RETURN_IF_ERROR(m.Alloc(qkv_dim * H * eb, &w.qkv, wb));
    RETURN_IF_ERROR(upload({{p + "self_attn.q_proj.weight", {Hq * D, H}},
                            {p + "self_attn.k_proj.weight", {Hkv * D, H}},
                            {p + "self_attn.v_proj.weight", {Hkv * D, H}}},
                           o.dtype, w.qkv));
    if (c.qkv_bias) {
      RETURN_IF_ERROR(m.AllocT(qkv_dim, &w.qkv_bias, wb));
      RETURN_IF_ERROR(upload({{p + "self_attn.q_proj.bias", {Hq * D}},
                              {p + "self_attn.k_proj.bias", {Hkv * D}},
                              {p + "self_attn.v_proj.bias", {Hkv * D}}},
                             DType::kF32, w.qkv_bias));
    }
    RETURN_IF_ERROR(m.Alloc(H * Hq * D * eb, &w.o, wb));
    RETURN_IF_ERROR(
        upload({{p + "self_attn.o_proj.weight", {H, Hq * D}}}, o.dtype, w.o));
    if (c.o_bias) {
      RETURN_IF_ERROR(m.AllocT(H, &w.o_bias, wb));
      RETURN_IF_ERROR(
          upload({{p + "self_attn.o_proj.bias", {H}}}, DType::kF32, w.o_bias));
    }
    RETURN_IF_ERROR(m.Alloc(2 * I * H * eb, &w.gate_up, wb));
    RETURN_IF_ERROR(upload({{p + "mlp.gate_proj.weight", {I, H}},
                            {p + "mlp.up_proj.weight", {I, H}}},
                           o.dtype, w.gate_up));
    RETURN_IF_ERROR(m.Alloc(H * I * eb, &w.down, wb));
    RETURN_IF_ERROR(
        upload({{p + "mlp.down_proj.weight", {H, I}}}, o.dtype, w.down));
  }
  {
    const std::vector<float> inv = RopeInvFreq(c);
    RETURN_IF_ERROR(m.AllocT(inv.size(), &m.inv_freq, wb));
    RETURN_IF_ERROR(RuntimeError(
        hipMemcpy(m.inv_freq, inv.data(), inv.size() * sizeof(float),
                  hipMemcpyHostToDevice),
        "inv_freq upload"));
  }

  // ---- workspace
  const int64_t T = o.max_tokens_per_step;
  const int64_t B = o.max_batch_size;
  const int64_t R = std::max<int64_t>(o.max_logit_rows, B);
  e->options_.max_logit_rows = static_cast<int32_t>(R);
  int64_t* ws = &e->workspace_bytes_;
  RETURN_IF_ERROR(m.AllocT(T * H, &m.x, ws));
  RETURN_IF_ERROR(m.Alloc(T * H * eb, &m.h, ws));
  RETURN_IF_ERROR(m.AllocT(T * qkv_dim, &m.qkv, ws));
  RETURN_IF_ERROR(m.Alloc(T * Hq * D * eb, &m.q, ws));
  RETURN_IF_ERROR(m.Alloc(T * Hkv * D * eb, &m.k_ext, ws));
  RETURN_IF_ERROR(m.Alloc(T * Hkv * D * eb, &m.v_ext, ws));
  RETURN_IF_ERROR(m.Alloc(T * Hq * D * eb, &m.attn, ws));
  RETURN_IF_ERROR(m.AllocT(T * 2 * I, &m.gate_up, ws));
  RETURN_IF_ERROR(m.Alloc(T * I * eb, &m.act, ws));
  RETURN_IF_ERROR(m.Alloc(R * H * eb, &m.rows, ws));
  RETURN_IF_ERROR(m.AllocT(R * V, &m.logits, ws));
  RETURN_IF_ERROR(m.AllocT(R, &m.tokens, ws));
  const size_t blas_ws_bytes = size_t{32} << 20;
  RETURN_IF_ERROR(m.Alloc(blas_ws_bytes, &m.blas_ws, ws));
  gpu::BlasSetWorkspace(m.blas, m.blas_ws, blas_ws_bytes);
  const int32_t max_ctx = o.max_context_len > 0
                              ? o.max_context_len
                              : static_cast<int32_t>(std::min<int64_t>(
                                    c.max_position_embeddings, 32768));
  e->options_.max_context_len = max_ctx;
  if (e->tc_attention_) {
    // Split-KV temporaries for every (batch bucket, context bucket) a graph
    // can use, with the partition size those shapes get.
    size_t need = 0;
    for (int32_t bb = 1; bb <= RoundUpPow2(static_cast<int32_t>(B), 1);
         bb *= 2) {
      for (int32_t cb = 256; cb <= RoundUpPow2(max_ctx, 256); cb *= 2) {
        const int32_t ps = o.decode_partition_size >= 0
                               ? o.decode_partition_size
                               : gpu::ChooseDecodePartitionSize(
                                     bb, static_cast<int32_t>(Hkv),
                                     static_cast<int32_t>(Hq), cb, m.num_sms);
        need = std::max(
            need, gpu::DecodeWorkspaceBytes(bb, static_cast<int32_t>(Hq),
                                            static_cast<int32_t>(D), cb, ps));
      }
    }
    m.decode_ws_bytes = need;
    RETURN_IF_ERROR(m.Alloc(need, &m.decode_ws, ws));
    if (need > 0) {  // zero-filled once: gpu_attention.h GpuDecodeArgs
      RETURN_IF_ERROR(
          RuntimeError(hipMemset(m.decode_ws, 0, need), "decode ws zero-fill"));
    }
  }

  // ---- pool
  const int64_t slot_bytes = 2 * int64_t{c.num_hidden_layers} * Hkv * D * eb;
  const int64_t page_bytes = slot_bytes * o.page_size;
  int64_t num_pages = 0;
  if (o.kv_capacity_slots > 0) {
    num_pages = (o.kv_capacity_slots + o.page_size - 1) / o.page_size;
  } else if (o.kv_budget_bytes > 0) {
    num_pages = o.kv_budget_bytes / page_bytes;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    RETURN_IF_ERROR(
        RuntimeError(hipMemGetInfo(&free_bytes, &total_bytes), "memGetInfo"));
    // Headroom for graphs, cuBLAS internals and the metadata block.
    const double usable =
        std::max(0.0, static_cast<double>(free_bytes) - (512.0 * (1 << 20)));
    num_pages = static_cast<int64_t>(usable * o.memory_fraction) / page_bytes;
  }
  if (num_pages < 1) {
    return absl::ResourceExhaustedError("KV pool would have no pages");
  }
  m.geometry = KvCacheGeometry{num_pages,
                               o.page_size,
                               static_cast<int32_t>(Hkv),
                               static_cast<int32_t>(D),
                               m.elem,
                               o.kv_layout};
  {
    void* p = nullptr;
    RETURN_IF_ERROR(m.Alloc(static_cast<size_t>(2 * m.geometry.BytesPerLayer() *
                                                c.num_hidden_layers),
                            &p, nullptr));
    m.pool = static_cast<char*>(p);
  }
  std::vector<void*> ks, vs;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    gpu::GpuKvCache cache;
    cache.geometry = m.geometry;
    cache.dtype = o.dtype;
    cache.k = m.pool + (2 * l) * m.geometry.BytesPerLayer();
    cache.v = m.pool + (2 * l + 1) * m.geometry.BytesPerLayer();
    m.caches.push_back(cache);
    ks.push_back(cache.k);
    vs.push_back(cache.v);
  }
  RETURN_IF_ERROR(m.AllocT(ks.size(), &m.layer_k, ws));
  RETURN_IF_ERROR(m.AllocT(vs.size(), &m.layer_v, ws));
  hipMemcpy(m.layer_k, ks.data(), ks.size() * sizeof(void*),
            hipMemcpyHostToDevice);
  hipMemcpy(m.layer_v, vs.data(), vs.size() * sizeof(void*),
            hipMemcpyHostToDevice);
  if (e->tc_attention_) {
    m.copy_scratch_ops = 256;
    m.copy_scratch_bytes =
        gpu::CopyBlocksScratchBytes(m.copy_scratch_ops, c.num_hidden_layers);
    RETURN_IF_ERROR(m.Alloc(m.copy_scratch_bytes, &m.copy_scratch, ws));
  }

  // ---- metadata
  const int64_t max_kvi =
      o.max_kv_indices > 0
          ? o.max_kv_indices
          : std::max<int64_t>(m.geometry.capacity_slots(), B * max_ctx);
  e->options_.max_kv_indices = max_kvi;
  size_t off = 0;
  auto region = [&](size_t bytes) {
    const size_t at = off;
    off += (bytes + 15) / 16 * 16;
    return at;
  };
  m.off_qo = region((B + 1) * 4);
  m.off_kv = region((B + 1) * 4);
  m.off_params = region(B * sizeof(gpu::DeviceSamplingParams));
  m.off_ids = region(T * 4);
  m.off_pos = region(T * 4);
  m.off_seq = region(T * 4);
  // One row index per logit row: a return_all_logits prefill has one row
  // per token (up to T, computed in chunks of R), decode one per sequence.
  m.off_rows = region(std::max(R, T) * 4);
  m.off_ocl = region(T * 8);
  m.off_kvi = region(max_kvi * 8);
  m.meta_bytes = off;
  {
    void* p = nullptr;
    RETURN_IF_ERROR(m.Alloc(m.meta_bytes, &p, ws));
    m.meta_dev = static_cast<char*>(p);
    RETURN_IF_ERROR(RuntimeError(
        hipHostMalloc(reinterpret_cast<void**>(&m.meta_host), m.meta_bytes),
        "pinned metadata"));
    RETURN_IF_ERROR(
        RuntimeError(hipHostMalloc(reinterpret_cast<void**>(&m.logits_host),
                                   R * V * sizeof(float)),
                     "pinned logits"));
    RETURN_IF_ERROR(RuntimeError(
        hipHostMalloc(reinterpret_cast<void**>(&m.tokens_host), R * 4),
        "pinned tokens"));
  }
  spdlog::info(
      "GpuModelExecutor on cuda:{} ({} SMs): {} weights {:.1f} MiB, workspace "
      "{:.1f} MiB, KV pool {} slots ({:.1f} MiB, page_size {}), attention {}, "
      "graphs {}",
      o.device_id, m.num_sms, DTypeName(o.dtype), e->weight_bytes_ / 1048576.0,
      e->workspace_bytes_ / 1048576.0, m.geometry.capacity_slots(),
      e->pool_bytes() / 1048576.0, o.page_size,
      e->tc_attention_ ? "tensor-core (worker/kernels/hip)" : "generic",
      o.use_graphs ? "on" : "off");
  return e;
}

absl::Status GpuModelExecutor::Forward(const ForwardBatch& batch,
                                       std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("logits is null");
  return Run(batch, 0, {}, nullptr, logits);
}

absl::Status GpuModelExecutor::ForwardSample(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
    std::vector<int32_t>* token_ids) {
  if (token_ids == nullptr) {
    return absl::InvalidArgumentError("token_ids is null");
  }
  RETURN_IF_ERROR(ValidateSequenceSampling(batch, sampling));
  std::vector<GpuSamplingParams> params(sampling.size());
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    if (!s.needs_token) continue;  // greedy: argmax, no draw
    params[b].temperature = s.temperature;
    params[b].top_k = s.top_k;
    params[b].top_p = s.top_p;
    params[b].seed = s.seed;
    params[b].step = s.step;
  }
  RETURN_IF_ERROR(ForwardSample(batch, params, token_ids));
  for (size_t b = 0; b < sampling.size(); ++b) {
    if (!sampling[b].needs_token) (*token_ids)[b] = -1;
  }
  return absl::OkStatus();
}

absl::Status GpuModelExecutor::ForwardSample(
    const ForwardBatch& batch, absl::Span<const GpuSamplingParams> params,
    std::vector<int32_t>* tokens, std::vector<float>* logits) {
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens is null");
  if (batch.return_all_logits) {
    return absl::InvalidArgumentError(
        "ForwardSample samples one token per sequence; return_all_logits "
        "must be false");
  }
  if (params.size() + 1 != batch.qo_indptr.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForwardSample: ", params.size(), " sampling params for ",
                     batch.qo_indptr.empty() ? 0 : batch.qo_indptr.size() - 1,
                     " sequences"));
  }
  bool greedy = true;
  for (const GpuSamplingParams& p : params) {
    if (!(p.temperature >= 0) || p.top_k < 0 || !(p.top_p > 0) || p.top_p > 1) {
      return absl::InvalidArgumentError("bad sampling params");
    }
    greedy = greedy && p.temperature == 0;
  }
  return Run(batch, greedy ? 1 : 2, params, tokens, logits);
}

absl::Status GpuModelExecutor::Run(const ForwardBatch& batch, int mode,
                                   absl::Span<const GpuSamplingParams> params,
                                   std::vector<int32_t>* tokens,
                                   std::vector<float>* logits) {
  Impl& m = *impl_;
  const ModelConfig& c = config_;
  RETURN_IF_ERROR(ValidateForwardBatch(batch, c.vocab_size, capacity_slots(),
                                       options_.page_size));
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  const int64_t nkv = static_cast<int64_t>(batch.kv_indices.size());
  if (T > options_.max_tokens_per_step || B > options_.max_batch_size ||
      nkv > options_.max_kv_indices) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForwardBatch exceeds the GPU workspace: ", T,
                     " tokens (max ", options_.max_tokens_per_step, "), ", B,
                     " sequences (max ", options_.max_batch_size, "), ", nkv,
                     " kv_indices (max ", options_.max_kv_indices, ")"));
  }
  hipStream_t s = m.stream;

  // Copy-on-write pages first.
  if (!batch.copy_ops.empty()) {
    if (tc_attention_ && batch.copy_ops.size() <= m.copy_scratch_ops) {
      RETURN_IF_ERROR(gpu::CopyBlocks(m.caches, batch.copy_ops, m.copy_scratch,
                                      m.copy_scratch_bytes, s));
    } else {
      for (const PageCopy& op : batch.copy_ops) {
        RETURN_IF_ERROR(KernelError(
            gpu::LaunchCopyPage(m.layer_k, m.layer_v, c.num_hidden_layers,
                                m.geometry, op.src_page, op.dst_page,
                                op.num_tokens, s),
            "copy page"));
      }
    }
  }

  // Shape and graph bucket.
  Impl::Shape shape;
  shape.is_decode = batch.is_decode;
  shape.mode = mode;
  int32_t max_seq = 0, max_ext = 0;
  for (int32_t b = 0; b < B; ++b) {
    max_seq = std::max(max_seq, batch.kv_indptr[b + 1] - batch.kv_indptr[b]);
    max_ext = std::max(max_ext, batch.qo_indptr[b + 1] - batch.qo_indptr[b]);
  }
  int32_t padded_b = B;
  bool use_graph = false;
  std::tuple<int32_t, int32_t, int> key;
  if (batch.is_decode && options_.use_graphs &&
      max_seq <= options_.max_context_len) {
    padded_b = std::min(RoundUpPow2(B, 1), options_.max_batch_size);
    const int32_t ctx_bucket = std::min(
        RoundUpPow2(max_seq, 256), RoundUpPow2(options_.max_context_len, 256));
    key = {padded_b, ctx_bucket, mode};
    shape.max_seq_len = ctx_bucket;
    use_graph = true;
  } else {
    shape.max_seq_len = max_seq;
  }
  shape.batch = padded_b;
  shape.num_tokens = batch.is_decode ? padded_b : T;
  shape.max_extend_len = max_ext;
  // Decode: one row per sequence either way (so return_all_logits shares the
  // graph of its bucket).
  const bool all_rows = batch.return_all_logits && !batch.is_decode;
  const int32_t R = all_rows ? T : B;
  shape.logit_rows = all_rows ? T : padded_b;

  // Metadata into the pinned block, then one copy.
  int32_t* qo = m.Host<int32_t>(m.off_qo);
  int32_t* kv = m.Host<int32_t>(m.off_kv);
  for (int32_t b = 0; b <= padded_b; ++b) {
    qo[b] = b <= B ? batch.qo_indptr[b] : T + (b - B);
    kv[b] = b <= B ? batch.kv_indptr[b] : batch.kv_indptr[B];
  }
  int32_t* ids = m.Host<int32_t>(m.off_ids);
  int32_t* pos = m.Host<int32_t>(m.off_pos);
  int32_t* seq = m.Host<int32_t>(m.off_seq);
  int64_t* ocl = m.Host<int64_t>(m.off_ocl);
  std::memcpy(ids, batch.input_ids.data(), T * 4);
  std::memcpy(pos, batch.positions.data(), T * 4);
  std::memcpy(ocl, batch.out_cache_loc.data(), T * 8);
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t t = batch.qo_indptr[b]; t < batch.qo_indptr[b + 1]; ++t) {
      seq[t] = b;
    }
  }
  for (int32_t t = T; t < shape.num_tokens; ++t) {
    ids[t] = 0;
    pos[t] = 0;
    seq[t] = t;  // decode padding: token t is sequence t
    ocl[t] = -1;
  }
  int32_t* rows = m.Host<int32_t>(m.off_rows);
  for (int32_t r = 0; r < shape.logit_rows; ++r) {
    rows[r] = all_rows ? r : r < B ? batch.qo_indptr[r + 1] - 1 : T + (r - B);
  }
  gpu::DeviceSamplingParams* dp =
      m.Host<gpu::DeviceSamplingParams>(m.off_params);
  for (int32_t b = 0; b < padded_b; ++b) {
    gpu::DeviceSamplingParams p;
    if (b < static_cast<int32_t>(params.size())) {
      p.temperature = params[b].temperature;
      p.top_k = params[b].top_k;
      p.top_p = params[b].top_p;
      p.seed = params[b].seed;
      p.step = params[b].step;
    }
    dp[b] = p;
  }
  std::memcpy(m.Host<int64_t>(m.off_kvi), batch.kv_indices.data(), nkv * 8);
  RETURN_IF_ERROR(
      RuntimeError(hipMemcpyAsync(m.meta_dev, m.meta_host, m.off_kvi + nkv * 8,
                                  hipMemcpyHostToDevice, s),
                   "metadata upload"));

  // The step's kernels: eagerly, captured, or replayed.
  auto enqueue = [&](const Impl::Shape& sh) -> absl::Status {
    const int64_t H = c.hidden_size, D = c.head_dim;
    const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
    const int64_t I = c.intermediate_size, V = c.vocab_size;
    const int64_t qkv_dim = (Hq + 2 * Hkv) * D;
    const int32_t n = sh.num_tokens;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const float sm_scale = static_cast<float>(1.0 / std::sqrt(double(D)));
    RETURN_IF_ERROR(KernelError(
        gpu::LaunchEmbeddingGather(m.embed, m.dtype, m.Dev<int32_t>(m.off_ids),
                                   n, static_cast<int32_t>(H), m.x, s),
        "embedding"));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const Impl::Layer& w = m.layers[l];
      RETURN_IF_ERROR(KernelError(
          gpu::LaunchRmsNorm(m.x, nullptr, w.input_norm, eps, n,
                             static_cast<int32_t>(H), m.h, m.dtype, s),
          "rmsnorm"));
      RETURN_IF_ERROR(m.Gemm(m.h, w.qkv, m.qkv, n, qkv_dim, H, 0.0f));
      gpu::RopeCacheLaunch rl;
      rl.qkv = m.qkv;
      rl.bias = w.qkv_bias;
      rl.inv_freq = m.inv_freq;
      rl.positions = m.Dev<int32_t>(m.off_pos);
      rl.out_cache_loc = m.Dev<int64_t>(m.off_ocl);
      rl.num_tokens = n;
      rl.num_q_heads = static_cast<int32_t>(Hq);
      rl.num_kv_heads = static_cast<int32_t>(Hkv);
      rl.head_dim = static_cast<int32_t>(D);
      rl.act = m.dtype;
      rl.q = m.q;
      const bool tc_extend = tc_attention_ && !sh.is_decode;
      rl.k_out = tc_extend ? m.k_ext : nullptr;
      rl.v_out = tc_extend ? m.v_ext : nullptr;
      rl.geometry = m.geometry;
      rl.k_cache = m.caches[l].k;
      rl.v_cache = m.caches[l].v;
      RETURN_IF_ERROR(
          KernelError(gpu::LaunchRopeAndCache(rl, s), "rope+cache"));
      if (tc_attention_ && sh.is_decode) {
        RETURN_IF_ERROR(gpu::Decode(
            m.caches[l],
            m.DecodeArgs(sh, c, sm_scale, options_.decode_partition_size), s));
      } else if (tc_attention_) {
        RETURN_IF_ERROR(
            gpu::Extend(m.caches[l], m.ExtendArgs(sh, c, sm_scale), s));
      } else {
        gpu::GenericAttentionLaunch a;
        a.q = m.q;
        a.qo_indptr = m.Dev<int32_t>(m.off_qo);
        a.kv_indptr = m.Dev<int32_t>(m.off_kv);
        a.kv_indices = m.Dev<int64_t>(m.off_kvi);
        a.out_cache_loc = m.Dev<int64_t>(m.off_ocl);
        a.token_seq = m.Dev<int32_t>(m.off_seq);
        a.num_tokens = n;
        a.num_q_heads = static_cast<int32_t>(Hq);
        a.sm_scale = sm_scale;
        a.causal_extend = !sh.is_decode;
        a.act = m.dtype;
        a.geometry = m.geometry;
        a.k_cache = m.caches[l].k;
        a.v_cache = m.caches[l].v;
        a.out = m.attn;
        RETURN_IF_ERROR(
            KernelError(gpu::LaunchGenericAttention(a, s), "attention"));
      }
      if (w.o_bias != nullptr) {
        RETURN_IF_ERROR(KernelError(
            gpu::LaunchAddBias(m.x, w.o_bias, n, static_cast<int32_t>(H), s),
            "o bias"));
      }
      RETURN_IF_ERROR(m.Gemm(m.attn, w.o, m.x, n, H, Hq * D, 1.0f));
      RETURN_IF_ERROR(KernelError(
          gpu::LaunchRmsNorm(m.x, nullptr, w.post_norm, eps, n,
                             static_cast<int32_t>(H), m.h, m.dtype, s),
          "rmsnorm"));
      RETURN_IF_ERROR(m.Gemm(m.h, w.gate_up, m.gate_up, n, 2 * I, H, 0.0f));
      RETURN_IF_ERROR(KernelError(
          gpu::LaunchSiluAndMul(m.gate_up, n, static_cast<int32_t>(I), m.act,
                                m.dtype, s),
          "silu"));
      RETURN_IF_ERROR(m.Gemm(m.act, w.down, m.x, n, H, I, 1.0f));
    }
    if (sh.logit_rows <= options_.max_logit_rows) {
      RETURN_IF_ERROR(KernelError(
          gpu::LaunchRmsNorm(m.x, m.Dev<int32_t>(m.off_rows), m.final_norm, eps,
                             sh.logit_rows, static_cast<int32_t>(H), m.rows,
                             m.dtype, s),
          "final norm"));
      RETURN_IF_ERROR(
          m.Gemm(m.rows, m.lm_head, m.logits, sh.logit_rows, V, H, 0.0f));
      if (sh.mode == 1) {
        RETURN_IF_ERROR(
            KernelError(gpu::LaunchArgmax(m.logits, sh.logit_rows,
                                          static_cast<int32_t>(V), m.tokens, s),
                        "argmax"));
      } else if (sh.mode == 2) {
        RETURN_IF_ERROR(KernelError(
            gpu::LaunchSample(m.logits, sh.logit_rows, static_cast<int32_t>(V),
                              m.Dev<gpu::DeviceSamplingParams>(m.off_params),
                              m.tokens, s),
            "sample"));
      }
    }
    return absl::OkStatus();
  };

  last_step_.graph_replayed = false;
  last_step_.batch_bucket = padded_b;
  if (use_graph) {
    auto it = m.graphs.find(key);
    if (it == m.graphs.end() && m.seen[key]++ >= 1) {
      // Second step of this bucket: capture (the first ran eagerly and did
      // every lazy initialization of the kernels and cuBLAS).
      hipGraph_t graph = nullptr;
      RETURN_IF_ERROR(RuntimeError(
          hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal),
          "begin capture"));
      absl::Status st = enqueue(shape);
      hipError_t end = hipStreamEndCapture(s, &graph);
      RETURN_IF_ERROR(st);
      RETURN_IF_ERROR(RuntimeError(end, "end capture"));
      hipGraphExec_t exec = nullptr;
      hipError_t inst = hipGraphInstantiateWithFlags(&exec, graph, 0);
      hipGraphDestroy(graph);
      RETURN_IF_ERROR(RuntimeError(inst, "graph instantiate"));
      it = m.graphs.emplace(key, exec).first;
    }
    if (it != m.graphs.end()) {
      RETURN_IF_ERROR(RuntimeError(hipGraphLaunch(it->second, s), "graph"));
      last_step_.graph_replayed = true;
    } else {
      RETURN_IF_ERROR(enqueue(shape));
    }
  } else {
    RETURN_IF_ERROR(enqueue(shape));
  }
  m.last_shape = shape;
  m.have_last = true;

  // Outputs.
  const int64_t V = c.vocab_size;
  if (logits != nullptr) logits->resize(static_cast<size_t>(R) * V);
  if (shape.logit_rows > options_.max_logit_rows) {
    // All-token logits larger than the logits buffer: chunks, eagerly.
    const float eps = static_cast<float>(c.rms_norm_eps);
    for (int32_t r0 = 0; r0 < R; r0 += options_.max_logit_rows) {
      const int32_t n = std::min(options_.max_logit_rows, R - r0);
      RETURN_IF_ERROR(KernelError(
          gpu::LaunchRmsNorm(m.x, m.Dev<int32_t>(m.off_rows) + r0, m.final_norm,
                             eps, n, c.hidden_size, m.rows, m.dtype, s),
          "final norm"));
      RETURN_IF_ERROR(
          m.Gemm(m.rows, m.lm_head, m.logits, n, V, c.hidden_size, 0.0f));
      RETURN_IF_ERROR(RuntimeError(
          hipMemcpyAsync(m.logits_host, m.logits, n * V * sizeof(float),
                         hipMemcpyDeviceToHost, s),
          "logits download"));
      RETURN_IF_ERROR(RuntimeError(hipStreamSynchronize(s), "step"));
      std::memcpy(logits->data() + static_cast<size_t>(r0) * V, m.logits_host,
                  n * V * sizeof(float));
    }
    return absl::OkStatus();
  }
  if (logits != nullptr) {
    RETURN_IF_ERROR(RuntimeError(
        hipMemcpyAsync(m.logits_host, m.logits, R * V * sizeof(float),
                       hipMemcpyDeviceToHost, s),
        "logits download"));
  }
  if (tokens != nullptr) {
    RETURN_IF_ERROR(RuntimeError(
        hipMemcpyAsync(m.tokens_host, m.tokens, B * sizeof(int32_t),
                       hipMemcpyDeviceToHost, s),
        "tokens download"));
  }
  RETURN_IF_ERROR(RuntimeError(hipStreamSynchronize(s), "step"));
  if (logits != nullptr) {
    std::memcpy(logits->data(), m.logits_host, R * V * sizeof(float));
  }
  if (tokens != nullptr) tokens->assign(m.tokens_host, m.tokens_host + B);
  return absl::OkStatus();
}

namespace {
absl::StatusOr<double> TimeLoop(hipStream_t s, int iterations,
                                const std::function<absl::Status()>& body) {
  hipEvent_t start, stop;
  hipEventCreate(&start);
  hipEventCreate(&stop);
  hipEventRecord(start, s);
  for (int i = 0; i < iterations; ++i) {
    if (absl::Status st = body(); !st.ok()) return st;
  }
  hipEventRecord(stop, s);
  hipEventSynchronize(stop);
  float ms = 0;
  hipEventElapsedTime(&ms, start, stop);
  hipEventDestroy(start);
  hipEventDestroy(stop);
  return ms / 1e3 / iterations;
}
}  // namespace

absl::StatusOr<double> GpuModelExecutor::TimeAttentionOnly(int iterations) {
  // Any scale times the same kernels; 1/sqrt(64), the benchmark's head_dim.
  constexpr float kTimingSmScale = 0.125f;
  Impl& m = *impl_;
  if (!m.have_last) return absl::FailedPreconditionError("no step yet");
  const Impl::Shape sh = m.last_shape;
  const ModelConfig& c = config_;
  return TimeLoop(m.stream, iterations, [&]() -> absl::Status {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      if (tc_attention_ && sh.is_decode) {
        RETURN_IF_ERROR(gpu::Decode(
            m.caches[l],
            m.DecodeArgs(sh, c, kTimingSmScale, options_.decode_partition_size),
            m.stream));
      } else if (tc_attention_) {
        RETURN_IF_ERROR(gpu::Extend(
            m.caches[l], m.ExtendArgs(sh, c, kTimingSmScale), m.stream));
      } else {
        return absl::UnimplementedError("generic attention timing");
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<double> GpuModelExecutor::TimeGemmsOnly(int iterations) {
  Impl& m = *impl_;
  if (!m.have_last) return absl::FailedPreconditionError("no step yet");
  const Impl::Shape sh = m.last_shape;
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size;
  const int64_t n = sh.num_tokens;
  return TimeLoop(m.stream, iterations, [&]() -> absl::Status {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const Impl::Layer& w = m.layers[l];
      RETURN_IF_ERROR(
          m.Gemm(m.h, w.qkv, m.qkv, n, (Hq + 2 * Hkv) * D, H, 0.0f));
      RETURN_IF_ERROR(m.Gemm(m.attn, w.o, m.x, n, H, Hq * D, 1.0f));
      RETURN_IF_ERROR(m.Gemm(m.h, w.gate_up, m.gate_up, n, 2 * I, H, 0.0f));
      RETURN_IF_ERROR(m.Gemm(m.act, w.down, m.x, n, H, I, 1.0f));
    }
    return m.Gemm(m.rows, m.lm_head, m.logits, sh.logit_rows, c.vocab_size, H,
                  0.0f);
  });
}

}  // namespace radixkv::worker
