#include "tools/workload/workload.h"

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::router {
namespace {

// `n` tokens of the corpus starting at `offset` (wrapping around).
std::vector<int32_t> Slice(absl::Span<const int32_t> corpus, size_t offset,
                           int n) {
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i)
    out.push_back(corpus[(offset + i) % corpus.size()]);
  return out;
}

absl::Status CheckSizes(std::initializer_list<int> sizes,
                        absl::Span<const int32_t> corpus) {
  for (int s : sizes) {
    if (s < 1) return absl::InvalidArgumentError("workload sizes must be >= 1");
  }
  if (corpus.empty()) return absl::InvalidArgumentError("empty text corpus");
  return absl::OkStatus();
}

absl::Status CheckFits(int64_t prompt, int64_t output, int64_t max_context) {
  if (prompt + output > max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", prompt, " tokens plus ", output,
                     " output tokens exceeds the model's ", max_context,
                     " positions: reduce the workload sizes"));
  }
  return absl::OkStatus();
}

std::vector<int32_t> WithBos(int32_t bos, std::vector<int32_t> tokens) {
  if (bos >= 0) tokens.insert(tokens.begin(), bos);
  return tokens;
}

}  // namespace

int64_t Workload::num_requests() const {
  int64_t n = 0;
  for (const WorkloadSession& s : sessions) n += s.user_turns.size();
  return n;
}

absl::StatusOr<Workload> MakeSharedPrefixWorkload(
    const SharedPrefixParams& p, absl::Span<const int32_t> corpus, int32_t bos,
    uint32_t seed, int64_t max_context_tokens) {
  if (absl::Status s =
          CheckSizes({p.groups, p.prompts_per_group, p.system_tokens,
                      p.question_tokens, p.output_tokens},
                     corpus);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFits(1 + p.system_tokens + p.question_tokens,
                                 p.output_tokens, max_context_tokens);
      !s.ok()) {
    return s;
  }
  std::mt19937 rng(seed);
  Workload w;
  w.name = "shared-prefix";
  w.description = absl::StrCat(p.groups, " groups x ", p.prompts_per_group,
                               " prompts, system prompt ", p.system_tokens,
                               " + question ", p.question_tokens,
                               " tokens, output ", p.output_tokens, " tokens");
  for (int g = 0; g < p.groups; ++g) {
    std::vector<int32_t> system =
        WithBos(bos, Slice(corpus, rng() % corpus.size(), p.system_tokens));
    for (int q = 0; q < p.prompts_per_group; ++q) {
      WorkloadSession s;
      s.name = absl::StrCat("sp-g", g, "-q", q);
      s.context = system;
      s.user_turns.push_back(
          Slice(corpus, rng() % corpus.size(), p.question_tokens));
      s.max_new_tokens = p.output_tokens;
      w.sessions.push_back(std::move(s));
    }
  }
  std::shuffle(w.sessions.begin(), w.sessions.end(), rng);
  return w;
}

absl::StatusOr<Workload> MakeMultiTurnWorkload(const MultiTurnParams& p,
                                               absl::Span<const int32_t> corpus,
                                               int32_t bos, uint32_t seed,
                                               int64_t max_context_tokens) {
  if (absl::Status s = CheckSizes({p.conversations, p.rounds, p.system_tokens,
                                   p.user_tokens, p.output_tokens},
                                  corpus);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckFits(1 + p.system_tokens + int64_t{p.rounds} * p.user_tokens +
                        int64_t{p.rounds - 1} * p.output_tokens,
                    p.output_tokens, max_context_tokens);
      !s.ok()) {
    return s;
  }
  std::mt19937 rng(seed);
  Workload w;
  w.name = "multi-turn";
  w.description = absl::StrCat(p.conversations, " conversations x ", p.rounds,
                               " rounds, system ", p.system_tokens,
                               " tokens, user message ", p.user_tokens,
                               " tokens, answer ", p.output_tokens, " tokens");
  for (int c = 0; c < p.conversations; ++c) {
    WorkloadSession s;
    s.name = absl::StrCat("conv-", c);
    s.context =
        WithBos(bos, Slice(corpus, rng() % corpus.size(), p.system_tokens));
    for (int r = 0; r < p.rounds; ++r) {
      s.user_turns.push_back(
          Slice(corpus, rng() % corpus.size(), p.user_tokens));
    }
    s.carry_history = true;
    s.max_new_tokens = p.output_tokens;
    w.sessions.push_back(std::move(s));
  }
  return w;
}

absl::StatusOr<Workload> MakeDocumentQaWorkload(
    const DocumentQaParams& p, absl::Span<const int32_t> document,
    absl::Span<const int32_t> corpus, int32_t bos, uint32_t seed,
    int64_t max_context_tokens) {
  if (absl::Status s = CheckSizes(
          {p.document_tokens, p.questions, p.question_tokens, p.output_tokens},
          corpus);
      !s.ok()) {
    return s;
  }
  if (document.empty()) return absl::InvalidArgumentError("empty document");
  const int doc_tokens =
      std::min<int>(p.document_tokens, static_cast<int>(document.size()));
  if (absl::Status s = CheckFits(1 + doc_tokens + p.question_tokens,
                                 p.output_tokens, max_context_tokens);
      !s.ok()) {
    return s;
  }
  std::mt19937 rng(seed);
  Workload w;
  w.name = "document-qa";
  w.description =
      absl::StrCat(p.document_name, " (first ", doc_tokens, " tokens) + ",
                   p.questions, " questions of ", p.question_tokens,
                   " tokens, output ", p.output_tokens, " tokens");
  std::vector<int32_t> context = WithBos(
      bos,
      std::vector<int32_t>(document.begin(), document.begin() + doc_tokens));
  for (int q = 0; q < p.questions; ++q) {
    WorkloadSession s;
    s.name = absl::StrCat("doc-q", q);
    s.context = context;
    s.user_turns.push_back(
        Slice(corpus, rng() % corpus.size(), p.question_tokens));
    s.max_new_tokens = p.output_tokens;
    w.sessions.push_back(std::move(s));
  }
  return w;
}

}  // namespace radixkv::router
