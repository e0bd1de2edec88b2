#include "worker/gpu/device_logit_processing.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {
namespace {

bool HasPenalties(const SequenceSampling& s) {
  return s.needs_token &&
         (s.repetition_penalty != 1.0f || s.frequency_penalty != 0.0f ||
          s.presence_penalty != 0.0f);
}

// Appends the distinct in-vocabulary ids of `s`'s history, prompt first.
void AppendSeen(const SequenceSampling& s, int32_t vocab,
                absl::flat_hash_map<int32_t, int32_t>* index,
                std::vector<DeviceSeenToken>* seen) {
  index->clear();
  auto entry = [&](int32_t id) -> DeviceSeenToken* {
    if (id < 0 || id >= vocab) return nullptr;
    auto [it, inserted] =
        index->try_emplace(id, static_cast<int32_t>(seen->size()));
    if (inserted) seen->push_back({id, 0, 0});
    return &(*seen)[it->second];
  };
  for (int32_t id : s.prompt) {
    if (DeviceSeenToken* t = entry(id)) t->in_prompt = 1;
  }
  for (int32_t id : s.output) {
    if (DeviceSeenToken* t = entry(id)) ++t->output_count;
  }
}

}  // namespace

bool NeedsDeviceProcessors(absl::Span<const SequenceSampling> sampling) {
  return std::any_of(
      sampling.begin(), sampling.end(), [](const SequenceSampling& s) {
        return HasPenalties(s) || (s.needs_token && s.logprobs > 0);
      });
}

absl::Status DeviceLogitProcessing::Allocate(int32_t max_batch,
                                             int64_t max_seen,
                                             DeviceMemory* memory,
                                             int64_t* bytes) {
  max_batch_ = max_batch;
  max_seen_ = max_seen;
  penalties_off_ = AlignUp16(sizeof(int32_t) * (max_batch + 1));
  logprob_off_ =
      penalties_off_ + AlignUp16(sizeof(DevicePenalties) * max_batch);
  seen_off_ = logprob_off_ + AlignUp16(sizeof(DeviceLogprobParams) * max_batch);
  const size_t block = seen_off_ + sizeof(DeviceSeenToken) * max_seen;
  void* p = nullptr;
  RADIXKV_RETURN_IF_ERROR(memory->Alloc(block, &p, bytes));
  dev_ = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(memory->AllocPinned(block, &p, "pinned penalties"));
  host_ = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(logprobs_.Allocate(max_batch, memory, bytes));
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocPinned(max_batch * sizeof(int32_t), &p, "pinned tokens"));
  tokens_host_ = static_cast<int32_t*>(p);
  return absl::OkStatus();
}

bool DeviceLogitProcessing::Prepare(absl::Span<const SequenceSampling> sampling,
                                    int32_t vocab) {
  rows_ = static_cast<int32_t>(sampling.size());
  if (rows_ > max_batch_) return false;
  auto* indptr = reinterpret_cast<int32_t*>(host_);
  auto* pen = reinterpret_cast<DevicePenalties*>(host_ + penalties_off_);
  auto* lp = reinterpret_cast<DeviceLogprobParams*>(host_ + logprob_off_);
  std::vector<DeviceSeenToken> seen;
  absl::flat_hash_map<int32_t, int32_t> index;
  top_stride_ = 0;
  penalties_ = false;
  indptr[0] = 0;
  for (int32_t r = 0; r < rows_; ++r) {
    const SequenceSampling& s = sampling[r];
    pen[r] = DevicePenalties{};
    if (HasPenalties(s)) {
      pen[r] = {s.repetition_penalty, s.frequency_penalty, s.presence_penalty};
      penalties_ = true;
      AppendSeen(s, vocab, &index, &seen);
      if (static_cast<int64_t>(seen.size()) > max_seen_) return false;
    }
    indptr[r + 1] = static_cast<int32_t>(seen.size());
    // The CPU sampler's greedy rule: temperature 0 or top_k 1, logprobs at
    // temperature 1.
    const bool greedy = s.temperature == 0.0f || s.top_k == 1;
    lp[r].temperature = greedy ? 1.0f : s.temperature;
    lp[r].num_top = s.needs_token ? s.logprobs : 0;
    top_stride_ = std::max(top_stride_, lp[r].num_top);
  }
  nnz_ = static_cast<int64_t>(seen.size());
  std::memcpy(host_ + seen_off_, seen.data(),
              seen.size() * sizeof(DeviceSeenToken));
  return true;
}

absl::Status DeviceLogitProcessing::Run(float* logits, int32_t vocab,
                                        const DeviceSamplingParams* params,
                                        int32_t* tokens, void* stream) {
  hipStream_t s = static_cast<hipStream_t>(stream);
  const size_t upload = seen_off_ + nnz_ * sizeof(DeviceSeenToken);
  RADIXKV_RETURN_IF_ERROR(RuntimeError(
      hipMemcpyAsync(dev_, host_, upload, hipMemcpyHostToDevice, s),
      "penalties upload"));
  if (penalties_) {
    RADIXKV_RETURN_IF_ERROR(KernelError(
        LaunchApplyPenalties(
            logits, rows_, vocab,
            reinterpret_cast<const DevicePenalties*>(dev_ + penalties_off_),
            reinterpret_cast<const int32_t*>(dev_),
            reinterpret_cast<const DeviceSeenToken*>(dev_ + seen_off_), stream),
        "penalties"));
  }
  RADIXKV_RETURN_IF_ERROR(KernelError(
      LaunchSample(logits, rows_, vocab, params, tokens, stream), "sample"));
  if (top_stride_ > 0) {
    RADIXKV_RETURN_IF_ERROR(KernelError(
        LaunchLogprobs(
            logits, rows_, vocab,
            reinterpret_cast<const DeviceLogprobParams*>(dev_ + logprob_off_),
            tokens, top_stride_, logprobs_.values_dev(), logprobs_.ids_dev(),
            stream),
        "logprobs"));
    RADIXKV_RETURN_IF_ERROR(logprobs_.Download(rows_, top_stride_, stream));
  }
  RADIXKV_RETURN_IF_ERROR(
      RuntimeError(hipMemcpyAsync(tokens_host_, tokens, sizeof(int32_t) * rows_,
                                  hipMemcpyDeviceToHost, s),
                   "tokens download"));
  return RuntimeError(hipStreamSynchronize(s), "step");
}

void DeviceLogitProcessing::Finish(absl::Span<const SequenceSampling> sampling,
                                   std::vector<int32_t>* token_ids) const {
  token_ids->assign(tokens_host_, tokens_host_ + rows_);
  for (int32_t r = 0; r < rows_; ++r) {
    const SequenceSampling& s = sampling[r];
    if (!s.needs_token) {
      (*token_ids)[r] = -1;
      continue;
    }
    const int32_t token = (*token_ids)[r];
    if (s.logprobs == 0 || s.sampled == nullptr || token < 0) continue;
    logprobs_.Read(r, top_stride_, token, s.logprobs, s.sampled);
  }
}

}  // namespace radixkv::worker::gpu
