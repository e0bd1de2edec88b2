// Internal to the cache_state target: the state behind CacheState and the
// helpers its files share. The methods are defined by concept:
//   cache_state.cc             facade, tree/lease lookups, shared helpers
//   cache_state_workers.cc     Register, Heartbeat, Deregister, liveness, Stats
//   cache_state_match.cc       Match, Acquire (prefix match and lock)
//   cache_state_leases.cc      Grow, Fork, Commit, Release, expiry, eviction
//   cache_state_snapshot.cc    CanonicalDump, Serialize, Deserialize
//   cache_state_invariants.cc  CheckInvariants, ResidentSequences
#ifndef RADIXKV_CACHE_SERVICE_CACHE_STATE_IMPL_H_
#define RADIXKV_CACHE_SERVICE_CACHE_STATE_IMPL_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache_service/cache_state.h"
#include "cache_service/eviction_policy.h"
#include "cache_service/fork_links.h"
#include "cache_service/lease_table.h"
#include "cache_service/page_allocator.h"
#include "cache_service/radix_tree.h"
#include "cache_service/snapshot_codec.h"

namespace radixkv::cache_service {

static_assert(kMaxWorkersPerModel == kMaxResidentWorkers);

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Most page references all leases of a worker may hold together (tables of
// forked children share pages but each holds its own table): 32 per pool
// page, at least 2^20. Bounds lease memory against runaway Fork/Acquire.
inline int64_t LeasePageRefLimit(int64_t num_pages) {
  return std::max<int64_t>(int64_t{1} << 20, 32 * num_pages);
}

// FAILED_PRECONDITION for a call carrying another epoch than the registered
// one: an older epoch is a stale process; a newer one means the worker
// restarted and must Register its new epoch first.
absl::Status EpochMismatch(std::string_view worker_id, int64_t epoch,
                           int64_t registered);

// NOT_FOUND "unknown worker <worker_id>".
absl::Status UnknownWorker(std::string_view worker_id);

// Union-find root of x over `parent` (absent = its own root).
uint64_t ForestRoot(absl::flat_hash_map<uint64_t, uint64_t>& parent,
                    uint64_t x);

// Expected lock_ref per (node id, worker bit), counted from the leases.
using LockRefCounts = absl::flat_hash_map<std::pair<uint64_t, int>, int32_t>;

struct WorkerEntry {
  RegisterWorkerRequest info;
  WorkerLoad load;
  int64_t last_heartbeat_ms = 0;
  // False from MarkWorkersUnconfirmed until the next Heartbeat or
  // same-epoch Register (not part of the logical state).
  bool confirmed = true;
  int bit = 0;
  std::unique_ptr<PageAllocator> allocator;
  std::unique_ptr<EvictionQueue> queue;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evicted_tokens = 0;
  int64_t expired_leases = 0;
  std::set<uint64_t> lease_ids;
  // Sum of the page-table lengths of the worker's leases (bounded by
  // LeasePageRefLimit so forks cannot grow memory without bound).
  int64_t lease_page_refs = 0;
};

struct ModelEntry {
  std::unique_ptr<WorkerContexts> contexts = std::make_unique<WorkerContexts>();
  uint64_t mask = 0;
  std::array<std::string, kMaxWorkersPerModel> bit_owner;
  std::map<std::string, std::unique_ptr<RadixTree>> trees;  // by cache_salt
};

class CacheStateImpl {
 public:
  explicit CacheStateImpl(CacheOptions options) : options_(options) {
    options_.grow_chunk_tokens = std::max(1, options_.grow_chunk_tokens);
  }

  // All public operations; see cache_state.h.
  absl::StatusOr<RegisterWorkerResult> RegisterWorker(
      const RegisterWorkerRequest& request, int64_t now_ms);
  absl::Status CheckVocabAgreesWithLiveWorkers(
      const RegisterWorkerRequest& request, int64_t now_ms) const;
  absl::Status CheckRegisterWithinBounds(
      const RegisterWorkerRequest& request) const;
  absl::Status CheckCommitWithinBounds(const CommitRequest& request,
                                       int64_t now_ms) const;
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request,
                                            int64_t now_ms);
  absl::StatusOr<DeregisterResult> DeregisterWorker(std::string_view worker_id,
                                                    int64_t epoch);
  absl::StatusOr<MatchResult> Match(const MatchRequest& request,
                                    int64_t now_ms) const;
  absl::StatusOr<AcquireResult> Acquire(const AcquireRequest& request,
                                        int64_t now_ms);
  absl::StatusOr<GrowResult> Grow(const GrowRequest& request, int64_t now_ms);
  absl::StatusOr<ForkResult> Fork(const ForkRequest& request, int64_t now_ms);
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request,
                                      int64_t now_ms);
  absl::StatusOr<ReleaseResult> Release(uint64_t lease_id, int64_t now_ms);
  absl::StatusOr<EvictResult> Evict(std::string_view worker_id,
                                    int64_t num_tokens);
  absl::StatusOr<FlushResult> Flush(std::string_view worker_id);
  absl::StatusOr<StatsResult> Stats(std::string_view worker_id,
                                    int64_t now_ms) const;
  ExpireResult ExpireLeases(int64_t now_ms);
  DropResult DropDeadWorkers(int64_t now_ms);
  void CreditServicePause(int64_t paused_ms, int64_t now_ms);
  void MarkWorkersUnconfirmed();
  std::string CanonicalDump() const;
  std::string Serialize() const;
  static absl::StatusOr<std::unique_ptr<CacheStateImpl>> Deserialize(
      std::string_view snapshot, const CacheOptions& options);
  absl::Status CheckInvariants() const;
  absl::StatusOr<std::vector<std::vector<int32_t>>> ResidentSequences(
      std::string_view model, std::string_view cache_salt,
      std::string_view worker_id) const;

  const CacheOptions& options() const { return options_; }

 private:
  WorkerEntry* FindWorker(std::string_view id) {
    auto it = workers_.find(std::string(id));
    return it == workers_.end() ? nullptr : &it->second;
  }
  const WorkerEntry* FindWorker(std::string_view id) const {
    auto it = workers_.find(std::string(id));
    return it == workers_.end() ? nullptr : &it->second;
  }
  // The registered worker at `epoch`: UnknownWorker, or EpochMismatch for
  // another epoch.
  absl::StatusOr<WorkerEntry*> WorkerAtEpoch(std::string_view worker_id,
                                             int64_t epoch);
  RadixTree* FindTree(const std::string& model, const std::string& salt) const;
  RadixTree* GetOrCreateTree(const std::string& model, const std::string& salt);
  void MaybeDropTree(RadixTree* tree);
  absl::StatusOr<Lease*> LiveLease(uint64_t lease_id, int64_t now_ms);
  absl::Status ValidateTokens(const std::vector<int32_t>& tokens,
                              int32_t vocab_size) const;
  int32_t ModelVocab(const std::string& model) const;
  // Evicts the worker's first evictable leaf; false when none is left.
  bool EvictOne(WorkerEntry& worker, int64_t* evicted_tokens);
  // Evicts until at least `pages` pages are free (the caller checked that
  // free + evictable suffices). Returns tokens evicted.
  int64_t EvictUntilFree(WorkerEntry& worker, int64_t pages);
  // Unlocks the lease's path, drops its page references and erases it.
  // Returns pages freed.
  int64_t EndLease(Lease* lease);
  // Drops every lease and all residency of a worker and unregisters it.
  int32_t RemoveWorker(const std::string& worker_id);
  std::vector<int64_t> TableSlots(const Lease& lease, int32_t page_size,
                                  int64_t from, int64_t to) const;
  // INVALID_ARGUMENT naming the first position where `tokens` contradict
  // what the lease's KV is known to hold (its prompt, then the tokens its
  // fork family committed at positions it shares).
  absl::Status CheckCommitAgrees(const Lease& lease,
                                 const std::vector<int32_t>& tokens) const;
  // After a Commit of `lease_id` with `tokens`: every lease sharing some of
  // positions [0, len(tokens)) with it through Fork learns their tokens.
  void ShareCommittedTokens(uint64_t lease_id,
                            const std::vector<int32_t>& tokens);
  // Snapshot restore: links the leases as `links` say. INVALID_ARGUMENT
  // when a link names an unknown lease, joins two workers, is longer than a
  // table or closes a cycle.
  absl::Status RestoreForkLinks(const std::vector<ForkLink>& links);
  // Snapshot restore, one record kind each (cache_state_snapshot.cc). A
  // malformed record is DATA_LOSS; a reader that ran out of bytes returns OK
  // and leaves the truncation to the caller's final check.
  absl::Status ReadWorkers(SnapshotReader& r);
  absl::Status ReadTrees(
      SnapshotReader& r,
      absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id);
  absl::Status ReadTreeNodes(
      SnapshotReader& r, RadixTree* tree, uint64_t num_nodes,
      absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id);
  absl::Status ReadLeases(
      SnapshotReader& r, bool has_fork_families,
      const absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id);
  // DATA_LOSS unless every page is either on the free list or referenced.
  absl::Status CheckFreeListsMatchRefs() const;
  // The fork-link part of CheckInvariants.
  absl::Status CheckForkLinks() const;
  // The lease part of CheckInvariants: fills the expected lock_refs and each
  // worker's lease ids.
  absl::Status CheckLeases(
      LockRefCounts& lock_refs,
      absl::flat_hash_map<std::string, std::set<uint64_t>>& leases_of) const;
  // Model masks, bit owners and each tree's structure.
  absl::Status CheckModels(const LockRefCounts& lock_refs) const;
  // One worker's leases, eviction queue and page accounting.
  absl::Status CheckWorker(const std::string& id, const WorkerEntry& worker,
                           const std::set<uint64_t>& lease_ids) const;
  // No slot of a worker is held by two tree records (CheckInvariants).
  absl::Status CheckSlotsHeldOnce(const WorkerEntry& worker,
                                  const ModelEntry& model) const;

  CacheOptions options_;
  std::map<std::string, WorkerEntry> workers_;
  std::map<std::string, ModelEntry> models_;
  LeaseTable leases_;
  // Which live leases share KV positions through Fork.
  ForkLinks fork_links_;
  uint64_t next_node_id_ = 1;
  int64_t expired_leases_total_ = 0;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_CACHE_STATE_IMPL_H_
