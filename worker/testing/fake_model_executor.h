// FakeModelExecutor: a deterministic stand-in for a model backend, for
// scheduler tests. Its "KV pool" stores, per slot, the token id and position
// written there; Forward checks that every context slot the batch reads
// holds exactly the token and position the sequence expects (so wrong
// kv_indices, positions, copy ops or prefix reuse fail loudly), then returns
// logits whose argmax is NextToken(context) (Logits(context)). ForwardSample
// is ModelExecutor's default (Forward + the host Sampler), recorded.
#ifndef RADIXKV_WORKER_TESTING_FAKE_MODEL_EXECUTOR_H_
#define RADIXKV_WORKER_TESTING_FAKE_MODEL_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/model_executor.h"

namespace radixkv::worker::testing {

class FakeModelExecutor : public ModelExecutor {
 public:
  static constexpr int32_t kVocabSize = 64;
  static constexpr int32_t kEosId = 2;

  FakeModelExecutor(int64_t capacity_slots, int32_t page_size);

  // The greedy next token after `context` (a hash in [3, vocab)), or kEosId
  // once the context has eos_at_length() tokens.
  int32_t NextToken(absl::Span<const int32_t> context) const;
  // The logits Forward returns after `context`: [kVocabSize], 10 at
  // NextToken(context), 0 elsewhere.
  std::vector<float> Logits(absl::Span<const int32_t> context) const;
  // Greedy continuation of `prompt` by `n` tokens (the test oracle).
  std::vector<int32_t> Generate(std::vector<int32_t> prompt, int n) const;

  // Context length at which EOS is produced; 0 = never.
  void set_eos_at_length(int64_t n) { eos_at_length_ = n; }
  // Each Forward sleeps this long (to keep requests running in tests).
  void set_step_delay(absl::Duration delay) { step_delay_ = delay; }
  // The next Forward fails with INTERNAL.
  void FailNextForward() { fail_next_ = true; }
  // Runs at the start of every Forward, on the scheduler's thread (e.g. to
  // hold a step in the middle while a test submits from other threads).
  void set_forward_hook(std::function<void()> hook) {
    forward_hook_ = std::move(hook);
  }

  struct BatchRecord {
    int32_t num_seqs = 0;
    int32_t num_tokens = 0;
    bool is_decode = false;
    int32_t num_copy_ops = 0;
    std::vector<int32_t> extend_lens;  // new tokens per sequence
    // ForwardSample's per-sequence arguments (empty for a plain Forward).
    std::vector<SequenceSampling> sampling;
  };
  const std::vector<BatchRecord>& batches() const { return batches_; }

  const model::ModelConfig& config() const override { return config_; }
  absl::Status Forward(const ForwardBatch& batch,
                       std::vector<float>* logits) override;
  absl::Status ForwardSample(const ForwardBatch& batch,
                             absl::Span<const SequenceSampling> sampling,
                             std::vector<int32_t>* token_ids) override;
  int64_t capacity_slots() const override { return capacity_slots_; }
  int32_t page_size() const override { return page_size_; }
  std::string device() const override { return "fake"; }

 private:
  model::ModelConfig config_;
  const int64_t capacity_slots_;
  const int32_t page_size_;
  // Per slot: token id and position written there (-1: never written).
  std::vector<int32_t> slot_token_;
  std::vector<int32_t> slot_position_;
  int64_t eos_at_length_ = 0;
  bool fail_next_ = false;
  absl::Duration step_delay_ = absl::ZeroDuration();
  std::function<void()> forward_hook_;
  std::vector<BatchRecord> batches_;
};

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_TESTING_FAKE_MODEL_EXECUTOR_H_
