#include "worker/output_processor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace radixkv::worker {

namespace {

void SetUsage(const Sequence& seq, absl::Time now, GenerateEvent* event) {
  event->usage.set_prompt_tokens(seq.prompt_len);
  event->usage.set_cached_tokens(seq.cached_tokens);
  event->usage.set_completion_tokens(seq.num_generated);
  event->elapsed_s = absl::ToDoubleSeconds(now - seq.arrival);
}

}  // namespace

GenerateEvent OutputProcessor::AppendToken(Sequence* seq, int32_t token,
                                           absl::Time now) const {
  seq->tokens.push_back(token);
  ++seq->num_generated;
  v1::FinishReason reason = TokenFinishReason(*seq, token);
  std::string text = TextDelta(seq, token, &reason);
  if (reason == v1::FINISH_REASON_UNSPECIFIED &&
      seq->num_generated >= seq->sampling.max_new_tokens) {
    reason = v1::FINISH_REASON_LENGTH;
  }
  if (reason != v1::FINISH_REASON_UNSPECIFIED && seq->detokenizer != nullptr &&
      (seq->stop_checker == nullptr || !seq->stop_checker->stopped())) {
    absl::StatusOr<std::string> tail = seq->detokenizer->Flush();
    if (tail.ok()) {
      if (seq->stop_checker != nullptr) {
        StopChecker::Result r = seq->stop_checker->Append(*tail);
        text += r.emit;
        if (!r.stopped) text += seq->stop_checker->Flush();
      } else {
        text += *tail;
      }
    }
  }
  GenerateEvent event;
  event.token_ids.push_back(token);
  if (seq->return_text) event.text = std::move(text);
  SetUsage(*seq, now, &event);
  if (reason != v1::FINISH_REASON_UNSPECIFIED) {
    event.finished = true;
    event.finish_reason = reason;
  }
  return event;
}

v1::FinishReason OutputProcessor::TokenFinishReason(const Sequence& seq,
                                                    int32_t token) const {
  const auto& stops = seq.sampling.stop_token_ids;
  const auto& eos = eos_token_ids_;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    return v1::FINISH_REASON_STOP;
  }
  if (!seq.sampling.ignore_eos &&
      std::find(eos.begin(), eos.end(), token) != eos.end()) {
    return v1::FINISH_REASON_EOS;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

std::string OutputProcessor::TextDelta(Sequence* seq, int32_t token,
                                       v1::FinishReason* reason) const {
  if (seq->detokenizer == nullptr) return "";
  absl::StatusOr<std::string> delta = seq->detokenizer->Append(token);
  std::string d = delta.ok() ? *delta : std::string();
  if (seq->stop_checker == nullptr) return d;
  StopChecker::Result r = seq->stop_checker->Append(d);
  if (r.stopped && *reason == v1::FINISH_REASON_UNSPECIFIED) {
    *reason = v1::FINISH_REASON_STOP;
  }
  return std::move(r.emit);
}

std::vector<int32_t> MergeEosTokenIds(
    absl::Span<const int32_t> model_config,
    absl::Span<const int32_t> tokenizer_files) {
  std::vector<int32_t> ids(model_config.begin(), model_config.end());
  for (int32_t id : tokenizer_files) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

GenerateEvent EndEvent(const Sequence& seq, absl::Status status,
                       v1::FinishReason reason, absl::Time now) {
  GenerateEvent event;
  event.finished = true;
  event.finish_reason = reason;
  event.status = std::move(status);
  SetUsage(seq, now, &event);
  return event;
}

v1::TokenLogprobs ToTokenLogprobs(const SampledToken& sampled) {
  v1::TokenLogprobs out;
  out.mutable_sampled()->set_token_id(sampled.token);
  out.mutable_sampled()->set_logprob(sampled.logprob);
  for (const auto& [id, logprob] : sampled.top) {
    v1::TokenLogprob* top = out.add_top();
    top->set_token_id(id);
    top->set_logprob(logprob);
  }
  return out;
}

void TakePromptLogprobs(Sequence* seq, GenerateEvent* event) {
  if (!seq->wants_prompt_logprobs()) return;
  event->prompt_logprobs.reserve(seq->prompt_logprobs.size());
  for (const SampledToken& t : seq->prompt_logprobs) {
    event->prompt_logprobs.push_back(ToTokenLogprobs(t));
  }
  seq->prompt_logprobs_sent = true;
  seq->prompt_logprobs = {};
}

absl::Status CheckSampledTokens(absl::Span<const int32_t> token_ids,
                                absl::Span<const SequenceSampling> sampling,
                                int32_t vocab_size) {
  if (token_ids.size() != sampling.size()) {
    return absl::InternalError(absl::StrCat("executor returned ",
                                            token_ids.size(), " tokens for ",
                                            sampling.size(), " sequences"));
  }
  for (size_t i = 0; i < token_ids.size(); ++i) {
    const int32_t t = token_ids[i];
    if (sampling[i].needs_token && t != kSamplingFailedToken &&
        (t < 0 || t >= vocab_size)) {
      return absl::InternalError(absl::StrCat("executor sampled token ", t,
                                              " outside the vocabulary of ",
                                              vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker
