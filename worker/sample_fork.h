// Parallel sampling (GenerateRequest.n > 1): the parent sequence of a
// request and the n samples made from it, each a Sequence of its own with
// its random stream (SamplingParams.seed + sample index), detokenizer and
// stop checker. PagedAttention's fork (Kwon et al. 2023, §4.4): the parent
// computes the prompt but its last token once, its lease is forked there
// (CacheService.Fork, positions [0, prompt_len - 1) shared by ref-counted
// pages), and every child computes the last prompt token into its own slot
// (its first Grow copies the shared partial page: copy-on-write), so the
// children's first tokens are drawn from their own logits rows and no
// child writes into a shared page. vLLM V1 recomputes the whole partial
// last block per sample instead (prefix caching of full blocks only).
// Pure: the scheduler makes the RPCs.
#ifndef RADIXKV_WORKER_SAMPLE_FORK_H_
#define RADIXKV_WORKER_SAMPLE_FORK_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "radixkv/v1/cache_service.pb.h"
#include "worker/sequence.h"

namespace radixkv::worker {

// True when `seq` is a parent whose prompt is computed up to its last token
// (the fork point) and that holds its lease.
bool ReadyToFork(const Sequence& seq);

// The Fork of `parent`'s lease into num_samples children at prompt_len - 1.
v1::ForkRequest ForkRequestFor(const Sequence& parent);

// The n children of `parent` from the service's answer `forked`: each holds
// its child lease (table of prompt_len - 1 slots, all computed), the
// parent's copy ops not yet executed, sample_index i and seed + i, and the
// request's group with n live samples. INTERNAL when the answer has other
// than n children or a table of another length.
absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> MakeForkChildren(
    const Sequence& parent, const v1::ForkResponse& forked);

// A parent with a one-token prompt has no position to fork at: its n
// samples are independent sequences (no lease yet, nothing computed), each
// acquiring its own one-token lease.
std::vector<std::unique_ptr<Sequence>> SplitIntoSamples(
    const Sequence& parent);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_SAMPLE_FORK_H_
