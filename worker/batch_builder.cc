#include "worker/batch_builder.h"

#include <algorithm>

namespace radixkv::worker {

BatchPlan PlanBatch(absl::Span<const std::unique_ptr<Sequence>> running,
                    int32_t prefill_budget) {
  BatchPlan plan;
  for (const auto& seq : running) {
    const int64_t remaining = seq->compute_end() - seq->num_computed;
    const bool prefill = seq->in_prefill();
    int64_t chunk = prefill ? std::min<int64_t>(remaining, prefill_budget)
                            : std::min<int64_t>(remaining, 1);
    if (chunk <= 0) continue;
    if (static_cast<int64_t>(seq->kv_indices.size()) <
        seq->num_computed + chunk) {
      ++plan.stalled;  // Waits for a Grow.
      continue;
    }
    if (prefill) {
      prefill_budget -= static_cast<int32_t>(chunk);
      plan.prefill_tokens += chunk;
    }
    plan.entries.push_back({seq.get(), static_cast<int32_t>(chunk), prefill});
  }
  return plan;
}

ForwardBatch BuildForwardBatch(absl::Span<const BatchEntry> entries) {
  ForwardBatch batch;
  batch.is_decode =
      std::all_of(entries.begin(), entries.end(),
                  [](const BatchEntry& e) { return e.chunk == 1; });
  batch.qo_indptr.push_back(0);
  batch.kv_indptr.push_back(0);
  for (const BatchEntry& e : entries) {
    const Sequence& seq = *e.seq;
    const int64_t begin = seq.num_computed;
    for (int64_t p = begin; p < begin + e.chunk; ++p) {
      batch.input_ids.push_back(seq.tokens[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.out_cache_loc.push_back(seq.kv_indices[p]);
    }
    const int64_t context = batch.is_decode ? begin + 1 : begin;
    batch.kv_indices.insert(batch.kv_indices.end(), seq.kv_indices.begin(),
                            seq.kv_indices.begin() + context);
    batch.qo_indptr.push_back(batch.qo_indptr.back() + e.chunk);
    batch.kv_indptr.push_back(batch.kv_indptr.back() +
                              static_cast<int32_t>(context));
    batch.copy_ops.insert(batch.copy_ops.end(), seq.pending_copies.begin(),
                          seq.pending_copies.end());
  }
  return batch;
}

namespace {

// The chunk's rows that are followed by a prompt token (positions below
// prompt_len - 1), while the request's prompt logprobs are pending.
void SetPromptTargets(const BatchEntry& e, SequenceSampling* s) {
  Sequence& seq = *e.seq;
  if (!e.prefill || !seq.wants_prompt_logprobs()) return;
  s->prompt_logprobs = seq.sampling.prompt_logprobs;
  const int64_t begin = seq.num_computed;
  const int64_t end = std::min<int64_t>(begin + e.chunk, seq.prompt_len - 1);
  if (end <= begin) return;
  s->prompt_targets =
      absl::Span<const int32_t>(seq.tokens).subspan(begin + 1, end - begin);
  s->prompt_logprobs_out = seq.prompt_logprobs.data() + begin;
}

}  // namespace

std::vector<SequenceSampling> BuildSequenceSampling(
    absl::Span<const BatchEntry> entries) {
  // One token per sequence whose tokens are all computed after this step;
  // prefill chunks that leave part of the prompt need none (no draw, no
  // random number consumed).
  std::vector<SequenceSampling> sampling(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Sequence& seq = *entries[i].seq;
    SequenceSampling& s = sampling[i];
    s.needs_token = seq.num_computed + entries[i].chunk >=
                    static_cast<int64_t>(seq.tokens.size());
    s.temperature = seq.sampling.temperature;
    s.top_k = seq.sampling.top_k;
    s.top_p = seq.sampling.top_p;
    s.seed = seq.sampling.seed;
    s.step = static_cast<uint64_t>(seq.num_generated);
    s.host_sampler = seq.sampler.get();
    s.repetition_penalty = seq.sampling.repetition_penalty;
    s.frequency_penalty = seq.sampling.frequency_penalty;
    s.presence_penalty = seq.sampling.presence_penalty;
    s.min_p = seq.sampling.min_p;
    s.logprobs = seq.sampling.logprobs;
    const absl::Span<const int32_t> tokens(seq.tokens);
    s.prompt = tokens.subspan(0, seq.prompt_len);
    s.output = tokens.subspan(seq.prompt_len);
    SetPromptTargets(entries[i], &s);
  }
  return sampling;
}

}  // namespace radixkv::worker
