// Workloads of the workload runner: deterministic (seeded) traces of token-id
// sessions built from real text (software licenses shipped by Debian under
// /usr/share/common-licenses, tokenized with the served model's tokenizer).
//
//   shared-prefix  groups of requests sharing a long system prompt, each
//                  with its own question; requests of all groups shuffled
//                  (after SGLang's generated-shared-prefix benchmark, whose
//                  defaults are 64 groups x 16 prompts, 2048-token system
//                  prompts, 128-token questions, 256 output tokens).
//   multi-turn     conversations of several rounds; round k's prompt is
//                  round k-1's prompt + its answer + a new user message, so
//                  rounds of different conversations interleave.
//   document-qa    one long real document as shared context followed by
//                  many different questions.
#ifndef RADIXKV_TOOLS_WORKLOAD_WORKLOAD_H_
#define RADIXKV_TOOLS_WORKLOAD_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace radixkv::router {

// A unit of sequential work: its turns run one after the other; sessions
// run concurrently.
struct WorkloadSession {
  std::string name;
  // Tokens before the first user message (BOS + system prompt or document).
  std::vector<int32_t> context;
  // Tokens of each user message, in order.
  std::vector<std::vector<int32_t>> user_turns;
  // true: turn k's prompt = turn k-1's prompt + its answer + user_turns[k];
  // false: every turn's prompt is context + user_turns[k].
  bool carry_history = false;
  // Decode tokens per turn (generated with ignore_eos, greedy).
  int32_t max_new_tokens = 16;
};

struct Workload {
  std::string name;
  // One line: the parameters, for the report.
  std::string description;
  std::vector<WorkloadSession> sessions;

  // Client streams that run this workload's sessions; 0 = the runner's
  // RunnerOptions::concurrency.
  int concurrency = 0;
  // Requests (turns) over all sessions.
  int64_t num_requests() const;
};

struct SharedPrefixParams {
  int groups = 4;
  int prompts_per_group = 8;
  int system_tokens = 384;
  int question_tokens = 32;
  int output_tokens = 24;
};

struct MultiTurnParams {
  int conversations = 6;
  int rounds = 3;
  int system_tokens = 64;
  int user_tokens = 48;
  int output_tokens = 24;
};

struct DocumentQaParams {
  // Shown in the description; the tokens come from `document`.
  std::string document_name;
  int document_tokens = 768;
  int questions = 12;
  int question_tokens = 24;
  int output_tokens = 24;
};

// Builders. `corpus` is tokenized text (no BOS) sliced for prompts, `bos` is
// prepended to every prompt (-1: none), `seed` fixes slice offsets and order.
// INVALID_ARGUMENT when a size is < 1, the corpus is empty, or a prompt plus
// its output would exceed `max_context_tokens` positions.
absl::StatusOr<Workload> MakeSharedPrefixWorkload(
    const SharedPrefixParams& params, absl::Span<const int32_t> corpus,
    int32_t bos, uint32_t seed, int64_t max_context_tokens);
absl::StatusOr<Workload> MakeMultiTurnWorkload(const MultiTurnParams& params,
                                               absl::Span<const int32_t> corpus,
                                               int32_t bos, uint32_t seed,
                                               int64_t max_context_tokens);
// `document` is the tokenized document (no BOS); its first document_tokens
// tokens are the shared context.
absl::StatusOr<Workload> MakeDocumentQaWorkload(
    const DocumentQaParams& params, absl::Span<const int32_t> document,
    absl::Span<const int32_t> corpus, int32_t bos, uint32_t seed,
    int64_t max_context_tokens);

}  // namespace radixkv::router

#endif  // RADIXKV_TOOLS_WORKLOAD_WORKLOAD_H_
