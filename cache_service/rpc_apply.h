// One function per state-changing RPC: request proto in, CacheState call,
// response proto out. The live service and journal replay both run them, so
// a replayed entry takes exactly the path its live call took. Each returns
// the core's status; on error `resp` may be partly set (the service clears
// it).
#ifndef RADIXKV_CACHE_SERVICE_RPC_APPLY_H_
#define RADIXKV_CACHE_SERVICE_RPC_APPLY_H_

#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "cache_service/cache_state.h"
#include "cache_service/journal_entry.h"
#include "radixkv/v1/cache_service.pb.h"

namespace radixkv::cache_service {

absl::Status ApplyRegister(CacheState& state,
                           const radixkv::v1::RegisterRequest& req,
                           int64_t now_ms, radixkv::v1::RegisterResponse* resp);
absl::Status ApplyHeartbeat(CacheState& state,
                            const radixkv::v1::HeartbeatRequest& req,
                            int64_t now_ms,
                            radixkv::v1::HeartbeatResponse* resp);
absl::Status ApplyDeregister(CacheState& state,
                             const radixkv::v1::DeregisterRequest& req,
                             int64_t now_ms,
                             radixkv::v1::DeregisterResponse* resp);
absl::Status ApplyAcquire(CacheState& state,
                          const radixkv::v1::AcquireRequest& req,
                          int64_t now_ms, radixkv::v1::AcquireResponse* resp);
absl::Status ApplyGrow(CacheState& state, const radixkv::v1::GrowRequest& req,
                       int64_t now_ms, radixkv::v1::GrowResponse* resp);
absl::Status ApplyFork(CacheState& state, const radixkv::v1::ForkRequest& req,
                       int64_t now_ms, radixkv::v1::ForkResponse* resp);
absl::Status ApplyCommit(CacheState& state,
                         const radixkv::v1::CommitRequest& req, int64_t now_ms,
                         radixkv::v1::CommitResponse* resp);
absl::Status ApplyRelease(CacheState& state,
                          const radixkv::v1::ReleaseRequest& req,
                          int64_t now_ms, radixkv::v1::ReleaseResponse* resp);
absl::Status ApplyEvict(CacheState& state, const radixkv::v1::EvictRequest& req,
                        int64_t now_ms, radixkv::v1::EvictResponse* resp);
absl::Status ApplyFlush(CacheState& state, const radixkv::v1::FlushRequest& req,
                        int64_t now_ms, radixkv::v1::FlushResponse* resp);

// The live Register: ApplyRegister behind the read-only admission checks
// of the metadata bounds and the vocabulary
// (CacheState::CheckRegisterWithinBounds, CheckVocabAgreesWithLiveWorkers).
// A rejected call is not journaled; replay runs ApplyRegister alone, so a
// journal written under other bounds replays as it was acknowledged.
absl::Status AdmitAndApplyRegister(CacheState& state,
                                   const radixkv::v1::RegisterRequest& req,
                                   int64_t now_ms,
                                   radixkv::v1::RegisterResponse* resp);
// The live Commit: ApplyCommit behind the tree-count bound
// (CacheState::CheckCommitWithinBounds); replay runs ApplyCommit alone.
absl::Status AdmitAndApplyCommit(CacheState& state,
                                 const radixkv::v1::CommitRequest& req,
                                 int64_t now_ms,
                                 radixkv::v1::CommitResponse* resp);

// The background sweep at now_ms: CreditServicePause(paused_ms), then
// ExpireLeases and DropDeadWorkers. Returns {leases expired, workers
// dropped}.
std::pair<int, int> ApplySweep(CacheState& state, int64_t now_ms,
                               int64_t paused_ms);

// Replays one journal entry with the Apply function of its op. DATA_LOSS
// for an unknown op or an undecodable payload (the journal is corrupt);
// otherwise the core's status (an error means the replay diverged).
absl::Status ReplayJournalEntry(CacheState& state, const JournalEntry& entry);

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_RPC_APPLY_H_
