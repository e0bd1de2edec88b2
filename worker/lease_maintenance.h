// The scheduler's lease decisions and the updates of a Sequence from the
// cache service's answers (cache_service.proto: Acquire, Grow, Commit).
// Pure: the scheduler makes the RPCs; these functions say which sequence,
// how much, and what the answer changes.
//
// One lease-maintenance RPC per step keeps up with the batch because leases
// grow by at least 2 x the generating sequences (docs/architecture.md,
// "Worker scheduling").
#ifndef RADIXKV_WORKER_LEASE_MAINTENANCE_H_
#define RADIXKV_WORKER_LEASE_MAINTENANCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "radixkv/v1/cache_service.pb.h"
#include "worker/sequence.h"

namespace radixkv::worker {

// --- Admission (Acquire) ---

// Slots to reserve beyond the prompt when `seq` is admitted next to
// `num_running` sequences: 2 x the batch it joins (at least
// `reserve_tokens`), so that sequences admitted together run out at
// staggered steps; all it can still need when it is a preempted sequence
// readmitted alone (it never depends on a Grow again); never more than it
// can use, at most 65536.
int64_t AdmissionReserve(const Sequence& seq, int64_t num_running,
                         int32_t reserve_tokens);

// The Acquire of `seq`'s tokens under `epoch` with `reserve` extra slots.
v1::AcquireRequest AcquireRequestFor(const Sequence& seq,
                                     const std::string& worker_id,
                                     int64_t epoch, const std::string& model,
                                     int64_t reserve);

// Makes `lease` the lease of `seq` (acquired under `epoch` for its tokens +
// `reserve`): slots, copy ops, prefix_len tokens computed. INTERNAL "cache
// service returned an inconsistent lease: ..." when it has not len +
// reserve slots or prefix_len is outside [0, len); then only has_lease and
// lease_id are set (ending the lease releases it).
absl::Status ApplyAcquire(const v1::AcquireResponse& lease, int64_t epoch,
                          int64_t reserve, Sequence* seq);

// --- Growth (Grow) ---

struct GrowPlan {
  // nullptr: no sequence needs a Grow now.
  Sequence* target = nullptr;
  // The target has no slot for its next token (it stalls until grown).
  bool urgent = false;
  // Slots to ask for.
  int64_t num_tokens = 0;
};

// The oldest generating sequence without a slot for its next token
// (urgent), else the one with the least headroom below the low watermark;
// its Grow asks for max(grow_tokens, 2 x generating sequences) slots (at
// most what it can still use, at most 65536), the watermark being
// max(grow_low_watermark, half of that).
GrowPlan PlanGrow(absl::Span<const std::unique_ptr<Sequence>> running,
                  int32_t grow_tokens, int32_t grow_low_watermark);

// Appends the grown slots (and copy ops) to `seq`; positions the service
// moved (copy-on-write of a shared last page) take their new slots.
void ApplyGrow(const v1::GrowResponse& grown, Sequence* seq);

// Preempted when a Grow finds no memory: the lowest priority, the newest
// admitted among equals (it made the least progress). `running` non-empty.
Sequence* PickPreemptionVictim(
    absl::Span<const std::unique_ptr<Sequence>> running);

// --- Insertion into the tree (Commit) ---

// The oldest admitted sequence whose prompt is computed but not yet
// inserted into the tree this admission (SGLang's cache_unfinished_req),
// with no copy pending; nullptr if none.
Sequence* PickPrefillCommit(
    absl::Span<const std::unique_ptr<Sequence>> running);

// A Commit of every position of `seq` with KV ([0, num_computed)).
v1::CommitRequest CommitRequestFor(const Sequence& seq, bool keep_lease);

// Applies a keep_lease Commit: positions the tree already held now read
// its copy. Returns how many slots changed. INTERNAL when the remapped
// table does not have the lease's length (nothing changed).
absl::StatusOr<int64_t> ApplyPrefillCommit(const v1::CommitResponse& committed,
                                           Sequence* seq);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_LEASE_MAINTENANCE_H_
