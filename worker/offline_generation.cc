#include "worker/offline_generation.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace radixkv::worker {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

absl::StatusOr<std::vector<OfflineResult>> GenerateOffline(
    ModelExecutor& executor, absl::Span<const OfflineRequest> requests,
    absl::Span<const int32_t> eos_ids, const TokenCallback& on_token,
    OfflineGenerationStats* stats) {
  const size_t n = requests.size();
  if (n == 0) return std::vector<OfflineResult>();
  const int64_t page = executor.page_size();
  const int32_t vocab = executor.config().vocab_size;
  // Private slot range per request: whole pages for prompt + max_new_tokens.
  std::vector<int64_t> base(n);
  int64_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const OfflineRequest& r = requests[i];
    if (r.prompt_ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": empty prompt"));
    }
    if (absl::Status s = ValidateSamplingParams(r.params, 1 << 20); !s.ok()) {
      return s;
    }
    const int64_t len =
        static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens;
    base[i] = next;
    next += (len + page - 1) / page * page;
  }
  if (next > executor.capacity_slots()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("requests need ", next, " KV slots, the pool has ",
                     executor.capacity_slots()));
  }

  std::vector<OfflineResult> results(n);
  std::vector<Sampler> samplers;
  samplers.reserve(n);
  for (const OfflineRequest& r : requests) samplers.emplace_back(r.params);
  std::vector<int64_t> context_len(n);  // tokens already in the pool
  std::vector<int32_t> last_token(n);
  std::vector<bool> done(n, false);
  std::vector<float> logits;

  // Accepts a sampled token for request i; returns true if i finished.
  auto accept = [&](size_t i, int32_t token) {
    const SamplingParams& p = requests[i].params;
    results[i].output_ids.push_back(token);
    last_token[i] = token;
    if (on_token && !on_token(i, token)) {
      results[i].finish_reason = FinishReason::kCallback;
      return true;
    }
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
        p.stop_token_ids.end()) {
      results[i].finish_reason = FinishReason::kStopToken;
      return true;
    }
    if (!p.ignore_eos &&
        std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end()) {
      results[i].finish_reason = FinishReason::kEos;
      return true;
    }
    if (static_cast<int32_t>(results[i].output_ids.size()) >=
        p.max_new_tokens) {
      results[i].finish_reason = FinishReason::kLength;
      return true;
    }
    return false;
  };

  // Prefill every prompt in one extend batch.
  auto start = std::chrono::steady_clock::now();
  ForwardBatch prefill;
  prefill.qo_indptr.push_back(0);
  prefill.kv_indptr = std::vector<int32_t>(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& ids = requests[i].prompt_ids;
    for (size_t p = 0; p < ids.size(); ++p) {
      prefill.input_ids.push_back(ids[p]);
      prefill.positions.push_back(static_cast<int32_t>(p));
      prefill.out_cache_loc.push_back(base[i] + static_cast<int64_t>(p));
    }
    prefill.qo_indptr.push_back(static_cast<int32_t>(prefill.input_ids.size()));
    context_len[i] = static_cast<int64_t>(ids.size());
  }
  if (absl::Status s = executor.Forward(prefill, &logits); !s.ok()) return s;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<int32_t> token = samplers[i].Sample(
        absl::MakeConstSpan(logits).subspan(i * vocab, vocab));
    if (!token.ok()) return token.status();
    done[i] = accept(i, *token);
  }
  if (stats != nullptr) {
    stats->prefill_seconds += Seconds(start);
    stats->prefill_tokens += static_cast<int64_t>(prefill.input_ids.size());
  }

  // Decode until every request finished.
  start = std::chrono::steady_clock::now();
  std::vector<size_t> active;
  while (true) {
    active.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!done[i]) active.push_back(i);
    }
    if (active.empty()) break;
    ForwardBatch step;
    step.is_decode = true;
    step.qo_indptr.push_back(0);
    step.kv_indptr.push_back(0);
    for (size_t i : active) {
      const int64_t slot = base[i] + context_len[i];
      step.input_ids.push_back(last_token[i]);
      step.positions.push_back(static_cast<int32_t>(context_len[i]));
      step.out_cache_loc.push_back(slot);
      for (int64_t s = base[i]; s <= slot; ++s) step.kv_indices.push_back(s);
      step.qo_indptr.push_back(static_cast<int32_t>(step.input_ids.size()));
      step.kv_indptr.push_back(static_cast<int32_t>(step.kv_indices.size()));
    }
    if (absl::Status s = executor.Forward(step, &logits); !s.ok()) return s;
    for (size_t j = 0; j < active.size(); ++j) {
      const size_t i = active[j];
      ++context_len[i];
      absl::StatusOr<int32_t> token = samplers[i].Sample(
          absl::MakeConstSpan(logits).subspan(j * vocab, vocab));
      if (!token.ok()) return token.status();
      done[i] = accept(i, *token);
    }
    if (stats != nullptr) {
      stats->decode_tokens += static_cast<int64_t>(active.size());
      ++stats->decode_steps;
    }
  }
  if (stats != nullptr) stats->decode_seconds += Seconds(start);
  return results;
}

}  // namespace radixkv::worker
