#include "worker/testing/fake_model_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace radixkv::worker::testing {

FakeModelExecutor::FakeModelExecutor(int64_t capacity_slots, int32_t page_size)
    : capacity_slots_(capacity_slots),
      page_size_(page_size),
      slot_token_(capacity_slots, -1),
      slot_position_(capacity_slots, -1) {
  config_.model_type = "llama";
  config_.vocab_size = kVocabSize;
  config_.max_position_embeddings = 4096;
  config_.eos_token_ids = {kEosId};
  config_.bos_token_id = 1;
}

int32_t FakeModelExecutor::NextToken(absl::Span<const int32_t> context) const {
  if (eos_at_length_ > 0 &&
      static_cast<int64_t>(context.size()) >= eos_at_length_) {
    return kEosId;
  }
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < context.size(); ++i) {
    h = (h ^ static_cast<uint64_t>(context[i] + 1000 * (i + 1))) *
        1099511628211ull;
  }
  return 3 + static_cast<int32_t>((h >> 17) % (kVocabSize - 3));
}

std::vector<float> FakeModelExecutor::Logits(
    absl::Span<const int32_t> context) const {
  std::vector<float> logits(kVocabSize, 0.0f);
  logits[NextToken(context)] = 10.0f;
  return logits;
}

std::vector<int32_t> FakeModelExecutor::Generate(std::vector<int32_t> prompt,
                                                 int n) const {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    int32_t t = NextToken(prompt);
    out.push_back(t);
    prompt.push_back(t);
    if (t == kEosId) break;
  }
  return out;
}

absl::Status FakeModelExecutor::Forward(const ForwardBatch& batch,
                                        std::vector<float>* logits) {
  if (forward_hook_) forward_hook_();
  if (step_delay_ > absl::ZeroDuration()) absl::SleepFor(step_delay_);
  if (fail_next_) {
    fail_next_ = false;
    return absl::InternalError("injected forward failure");
  }
  const size_t num_seqs = batch.qo_indptr.size() - 1;
  const size_t num_tokens = batch.input_ids.size();
  if (batch.qo_indptr.empty() || batch.kv_indptr.size() != num_seqs + 1 ||
      batch.positions.size() != num_tokens ||
      batch.out_cache_loc.size() != num_tokens ||
      batch.qo_indptr.back() != static_cast<int32_t>(num_tokens) ||
      batch.kv_indptr.back() != static_cast<int32_t>(batch.kv_indices.size())) {
    return absl::InvalidArgumentError("inconsistent batch sizes");
  }
  for (const PageCopy& op : batch.copy_ops) {
    for (int32_t i = 0; i < op.num_tokens; ++i) {
      slot_token_[op.dst_page * page_size_ + i] =
          slot_token_[op.src_page * page_size_ + i];
      slot_position_[op.dst_page * page_size_ + i] =
          slot_position_[op.src_page * page_size_ + i];
    }
  }
  for (size_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = batch.out_cache_loc[i];
    if (slot < 0 || slot >= capacity_slots_) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", slot));
    }
    slot_token_[slot] = batch.input_ids[i];
    slot_position_[slot] = batch.positions[i];
  }
  BatchRecord record;
  record.num_seqs = static_cast<int32_t>(num_seqs);
  record.num_tokens = static_cast<int32_t>(num_tokens);
  record.is_decode = batch.is_decode;
  record.num_copy_ops = static_cast<int32_t>(batch.copy_ops.size());
  // All-token logits: one row per new token (its context ends there).
  const bool all_rows = batch.return_all_logits && !batch.is_decode;
  logits->assign((all_rows ? num_tokens : num_seqs) * kVocabSize, 0.0f);
  for (size_t b = 0; b < num_seqs; ++b) {
    const int32_t q0 = batch.qo_indptr[b], q1 = batch.qo_indptr[b + 1];
    const int32_t k0 = batch.kv_indptr[b], k1 = batch.kv_indptr[b + 1];
    record.extend_lens.push_back(q1 - q0);
    if (batch.is_decode && q1 - q0 != 1) {
      return absl::InvalidArgumentError("decode with != 1 token");
    }
    // The context as read from the pool, then the new tokens (extend).
    std::vector<int32_t> context;
    for (int32_t j = k0; j < k1; ++j) {
      const int64_t slot = batch.kv_indices[j];
      if (slot < 0 || slot >= capacity_slots_ ||
          slot_position_[slot] != j - k0) {
        return absl::InternalError(absl::StrCat(
            "seq ", b, " context position ", j - k0, " reads slot ", slot,
            " holding position ",
            slot < 0 || slot >= capacity_slots_ ? -2 : slot_position_[slot]));
      }
      context.push_back(slot_token_[slot]);
    }
    if (batch.is_decode) {
      if (batch.kv_indices[k1 - 1] != batch.out_cache_loc[q0]) {
        return absl::InvalidArgumentError("decode context misses new token");
      }
    } else {
      for (int32_t i = q0; i < q1; ++i) {
        if (batch.positions[i] != (k1 - k0) + (i - q0)) {
          return absl::InvalidArgumentError("extend position mismatch");
        }
        context.push_back(batch.input_ids[i]);
        if (all_rows) {
          const std::vector<float> row = Logits(context);
          std::copy(row.begin(), row.end(),
                    logits->begin() + static_cast<size_t>(i) * kVocabSize);
        }
      }
      if (all_rows) continue;
    }
    const std::vector<float> row = Logits(context);
    std::copy(row.begin(), row.end(), logits->begin() + b * kVocabSize);
  }
  batches_.push_back(std::move(record));
  return absl::OkStatus();
}

absl::Status FakeModelExecutor::ForwardSample(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
    std::vector<int32_t>* token_ids) {
  const size_t before = batches_.size();
  absl::Status st = ModelExecutor::ForwardSample(batch, sampling, token_ids);
  if (batches_.size() > before) {
    batches_.back().sampling.assign(sampling.begin(), sampling.end());
  }
  return st;
}

}  // namespace radixkv::worker::testing
