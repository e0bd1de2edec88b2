#include "worker/sample_fork.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace radixkv::worker {

namespace {

// Sample `index` of `parent`'s request, before any lease: the request's
// fields, the prompt, its own random stream, detokenizer and stop checker.
std::unique_ptr<Sequence> NewSample(const Sequence& parent, int32_t index,
                                    std::shared_ptr<SampleGroup> group) {
  auto child = std::make_unique<Sequence>();
  child->request_id = parent.request_id;
  child->stream = parent.stream;
  child->cache_salt = parent.cache_salt;
  child->priority = parent.priority;
  child->disable_prefix_cache = parent.disable_prefix_cache;
  child->return_text = parent.return_text;
  child->sampling = parent.sampling;
  // Independent streams; sample 0 draws what n = 1 would.
  child->sampling.seed = parent.sampling.seed + static_cast<uint64_t>(index);
  child->sampler = std::make_unique<Sampler>(child->sampling);
  child->tokens.assign(parent.tokens.begin(),
                       parent.tokens.begin() + parent.prompt_len);
  child->prompt_len = parent.prompt_len;
  if (parent.detokenizer != nullptr) {
    // The parent has decoded its prompt only: each child starts from there.
    child->detokenizer =
        std::make_unique<model::IncrementalDetokenizer>(*parent.detokenizer);
  }
  if (parent.stop_checker != nullptr) {
    child->stop_checker =
        std::make_unique<StopChecker>(child->sampling.stop_strings);
  }
  child->arrival = parent.arrival;
  child->sample_index = index;
  child->group = std::move(group);
  // The request's prompt logprobs go out once, with sample 0.
  child->prompt_logprobs_sent = parent.prompt_logprobs_sent || index != 0;
  if (index == 0) child->prompt_logprobs = parent.prompt_logprobs;
  return child;
}

std::shared_ptr<SampleGroup> NewGroup(int32_t n) {
  auto group = std::make_shared<SampleGroup>();
  group->live = n;
  return group;
}

}  // namespace

bool ReadyToFork(const Sequence& seq) {
  return seq.num_samples > 1 && seq.has_lease && seq.prompt_len > 1 &&
         seq.num_computed >= seq.prompt_len - 1;
}

v1::ForkRequest ForkRequestFor(const Sequence& parent) {
  v1::ForkRequest request;
  request.set_lease_id(parent.lease_id);
  request.set_num_children(parent.num_samples);
  request.set_num_tokens(parent.prompt_len - 1);
  return request;
}

absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> MakeForkChildren(
    const Sequence& parent, const v1::ForkResponse& forked) {
  const int64_t shared = parent.prompt_len - 1;
  if (forked.children_size() != parent.num_samples) {
    return absl::InternalError(
        absl::StrCat("cache service forked ", forked.children_size(),
                     " children, asked for ", parent.num_samples));
  }
  for (const v1::ForkResponse::Child& c : forked.children()) {
    if (c.kv_indices_size() != shared) {
      return absl::InternalError(
          absl::StrCat("cache service forked a child of ", c.kv_indices_size(),
                       " slots, asked for ", shared));
    }
  }
  std::shared_ptr<SampleGroup> group = NewGroup(parent.num_samples);
  std::vector<std::unique_ptr<Sequence>> children;
  for (int32_t i = 0; i < parent.num_samples; ++i) {
    const v1::ForkResponse::Child& c = forked.children(i);
    std::unique_ptr<Sequence> child = NewSample(parent, i, group);
    child->has_lease = true;
    child->lease_id = c.lease_id();
    child->lease_epoch = parent.lease_epoch;
    // The child lease's prompt is the shared positions (the service
    // truncates it there): its Commit inserts them and its own tokens.
    child->acquired_len = shared;
    child->kv_indices.assign(c.kv_indices().begin(), c.kv_indices().end());
    // Copies of the parent's reused prefix not run yet (a parent admitted
    // with its whole shared part cached): every child runs them first;
    // running them again is harmless (same source, same bytes).
    child->pending_copies = parent.pending_copies;
    child->num_computed = shared;
    // The shared prompt is inserted by the children's final Commits; a
    // keep_lease Commit of a lease that holds no new prompt token would
    // change nothing.
    child->prefill_committed = true;
    child->admission_order = parent.admission_order;
    child->admitted_once = true;
    child->cached_tokens = parent.cached_tokens;
    children.push_back(std::move(child));
  }
  return children;
}

std::vector<std::unique_ptr<Sequence>> SplitIntoSamples(
    const Sequence& parent) {
  std::shared_ptr<SampleGroup> group = NewGroup(parent.num_samples);
  std::vector<std::unique_ptr<Sequence>> samples;
  for (int32_t i = 0; i < parent.num_samples; ++i) {
    samples.push_back(NewSample(parent, i, group));
  }
  return samples;
}

}  // namespace radixkv::worker
