// Offline generation: runs whole requests on a ModelExecutor without the
// cache service or the scheduler. Each sequence owns a private, contiguous
// range of whole pages (no prefix sharing); all prompts are prefilled in one
// extend batch, then every unfinished sequence decodes one token per step.
// For the generate CLI, tests and benchmarks; the serving path is
// worker/scheduler.h.
#ifndef RADIXKV_WORKER_OFFLINE_GENERATION_H_
#define RADIXKV_WORKER_OFFLINE_GENERATION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model_executor.h"
#include "worker/sampler.h"

namespace radixkv::worker {

struct OfflineRequest {
  std::vector<int32_t> prompt_ids;  // non-empty, BOS included if wanted
  SamplingParams params;            // stop_strings are not applied here
};

enum class FinishReason { kLength, kStopToken, kEos, kCallback };

struct OfflineResult {
  std::vector<int32_t> output_ids;  // generated tokens, incl. a final stop/EOS
  FinishReason finish_reason = FinishReason::kLength;
};

// Wall-clock split of a GenerateOffline call (seconds, tokens).
struct OfflineGenerationStats {
  double prefill_seconds = 0;
  int64_t prefill_tokens = 0;
  double decode_seconds = 0;
  int64_t decode_tokens = 0;  // tokens computed by decode steps
  int64_t decode_steps = 0;
};

// Called with (request index, new token); return false to finish that
// request (FinishReason::kCallback), e.g. when a stop string appeared.
using TokenCallback = std::function<bool(size_t, int32_t)>;

// Generates for all requests. A request finishes at max_new_tokens, at a
// stop_token_id, or at an id of `eos_ids` unless params.ignore_eos.
// Errors: INVALID_ARGUMENT (empty prompt, bad sampling params),
// RESOURCE_EXHAUSTED (the pool cannot hold every request's prompt +
// max_new_tokens at once), or the executor's error.
absl::StatusOr<std::vector<OfflineResult>> GenerateOffline(
    ModelExecutor& executor, absl::Span<const OfflineRequest> requests,
    absl::Span<const int32_t> eos_ids, const TokenCallback& on_token = {},
    OfflineGenerationStats* stats = nullptr);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_OFFLINE_GENERATION_H_
