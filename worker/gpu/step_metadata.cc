#include "worker/gpu/step_metadata.h"

#include <algorithm>
#include <cstring>

#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {
namespace {

template <typename T>
T* Region(char* host, size_t offset) {
  return reinterpret_cast<T*>(host + offset);
}

bool AllTokenRows(const ForwardBatch& batch) {
  return batch.return_all_logits && !batch.is_decode;
}

// The indptr arrays, padded: padding sequence b >= B has new token T + (b -
// B) and an empty context.
void FillIndptr(const ForwardBatch& batch, const StepShape& shape, int32_t* qo,
                int32_t* kv) {
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  for (int32_t b = 0; b <= shape.batch; ++b) {
    qo[b] = b <= B ? batch.qo_indptr[b] : T + (b - B);
    kv[b] = b <= B ? batch.kv_indptr[b] : batch.kv_indptr[B];
  }
}

void FillTokens(const ForwardBatch& batch, const StepShape& shape,
                const StepMetadataLayout& l, char* host) {
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  int32_t* ids = Region<int32_t>(host, l.ids);
  int32_t* pos = Region<int32_t>(host, l.positions);
  int32_t* seq = Region<int32_t>(host, l.seq);
  int64_t* ocl = Region<int64_t>(host, l.out_cache_loc);
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
}

// Row r reads x row r (all-token logits), else the last new token of
// sequence r (padding rows: the padding token).
void FillRows(const ForwardBatch& batch, const StepShape& shape,
              int32_t* rows) {
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  const bool all_rows = AllTokenRows(batch);
  for (int32_t r = 0; r < shape.logit_rows; ++r) {
    rows[r] = all_rows ? r : r < B ? batch.qo_indptr[r + 1] - 1 : T + (r - B);
  }
}

void FillParams(absl::Span<const GpuSamplingParams> params, int32_t batch,
                DeviceSamplingParams* dp) {
  for (int32_t b = 0; b < batch; ++b) {
    DeviceSamplingParams p;
    if (b < static_cast<int32_t>(params.size())) {
      p.temperature = params[b].temperature;
      p.top_k = params[b].top_k;
      p.top_p = params[b].top_p;
      p.min_p = params[b].min_p;
      p.seed = params[b].seed;
      p.step = params[b].step;
    }
    dp[b] = p;
  }
}

}  // namespace

StepPlan PlanStep(const ForwardBatch& batch, StepOutput output,
                  const GpuModelExecutorOptions& options) {
  const int32_t T = static_cast<int32_t>(batch.input_ids.size());
  const int32_t B = static_cast<int32_t>(batch.qo_indptr.size() - 1);
  int32_t max_seq = 0, max_ext = 0;
  for (int32_t b = 0; b < B; ++b) {
    max_seq = std::max(max_seq, batch.kv_indptr[b + 1] - batch.kv_indptr[b]);
    max_ext = std::max(max_ext, batch.qo_indptr[b + 1] - batch.qo_indptr[b]);
  }
  StepPlan plan;
  StepShape& shape = plan.shape;
  shape.is_decode = batch.is_decode;
  shape.output = output;
  shape.batch = B;
  shape.max_seq_len = max_seq;
  if (batch.is_decode && options.use_graphs &&
      max_seq <= options.max_context_len) {
    const DecodeBucket bucket = ChooseDecodeBucket(
        B, max_seq, options.max_batch_size, options.max_context_len);
    shape.batch = bucket.batch;
    shape.max_seq_len = bucket.context;
    plan.use_graph = true;
    plan.graph_key = {bucket.batch, bucket.context, static_cast<int>(output)};
  }
  shape.num_tokens = batch.is_decode ? shape.batch : T;
  shape.max_extend_len = max_ext;
  // Decode: one row per sequence either way (so return_all_logits shares the
  // graph of its bucket).
  const bool all_rows = AllTokenRows(batch);
  plan.output_rows = all_rows ? T : B;
  shape.logit_rows = all_rows ? T : shape.batch;
  return plan;
}

size_t FillStepMetadata(const ForwardBatch& batch, const StepShape& shape,
                        absl::Span<const GpuSamplingParams> params,
                        const StepMetadataLayout& layout, char* host) {
  FillIndptr(batch, shape, Region<int32_t>(host, layout.qo_indptr),
             Region<int32_t>(host, layout.kv_indptr));
  FillTokens(batch, shape, layout, host);
  FillRows(batch, shape, Region<int32_t>(host, layout.rows));
  FillParams(params, shape.batch,
             Region<DeviceSamplingParams>(host, layout.params));
  const size_t nkv = batch.kv_indices.size();
  std::memcpy(Region<int64_t>(host, layout.kv_indices), batch.kv_indices.data(),
              nkv * 8);
  return layout.kv_indices + nkv * 8;
}

}  // namespace radixkv::worker::gpu
