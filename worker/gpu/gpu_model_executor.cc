#include "worker/gpu/gpu_model_executor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/forward_batch_validation.h"
#include "worker/gpu/decode_graphs.h"
#include "worker/gpu/device_logit_processing.h"
#include "worker/gpu/device_memory.h"
#include "worker/gpu/device_prompt_logprobs.h"
#include "worker/gpu/gpu_forward.h"
#include "worker/gpu/gpu_gemm.h"
#include "worker/gpu/gpu_kv_pool.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/gpu_weights.h"
#include "worker/gpu/gpu_workspace.h"
#include "worker/gpu/model_kernels.h"
#include "worker/gpu/step_metadata.h"

namespace radixkv::worker {

static_assert(gpu::kDeviceSamplingFailedToken == kSamplingFailedToken,
              "the device kernels report a NaN row with the host's value");

namespace {

using gpu::RuntimeError;
using gpu::StepOutput;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", what));
}

absl::Status CheckOptions(const GpuModelExecutorOptions& o) {
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
  return absl::OkStatus();
}

// INVALID_ARGUMENT when `batch` exceeds the workspace capacities.
absl::Status CheckFitsWorkspace(const ForwardBatch& batch,
                                const GpuModelExecutorOptions& o) {
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  const int64_t nkv = static_cast<int64_t>(batch.kv_indices.size());
  if (T > o.max_tokens_per_step || B > o.max_batch_size ||
      nkv > o.max_kv_indices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardBatch exceeds the GPU workspace: ", T, " tokens (max ",
        o.max_tokens_per_step, "), ", B, " sequences (max ", o.max_batch_size,
        "), ", nkv, " kv_indices (max ", o.max_kv_indices, ")"));
  }
  return absl::OkStatus();
}

// Seconds per iteration of `body`, measured with events on stream `s`.
absl::StatusOr<double> TimeLoop(hipStream_t s, int iterations,
                                const std::function<absl::Status()>& body) {
  hipEvent_t start, stop;
  hipEventCreate(&start);
  hipEventCreate(&stop);
  hipEventRecord(start, s);
  absl::Status st;
  for (int i = 0; i < iterations && st.ok(); ++i) st = body();
  hipEventRecord(stop, s);
  hipEventSynchronize(stop);
  float ms = 0;
  hipEventElapsedTime(&ms, start, stop);
  hipEventDestroy(start);
  hipEventDestroy(stop);
  if (!st.ok()) return st;
  return ms / 1e3 / iterations;
}

// The executor's stream, destroyed after everything that runs on it.
class OwnedStream {
 public:
  OwnedStream() = default;
  ~OwnedStream() {
    if (stream_ != nullptr) hipStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  absl::Status Create() {
    return RuntimeError(hipStreamCreate(&stream_), "stream");
  }
  hipStream_t get() const { return stream_; }

 private:
  hipStream_t stream_ = nullptr;
};

}  // namespace

// Members in destruction order last to first: graphs, then the BLAS handle,
// then device and pinned memory, then the stream.
struct GpuModelExecutor::Impl {
  OwnedStream stream;
  gpu::DeviceMemory memory;
  gpu::GpuGemm gemm;
  gpu::GpuWeights weights;
  gpu::GpuWorkspace workspace;
  gpu::GpuKvPool pool;
  gpu::DecodeGraphCache graphs;
  gpu::GpuForward forward;
  gpu::DeviceLogitProcessing processing;
  gpu::DevicePromptLogprobs prompt_logprobs;
  int num_sms = 132;
  // The last step's shape, for the benchmark hooks.
  gpu::StepShape last_shape;
  bool have_last = false;

  absl::Status OpenDevice(const GpuModelExecutorOptions& o);
  absl::Status Allocate(GpuModelExecutor& e);
  absl::Status Download(const gpu::StepPlan& plan, int32_t batch,
                        std::vector<int32_t>* tokens,
                        std::vector<float>* logits);
};

absl::Status GpuModelExecutor::Impl::OpenDevice(
    const GpuModelExecutorOptions& o) {
  int count = 0;
  if (hipError_t err = hipGetDeviceCount(&count);
      err != hipSuccess || count <= o.device_id) {
    return absl::UnavailableError(
        absl::StrCat("no GPU device ", o.device_id, " (", count,
                     " visible): ", hipGetErrorString(err)));
  }
  RADIXKV_RETURN_IF_ERROR(
      RuntimeError(hipSetDevice(o.device_id), "hipSetDevice"));
  hipDeviceGetAttribute(&num_sms, hipDeviceAttributeMultiprocessorCount,
                        o.device_id);
  RADIXKV_RETURN_IF_ERROR(stream.Create());
  return gemm.Init(stream.get(), o.dtype,
                   std::clamp(o.small_batch_gemm_max_rows, 0, 16));
}

// Weights, then the activations, then the pool from what is left, then the
// metadata block (its kv_indices region depends on the pool's size).
absl::Status GpuModelExecutor::Impl::Allocate(GpuModelExecutor& e) {
  GpuModelExecutorOptions& o = e.options_;
  const model::ModelConfig& c = e.config_;
  absl::StatusOr<gpu::GpuWeights> w =
      gpu::UploadWeights(c, o.model_dir, o.dtype, &memory, &e.weight_bytes_);
  if (!w.ok()) return w.status();
  weights = *std::move(w);
  o = gpu::WithWorkspaceDefaults(o, c);
  RADIXKV_RETURN_IF_ERROR(gpu::AllocateActivations(o, c, e.tc_attention_,
                                                   num_sms, &memory, &workspace,
                                                   &e.workspace_bytes_));
  gemm.BindWorkspace(workspace.blas, workspace.blas_bytes);
  // The logits buffer is written only by the LM head after the last layer:
  // free for the tuner's timed candidates of the residual GEMMs.
  gemm.BindTuningScratch(workspace.logits,
                         static_cast<size_t>(o.max_logit_rows) * c.vocab_size);
  gemm.set_autotune(o.gemm_autotune);
  gemm.set_fuse_norm(o.fuse_rms_norm);
  absl::StatusOr<gpu::GpuKvPool> p =
      gpu::AllocateKvPool(o, c, e.tc_attention_, &memory, &e.workspace_bytes_);
  if (!p.ok()) return p.status();
  pool = *std::move(p);
  o.max_kv_indices =
      gpu::ResolveMaxKvIndices(o, pool.geometry.capacity_slots());
  RADIXKV_RETURN_IF_ERROR(gpu::AllocateStepMetadata(o, c, &memory, &workspace,
                                                    &e.workspace_bytes_));
  // A row's distinct history tokens are at most its context (kv_indices)
  // plus the token being decoded, and at most the vocabulary.
  RADIXKV_RETURN_IF_ERROR(processing.Allocate(
      o.max_batch_size,
      std::min<int64_t>(o.max_kv_indices + o.max_batch_size,
                        static_cast<int64_t>(o.max_batch_size) * c.vocab_size),
      &memory, &e.workspace_bytes_));
  RADIXKV_RETURN_IF_ERROR(
      prompt_logprobs.Allocate(o.max_logit_rows, &memory, &e.workspace_bytes_));
  forward.config = &e.config_;
  forward.weights = &weights;
  forward.pool = &pool;
  forward.workspace = &workspace;
  forward.gemm = &gemm;
  forward.stream = stream.get();
  forward.dtype = o.dtype;
  forward.tensor_core_attention = e.tc_attention_;
  forward.decode_partition_size = o.decode_partition_size;
  forward.max_logit_rows = o.max_logit_rows;
  forward.num_sms = num_sms;
  return absl::OkStatus();
}

// Copies the step's outputs to the host: plan.output_rows logit rows when
// `logits` is non-null (all-token logits beyond the buffer in chunks),
// `batch` tokens when `tokens` is non-null.
absl::Status GpuModelExecutor::Impl::Download(const gpu::StepPlan& plan,
                                              int32_t batch,
                                              std::vector<int32_t>* tokens,
                                              std::vector<float>* logits) {
  const int32_t R = plan.output_rows;
  const int64_t V = forward.config->vocab_size;
  hipStream_t s = stream.get();
  if (logits != nullptr) logits->resize(static_cast<size_t>(R) * V);
  if (plan.shape.logit_rows > forward.max_logit_rows) {
    return gpu::ChunkedLogits(forward, R, logits->data());
  }
  if (logits != nullptr) {
    RADIXKV_RETURN_IF_ERROR(RuntimeError(
        hipMemcpyAsync(workspace.logits_host, workspace.logits,
                       R * V * sizeof(float), hipMemcpyDeviceToHost, s),
        "logits download"));
  }
  if (tokens != nullptr) {
    RADIXKV_RETURN_IF_ERROR(RuntimeError(
        hipMemcpyAsync(workspace.tokens_host, workspace.tokens,
                       batch * sizeof(int32_t), hipMemcpyDeviceToHost, s),
        "tokens download"));
  }
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipStreamSynchronize(s), "step"));
  if (logits != nullptr) {
    std::memcpy(logits->data(), workspace.logits_host, R * V * sizeof(float));
  }
  if (tokens != nullptr) {
    tokens->assign(workspace.tokens_host, workspace.tokens_host + batch);
  }
  return absl::OkStatus();
}

GpuModelExecutor::~GpuModelExecutor() = default;

int64_t GpuModelExecutor::capacity_slots() const {
  return impl_->pool.geometry.capacity_slots();
}

int64_t GpuModelExecutor::pool_bytes() const {
  return 2 * impl_->pool.geometry.BytesPerLayer() * config_.num_hidden_layers;
}

void GpuModelExecutor::set_small_batch_gemm_max_rows(int32_t rows) {
  options_.small_batch_gemm_max_rows = std::clamp(rows, 0, 16);
  impl_->gemm.set_small_batch_max_rows(options_.small_batch_gemm_max_rows);
  // Captured graphs hold the previous choice: drop them.
  impl_->graphs.Clear();
}

void GpuModelExecutor::set_fuse_rms_norm(bool on) {
  options_.fuse_rms_norm = on;
  impl_->gemm.set_fuse_norm(on);
  impl_->graphs.Clear();
}

void GpuModelExecutor::set_gemm_autotune(bool on) {
  options_.gemm_autotune = on;
  impl_->gemm.set_autotune(on);
  impl_->graphs.Clear();
}

std::string GpuModelExecutor::gemm_tuning() const {
  return impl_->gemm.DescribeTuning();
}

int GpuModelExecutor::num_graphs() const { return impl_->graphs.size(); }

std::string GpuModelExecutor::device() const {
  return absl::StrCat("cuda:", options_.device_id);
}

absl::StatusOr<std::unique_ptr<GpuModelExecutor>> GpuModelExecutor::Create(
    const GpuModelExecutorOptions& options) {
  std::unique_ptr<GpuModelExecutor> e(new GpuModelExecutor());
  e->options_ = options;
  e->impl_ = std::make_unique<Impl>();
  RADIXKV_RETURN_IF_ERROR(CheckOptions(options));
  absl::StatusOr<model::ModelConfig> config =
      model::LoadModelConfig(options.model_dir);
  if (!config.ok()) return config.status();
  e->config_ = *config;
  const model::ModelConfig& c = e->config_;
  if (c.head_dim > 256 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("head_dim must be even and <= 256");
  }
  Impl& m = *e->impl_;
  RADIXKV_RETURN_IF_ERROR(m.OpenDevice(options));
  e->tc_attention_ =
      options.use_tensor_core_attention && options.dtype != DType::kF32 &&
      (c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256);
  RADIXKV_RETURN_IF_ERROR(m.Allocate(*e));
  const GpuModelExecutorOptions& o = e->options_;
  spdlog::info(
      "GpuModelExecutor on cuda:{} ({} SMs): {} weights {:.1f} MiB, workspace "
      "{:.1f} MiB, KV pool {} slots ({:.1f} MiB, page_size {}), attention {}, "
      "graphs {}",
      o.device_id, m.num_sms, DTypeName(o.dtype), e->weight_bytes_ / 1048576.0,
      e->workspace_bytes_ / 1048576.0, m.pool.geometry.capacity_slots(),
      e->pool_bytes() / 1048576.0, o.page_size,
      e->tc_attention_ ? "tensor-core (worker/kernels/hip)" : "generic",
      o.use_graphs ? "on" : "off");
  return e;
}

absl::Status GpuModelExecutor::Forward(const ForwardBatch& batch,
                                       std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("logits is null");
  return Run(batch, StepOutput::kLogits, {}, nullptr, logits);
}

absl::Status GpuModelExecutor::ForwardSample(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
    std::vector<int32_t>* token_ids) {
  if (token_ids == nullptr) {
    return absl::InvalidArgumentError("token_ids is null");
  }
  RADIXKV_RETURN_IF_ERROR(ValidateSequenceSampling(batch, sampling));
  bool on_host = false;
  RADIXKV_RETURN_IF_ERROR(SampleRows(batch, sampling, token_ids, &on_host));
  // The host path computed the prompt logprobs from all-token logits.
  if (on_host || !WantsPromptLogprobs(sampling)) return absl::OkStatus();
  return impl_->prompt_logprobs.Run(impl_->forward, batch, sampling);
}

absl::Status GpuModelExecutor::SampleRows(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
    std::vector<int32_t>* token_ids, bool* on_host) {
  std::vector<GpuSamplingParams> params(sampling.size());
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    if (!s.needs_token) continue;  // greedy: argmax, no draw
    // top_k 1 is greedy whatever the temperature, as in the CPU sampler.
    params[b].temperature = s.top_k == 1 ? 0.0f : s.temperature;
    params[b].top_k = s.top_k;
    params[b].top_p = s.top_p;
    params[b].min_p = s.min_p;
    params[b].seed = s.seed;
    params[b].step = s.step;
  }
  // Penalties and logprobs: the logit processors run on the device after
  // the forward (device_logit_processing.h). Only a batch whose histories
  // exceed their buffer samples on the host (the B x vocab copy).
  if (gpu::NeedsDeviceProcessors(sampling)) {
    if (!impl_->processing.Prepare(sampling, config_.vocab_size)) {
      *on_host = true;
      return ModelExecutor::ForwardSample(batch, sampling, token_ids);
    }
    RADIXKV_RETURN_IF_ERROR(Run(batch, StepOutput::kLogits, params, nullptr,
                                nullptr, &impl_->processing));
    impl_->processing.Finish(sampling, token_ids);
    return absl::OkStatus();
  }
  RADIXKV_RETURN_IF_ERROR(ForwardSample(batch, params, token_ids));
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
    if (!(p.temperature >= 0) || p.top_k < 0 || !(p.top_p > 0) || p.top_p > 1 ||
        !(p.min_p >= 0) || p.min_p > 1) {
      return absl::InvalidArgumentError("bad sampling params");
    }
    greedy = greedy && p.temperature == 0;
  }
  return Run(batch, greedy ? StepOutput::kArgmax : StepOutput::kSample, params,
             tokens, logits);
}

// Validation, copy-on-write pages, the metadata upload, the kernels (eager,
// captured or replayed), the outputs.
absl::Status GpuModelExecutor::Run(const ForwardBatch& batch, StepOutput output,
                                   absl::Span<const GpuSamplingParams> params,
                                   std::vector<int32_t>* tokens,
                                   std::vector<float>* logits,
                                   gpu::DeviceLogitProcessing* processing) {
  Impl& m = *impl_;
  RADIXKV_RETURN_IF_ERROR(ValidateForwardBatch(
      batch, config_.vocab_size, capacity_slots(), options_.page_size));
  RADIXKV_RETURN_IF_ERROR(CheckFitsWorkspace(batch, options_));
  hipStream_t s = m.stream.get();
  RADIXKV_RETURN_IF_ERROR(gpu::CopyPages(m.pool, batch.copy_ops, s));
  const gpu::StepPlan plan = gpu::PlanStep(batch, output, options_);
  const gpu::GpuWorkspace& ws = m.workspace;
  const size_t meta_bytes =
      gpu::FillStepMetadata(batch, plan.shape, params, ws.meta, ws.meta_host);
  RADIXKV_RETURN_IF_ERROR(
      RuntimeError(hipMemcpyAsync(ws.meta_dev, ws.meta_host, meta_bytes,
                                  hipMemcpyHostToDevice, s),
                   "metadata upload"));
  last_step_.graph_replayed = false;
  last_step_.batch_bucket = plan.shape.batch;
  auto enqueue = [&] { return gpu::EnqueueForward(m.forward, plan.shape); };
  if (plan.use_graph) {
    RADIXKV_RETURN_IF_ERROR(
        m.graphs.Run(plan.graph_key, s, enqueue, &last_step_.graph_replayed));
  } else {
    RADIXKV_RETURN_IF_ERROR(enqueue());
  }
  m.last_shape = plan.shape;
  m.have_last = true;
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  if (processing != nullptr) {
    return processing->Run(ws.logits, config_.vocab_size,
                           ws.Dev<gpu::DeviceSamplingParams>(ws.meta.params),
                           ws.tokens, s);
  }
  return m.Download(plan, B, tokens, logits);
}

absl::StatusOr<double> GpuModelExecutor::TimeAttentionOnly(int iterations) {
  // The scale does not change the work; any value times the same kernels.
  constexpr float kTimingSmScale = 0.125f;
  Impl& m = *impl_;
  if (!m.have_last) return absl::FailedPreconditionError("no step yet");
  const gpu::StepShape sh = m.last_shape;
  return TimeLoop(m.stream.get(), iterations, [&]() -> absl::Status {
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      if (!tc_attention_) {
        return absl::UnimplementedError("generic attention timing");
      }
      RADIXKV_RETURN_IF_ERROR(
          gpu::EnqueueAttention(m.forward, sh, l, kTimingSmScale));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<double> GpuModelExecutor::TimeGemmsOnly(int iterations) {
  Impl& m = *impl_;
  if (!m.have_last) return absl::FailedPreconditionError("no step yet");
  const gpu::StepShape sh = m.last_shape;
  return TimeLoop(m.stream.get(), iterations, [&]() -> absl::Status {
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      RADIXKV_RETURN_IF_ERROR(
          gpu::EnqueueLayerGemms(m.forward, l, sh.num_tokens));
    }
    return m.gemm.Run(m.workspace.rows, m.weights.lm_head, m.workspace.logits,
                      sh.logit_rows, config_.vocab_size, config_.hidden_size,
                      0.0f);
  });
}

}  // namespace radixkv::worker
