// CacheState: the in-process core of the cache service (no gRPC, no I/O):
// per (model, cache_salt) one radix tree shared by the model's workers
// (SGLang RadixAttention, background.md §2.2), per worker a page allocator
// with ref counts and copy-on-write (PagedAttention, SOSP'23; background.md
// §1.4), the leases that hold lock_ref on tree paths (§2.3) and the
// eviction queues (§2.4). Methods mirror the RPCs of
// proto/radixkv/v1/cache_service.proto with plain structs; the design is in
// docs/architecture.md "Cache service design choices".
//
// Contract the journal replay relies on: every mutating method takes the
// time as `now_ms` (milliseconds, the caller's clock) and reads no clock,
// random source or hash-map order, and ids come from counters in the state,
// so Restore(snapshot) + the same calls == the original state (equal
// CanonicalDump()). A call that fails changes nothing, so failed calls
// replay as the same failure.
//
// A lease's kv_indices are page-consistent (position p at offset
// p % page_size of its page), usable as a block_table. Per worker, in slots:
// free + evictable + protected == capacity.
//
// Thread safety: none; the service serializes calls with one mutex.
#ifndef RADIXKV_CACHE_SERVICE_CACHE_STATE_H_
#define RADIXKV_CACHE_SERVICE_CACHE_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache_service/eviction_policy.h"
#include "cache_service/page_allocator.h"

namespace radixkv::cache_service {

// Limits, matching the ranges documented in cache_service.proto.
inline constexpr int64_t kMaxPromptTokens = int64_t{1} << 20;  // tokens
inline constexpr int32_t kMaxReserveTokens = 65536;            // slots
inline constexpr int32_t kMaxGrowTokens = 65536;               // slots
inline constexpr int32_t kMaxForkChildren = 64;
// One bit per worker in each tree node's 64-bit residency mask.
inline constexpr int kMaxWorkersPerModel = 64;
inline constexpr int64_t kMaxCapacitySlots = int64_t{1} << 26;  // slots
inline constexpr size_t kMaxWorkerIdBytes = 128;
inline constexpr size_t kMaxCacheSaltBytes = 256;

// Bounds on the service's metadata, so that no sequence of calls can make it
// allocate without limit (docs/architecture.md "Memory bound": bytes per
// slot, per tree and per worker). Checked by the admission checks of live
// calls (CheckRegisterWithinBounds, CheckCommitWithinBounds), never by the
// operations themselves: a journal written under other bounds replays to
// the same state.
struct MetadataBounds {
  // Sum of capacity_slots over all registered workers, slots. The page
  // allocator costs 12 bytes per page; cached tokens cost about 8-20 bytes
  // each in tree records (up to ~360 when every token is its own node).
  int64_t max_total_slots = int64_t{1} << 24;
  // Registered workers over all models (models <= workers: a model exists
  // only while a worker serves it).
  int32_t max_workers = 1024;
  // (model, cache_salt) trees over all models (a tree exists only while it
  // holds tokens; each costs ~1 KiB beyond its nodes).
  int32_t max_trees = 65536;
};

// Configuration that is not part of the journaled state (the restarted
// service must use the same values).
struct CacheOptions {
  // Lease time-to-live; any call on a lease (and a heartbeat listing it)
  // renews it. Milliseconds.
  int64_t lease_ttl_ms = 30'000;
  // A worker without heartbeat for longer than this is dropped by
  // DropDeadWorkers(). Milliseconds.
  int64_t heartbeat_timeout_ms = 10'000;
  // Which unlocked leaves go first (background.md §2.4): kLru (default), kLfu,
  // kPriority, kReuseLru (with its reuse bonus).
  EvictionPolicy eviction_policy;
  // Grow() rounds num_tokens up to a multiple of this when page_size == 1
  // (amortises Grow calls, docs/architecture.md "One request" step 4). Slots,
  // >= 1.
  int32_t grow_chunk_tokens = 16;
  // Metadata bounds of live Register and Commit calls (may change across a
  // restart).
  MetadataBounds bounds;
};

// A worker's load as reported by its heartbeat (mirrors radixkv.v1.WorkerLoad).
struct WorkerLoad {
  int32_t running_requests = 0;
  int32_t waiting_requests = 0;
  int64_t outstanding_tokens = 0;  // tokens
  int64_t available_slots = 0;     // slots
  friend bool operator==(const WorkerLoad&, const WorkerLoad&) = default;
};

// ---- Register / Heartbeat / Deregister ----

struct RegisterWorkerRequest {
  std::string worker_id;        // 1..128 bytes
  std::string address;          // host:port
  int64_t capacity_slots = 0;   // multiple of page_size, in
                                // [page_size, kMaxCapacitySlots]
  int32_t page_size = 1;        // one of 1, 8, 16, 32, 64, 128
  std::string model;            // non-empty
  int64_t epoch = 0;            // monotonic per worker_id
  int32_t vocab_size = 0;       // > 0: token ids validated against it
  std::string metrics_address;  // informational
};

struct RegisterWorkerResult {
  int64_t epoch = 0;
  int64_t lease_ttl_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  // The worker's heartbeat period and deadline: min(heartbeat timeout,
  // lease TTL) / 4, so that interval + deadline + interval (one lost
  // heartbeat) stays within 3/4 of either. Milliseconds, >= 1.
  int64_t heartbeat_interval_ms = 0;
  // True when a previous epoch of this worker was wiped (residency, leases).
  bool wiped_previous_epoch = false;
  // Leases dropped by that wipe.
  int32_t released_leases = 0;
};

struct HeartbeatRequest {
  std::string worker_id;
  int64_t epoch = 0;
  WorkerLoad load;
  // Leases the worker still uses: each live one is renewed.
  std::vector<uint64_t> lease_ids;
};

struct HeartbeatResult {
  // Ids from lease_ids that are unknown, expired, or belong to another worker.
  std::vector<uint64_t> lost_lease_ids;
};

struct DeregisterResult {
  int32_t released_leases = 0;
};

// ---- Match ----

struct MatchRequest {
  std::string model;
  std::string cache_salt;       // <= 256 bytes
  std::vector<int32_t> tokens;  // 1..kMaxPromptTokens ids in [0, vocab)
};

// Residency of one prompt on one worker.
struct WorkerMatch {
  std::string worker_id;
  std::string address;
  int64_t epoch = 0;
  // Longest cached prefix on the worker, tokens (token granular).
  int64_t matched_tokens = 0;
  // matched_tokens rounded down to the worker's page_size: what
  // page-granular reuse (vLLM/SGLang) would give, tokens.
  int64_t page_aligned_tokens = 0;
  WorkerLoad load;
  int64_t heartbeat_age_ms = 0;  // now_ms - last heartbeat, ms
  // Memory state of the worker, slots (as WorkerStats): free + evictable +
  // protected == capacity. O(1) each (allocator counters).
  int64_t capacity_slots = 0;
  int64_t free_slots = 0;
  int64_t evictable_slots = 0;
  int64_t protected_slots = 0;
  int64_t cached_tokens = 0;  // tokens resident in the model's trees
  int32_t page_size = 0;      // tokens per page
  // Restored but not yet confirmed (MarkWorkersUnconfirmed): matched_tokens
  // and page_aligned_tokens are 0.
  bool unconfirmed = false;
};

struct MatchResult {
  // One entry per registered worker of the model, sorted by worker_id.
  std::vector<WorkerMatch> workers;
};

// ---- Acquire / Grow / Fork / Commit / Release ----

struct AcquireRequest {
  std::string worker_id;
  int64_t epoch = 0;
  std::string model;  // empty = the worker's model
  std::string cache_salt;
  std::vector<int32_t> tokens;  // the prompt, 1..kMaxPromptTokens ids
  int32_t priority = 0;         // eviction priority of what this inserts
  int32_t reserve_tokens = 0;   // extra slots beyond the prompt, [0, 65536]
  std::string request_id;       // for logs and dumps only
  bool disable_match = false;   // no-cache baseline: prefix_len = 0
};

struct AcquireResult {
  uint64_t lease_id = 0;
  // Cached prompt tokens not to recompute, [0, len(tokens) - 1].
  int64_t prefix_len = 0;
  // prefix_len had only whole pages been reused, tokens.
  int64_t page_aligned_prefix_len = 0;
  // Longest cached prefix before the "leave one token" cut, tokens.
  int64_t matched_tokens = 0;
  // Slot of every prompt position then the reserved slots:
  // len = len(tokens) + reserve_tokens (the lease length), slot = page *
  // page_size + offset; the last page's remaining slots stay with the lease
  // and are handed out first by Grow().
  std::vector<int64_t> kv_indices;
  // Copies to run before reading kv_indices[0, prefix_len).
  std::vector<CopyOp> copy_ops;
  int64_t lease_ttl_ms = 0;
  // Tokens evicted from this worker's tree to make room.
  int64_t evicted_tokens = 0;
};

struct GrowRequest {
  uint64_t lease_id = 0;
  int32_t num_tokens = 0;  // [1, 65536]
};

struct GrowResult {
  // Newly appended slots, in order; >= num_tokens of them (rounded up to the
  // end of a page, or to grow_chunk_tokens when page_size == 1).
  std::vector<int64_t> kv_indices;
  // Copy-on-write of a shared, partly filled last page.
  std::vector<CopyOp> copy_ops;
  // When copy-on-write moved the last partial page: the lease's
  // kv_indices[first_remapped_position, ...) are replaced by
  // remapped_kv_indices. -1 when nothing moved.
  int64_t first_remapped_position = -1;
  std::vector<int64_t> remapped_kv_indices;
  int64_t evicted_tokens = 0;
};

struct ForkRequest {
  uint64_t lease_id = 0;
  int32_t num_children = 0;  // [1, 64]
  int64_t num_tokens = 0;    // [1, lease length]: shared, already written
};

struct ForkedLease {
  uint64_t lease_id = 0;
  std::vector<int64_t> kv_indices;  // len = num_tokens
};

struct ForkResult {
  std::vector<ForkedLease> children;
};

struct CommitRequest {
  uint64_t lease_id = 0;
  // The lease's prompt followed by generated tokens whose KV is written;
  // length in [len(prompt), lease length].
  std::vector<int32_t> tokens;
  bool keep_lease = false;
};

struct CommitResult {
  int64_t inserted_tokens = 0;  // tokens newly resident on the worker
  // Slots returned to the free list by this call (whole pages: duplicates of
  // cached tokens, and unused reserve when the lease ends).
  int64_t freed_slots = 0;
  // With keep_lease: the lease's whole table after remapping fully
  // duplicated pages to the tree's pages (same length as before).
  std::vector<int64_t> kv_indices;
};

struct ReleaseResult {
  int64_t freed_slots = 0;  // slots returned to the free list
};

// ---- Evict / Flush / Stats / expiry ----

struct EvictResult {
  int64_t evicted_tokens = 0;  // tokens removed from the worker's residency
};

struct FlushResult {
  int64_t evicted_tokens = 0;
};

// Memory state of one worker, slots; free + evictable + protected ==
// capacity.
struct WorkerStats {
  std::string worker_id;
  std::string address;
  std::string metrics_address;
  int64_t epoch = 0;
  std::string model;
  int32_t page_size = 0;
  int32_t vocab_size = 0;
  int64_t capacity_slots = 0;
  int64_t free_slots = 0;
  int64_t evictable_slots = 0;
  int64_t protected_slots = 0;
  int64_t cached_tokens = 0;  // tokens resident in the trees
  int32_t active_leases = 0;
  WorkerLoad load;
  int64_t heartbeat_age_ms = 0;
  // Cumulative since this epoch registered.
  int64_t prefix_query_tokens = 0;  // prompt tokens of Acquire calls
  int64_t prefix_hit_tokens = 0;    // prefix_len of Acquire calls
  int64_t evicted_tokens = 0;
  int64_t expired_leases = 0;
  bool unconfirmed = false;  // see WorkerMatch::unconfirmed
};

struct StatsResult {
  std::vector<WorkerStats> workers;  // sorted by worker_id
  int64_t active_leases = 0;
  int64_t expired_leases_total = 0;
  int64_t tree_nodes = 0;  // radix-tree nodes over all trees, roots excluded
  int64_t trees = 0;       // (model, cache_salt) trees with content
  // Bytes of tree metadata (nodes, token runs, residency records, child
  // maps) and tokens stored in trees / resident (worker, token) pairs.
  int64_t tree_metadata_bytes = 0;
  int64_t tree_tokens = 0;
  int64_t resident_tokens = 0;
};

struct ExpiredLease {
  uint64_t lease_id = 0;
  std::string worker_id;
};

struct ExpireResult {
  std::vector<ExpiredLease> expired;  // sorted by lease_id
};

struct DropResult {
  std::vector<std::string> dropped_worker_ids;  // sorted
  int32_t released_leases = 0;
};

class CacheStateImpl;

// The cache service core. See the file comment for the model.
class CacheState {
 public:
  explicit CacheState(CacheOptions options = {});
  ~CacheState();
  CacheState(CacheState&&) noexcept;
  CacheState& operator=(CacheState&&) noexcept;
  CacheState(const CacheState&) = delete;
  CacheState& operator=(const CacheState&) = delete;

  const CacheOptions& options() const;

  // Registers a worker or re-registers it. A higher epoch wipes the previous
  // epoch's residency and leases (its KV bytes are gone); the same epoch with
  // the same shape (capacity, page_size, model, vocab_size) is idempotent
  // (refreshes the heartbeat and address).
  // INVALID_ARGUMENT: empty/oversized worker_id, empty model, bad page_size,
  //   capacity not a positive multiple of page_size or > kMaxCapacitySlots,
  //   negative epoch or vocab_size.
  // FAILED_PRECONDITION: lower epoch, same epoch with another shape.
  // RESOURCE_EXHAUSTED: kMaxWorkersPerModel workers already serve the model,
  // or the page allocator cannot be allocated (out of memory); the previous
  // epoch is kept then.
  // The service's live Register runs CheckRegisterWithinBounds and
  // CheckVocabAgreesWithLiveWorkers first; this method (also the
  // journal-replay path) does not.
  absl::StatusOr<RegisterWorkerResult> RegisterWorker(
      const RegisterWorkerRequest& request, int64_t now_ms);

  // Read-only admission check the service runs on a live Register before
  // RegisterWorker (and before journaling it). Match validates token ids
  // against the smallest vocab_size among the model's workers, so one worker
  // registered with a wrong vocab_size would make every Match of the model
  // fail. When request.vocab_size > 0, every live worker of request.model
  // (heartbeat at most heartbeat_timeout_ms before now_ms, the liveness rule
  // of DropDeadWorkers) other than request.worker_id itself that declares a
  // vocab_size > 0 must declare the same one; so a worker that is the only
  // live one of its model may re-register (new epoch) with another vocab.
  // page_size may differ between workers (one tree serves mixed page sizes).
  // INVALID_ARGUMENT: the malformed requests RegisterWorker rejects (checked
  // first, with the same messages). FAILED_PRECONDITION naming both vocab
  // sizes and the disagreeing live worker (the smallest such worker_id)
  // otherwise. Changes nothing. Not part of RegisterWorker, so journal
  // replay never applies it.
  absl::Status CheckVocabAgreesWithLiveWorkers(
      const RegisterWorkerRequest& request, int64_t now_ms) const;

  // Read-only admission check of a live Register against options().bounds:
  // the registered workers' capacity_slots plus request.capacity_slots
  // (minus the capacity of request.worker_id's own registered epoch, which
  // a Register replaces) must not exceed max_total_slots, and a new
  // worker_id must not make more than max_workers workers.
  // INVALID_ARGUMENT: the malformed requests RegisterWorker rejects.
  // RESOURCE_EXHAUSTED naming the requested slots, the slots in use, the
  // limit and the flag. Changes nothing.
  absl::Status CheckRegisterWithinBounds(
      const RegisterWorkerRequest& request) const;

  // Read-only admission check of a live Commit against options().bounds: a
  // Commit that would create a new (model, cache_salt) tree while
  // max_trees trees exist is RESOURCE_EXHAUSTED (the worker releases the
  // lease; its tokens are not cached). OK for anything Commit itself
  // refuses (unknown lease, bad tokens). Changes nothing.
  absl::Status CheckCommitWithinBounds(const CommitRequest& request,
                                       int64_t now_ms) const;

  // Records load and liveness, renews listed leases of this worker, and
  // confirms the worker (see MarkWorkersUnconfirmed).
  // NOT_FOUND: unknown worker. FAILED_PRECONDITION: epoch != registered
  // (an older one is "stale"; a newer one asks the worker to re-register).
  // INVALID_ARGUMENT: a negative load value (nothing changes).
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request,
                                            int64_t now_ms);

  // Removes a worker with its residency and leases.
  // NOT_FOUND: unknown worker. FAILED_PRECONDITION: epoch != registered
  // (older: stale; newer: re-register first).
  absl::StatusOr<DeregisterResult> DeregisterWorker(std::string_view worker_id,
                                                    int64_t epoch,
                                                    int64_t now_ms);

  // Longest cached prefix of tokens on every registered worker of the model
  // (background.md §2.3 prefix matching, token granular). Read-only: no LRU
  // touch, no lock, no split. Unknown model or salt: every worker matches 0 (or
  // an empty list when no worker serves the model). Cost O(len(tokens) + path
  // nodes + workers). INVALID_ARGUMENT: empty or > kMaxPromptTokens tokens, id
  // < 0 or >= the
  //   model's vocab_size (smallest positive one among its workers), salt
  //   > 256 bytes.
  absl::StatusOr<MatchResult> Match(const MatchRequest& request,
                                    int64_t now_ms) const;

  // Matches on one worker, locks the reused prefix [0, prefix_len) (lock_ref
  // + 1 up to the root, background.md §2.3; an edge the prefix ends inside is
  // split there so the rest of it stays evictable, as SGLang's match_prefix
  // does; the split is made only once the call is known to succeed), reuses
  // whole matched pages, copies a partially matched last page into a fresh page
  // (CopyOp), allocates the uncached tail plus reserve_tokens (evicting
  // unlocked leaves by policy if needed, background.md §2.4) and returns a
  // lease. prefix_len <= len(tokens) - 1. INVALID_ARGUMENT: bad tokens, reserve
  // out of range, salt too long. NOT_FOUND: unknown worker.
  // FAILED_PRECONDITION: epoch != registered or model mismatch.
  // RESOURCE_EXHAUSTED: not enough pages even after evicting every unlocked
  // leaf, counting the pages the prefix lock protects as unavailable (state
  // unchanged; the message gives the slots that were available).
  absl::StatusOr<AcquireResult> Acquire(const AcquireRequest& request,
                                        int64_t now_ms);

  // Appends at least num_tokens slots to the lease (to the end of its last
  // page, then whole pages; chunks of grow_chunk_tokens when page_size is 1).
  // If the last page is partly filled and shared (fork, tree), it is first
  // copied to a fresh page (copy-on-write, vLLM's append_slots, background.md
  // §1.4). Renews the lease. NOT_FOUND: unknown or expired lease.
  // INVALID_ARGUMENT: num_tokens outside [1, 65536]. RESOURCE_EXHAUSTED: no
  // room after eviction (no change).
  absl::StatusOr<GrowResult> Grow(const GrowRequest& request, int64_t now_ms);

  // Makes num_children child leases sharing positions [0, num_tokens) of the
  // parent (page ref counts + 1, no copy; vLLM's fork, background.md §1.4).
  // Each child locks the parent's tree path up to its own prefix, min(parent
  // prefix_len, num_tokens) tokens (splitting an edge there), and has the
  // parent's prompt truncated to num_tokens. The children join the parent's
  // fork family (fork_links.h): they hold its KV of positions [0, num_tokens),
  // so the tokens of those positions are whatever the first Commit of any
  // family member says they are (see Commit). Renews the parent. NOT_FOUND:
  // unknown or
  // expired lease. INVALID_ARGUMENT: num_children outside [1, 64], num_tokens
  // outside [1, lease length]. RESOURCE_EXHAUSTED: the worker's leases would
  // hold more than max(2^20, 32 x pool pages) page references together (a bound
  // on lease memory; no change).
  absl::StatusOr<ForkResult> Fork(const ForkRequest& request, int64_t now_ms);

  // Inserts tokens (whose KV the lease's table holds) into the worker's
  // residency (background.md §2.3 "insert on finish"), splitting nodes at token
  // granularity; positions already resident stay with the tree's slots and
  // the lease's duplicates are dropped. Without keep_lease the lease ends:
  // its path is unlocked and every page only it referenced is freed. With
  // keep_lease the lease stays, locked on exactly the committed tokens (an
  // edge they end inside is split there, so Grow can evict the rest),
  // its fully duplicated pages remapped to the tree's pages, its prompt
  // becoming `tokens`, and it is renewed.
  // Fork families: a Commit fixes the tokens of the positions the lease
  // shares with other leases through Fork, for all of them; a later Commit
  // of any of them must carry the same tokens there. Forks at the end of a
  // prompt (parallel sampling) share only prompt positions, which every
  // child's prompt already fixes.
  // NOT_FOUND: unknown or expired lease (includes double Commit/Release).
  // INVALID_ARGUMENT: tokens do not start with the lease's prompt, disagree
  // with the tokens a lease of its fork family committed at a shared
  // position (the message names the first such position), are longer than
  // the lease's table, or hold ids outside the vocab.
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request,
                                      int64_t now_ms);

  // Aborts a lease: unlocks its path, drops its page references (pages only
  // it held return to the free list). NOT_FOUND: unknown or expired lease
  // (includes double Release).
  absl::StatusOr<ReleaseResult> Release(uint64_t lease_id, int64_t now_ms);

  // Evicts unlocked leaves of the worker by policy (background.md §2.4) until
  // at least num_tokens resident tokens are gone or nothing unlocked is left.
  // NOT_FOUND: unknown worker. INVALID_ARGUMENT: num_tokens outside
  // [1, capacity].
  absl::StatusOr<EvictResult> Evict(std::string_view worker_id,
                                    int64_t num_tokens, int64_t now_ms);

  // Evicts every unlocked token of a worker, or of all workers when
  // worker_id is empty. NOT_FOUND: unknown worker.
  absl::StatusOr<FlushResult> Flush(std::string_view worker_id, int64_t now_ms);

  // Per-worker memory state and counters (all workers when worker_id is
  // empty). NOT_FOUND: unknown worker. Read-only.
  absl::StatusOr<StatsResult> Stats(std::string_view worker_id,
                                    int64_t now_ms) const;

  // Releases every lease whose TTL ran out (expires_at_ms <= now_ms).
  ExpireResult ExpireLeases(int64_t now_ms);

  // Deregisters every worker whose last heartbeat is older than
  // heartbeat_timeout_ms.
  DropResult DropDeadWorkers(int64_t now_ms);

  // The service could not hear anyone for paused_ms before now_ms (its
  // process was stopped, or it was down until a restart): liveness counts
  // only time the service ran, so every worker's last heartbeat moves
  // paused_ms later (at most to now_ms) and every lease expires paused_ms
  // later. Journaled like any state change; paused_ms <= 0 changes nothing.
  void CreditServicePause(int64_t paused_ms, int64_t now_ms);

  // Every registered worker becomes unconfirmed until its next successful
  // Heartbeat or same-epoch Register: Match reports it with matched_tokens
  // 0 (WorkerMatch::unconfirmed). The service calls this after rebuilding
  // its state from Redis, when the process at a worker's address may have
  // restarted with an empty pool. Not part of the logical state (not in
  // CanonicalDump or Serialize; Restore leaves workers confirmed).
  void MarkWorkersUnconfirmed();

  // Deterministic text of the whole logical state (workers, free lists,
  // trees with residency, leases, counters). Equal dumps == equal state.
  std::string CanonicalDump() const;

  // Full binary snapshot of the logical state (for Redis snapshots).
  std::string Serialize() const;

  // Replaces the state by a snapshot made by Serialize() (with the same
  // options). Derived data (ref counts, lock_refs, eviction queues) is
  // rebuilt and checked. INVALID_ARGUMENT / DATA_LOSS on a malformed
  // snapshot; the state is unchanged on error.
  absl::Status Restore(std::string_view snapshot);

  // Checks every invariant (debug/tests; O(state)): per worker free +
  // evictable + protected == capacity; page ref counts equal the number of
  // holders (leases' tables, residency records); each lock_ref equals the
  // number of leases whose path crosses it and is >= 0; residency is
  // prefix-closed; no zero-length or empty non-root node; children keyed by
  // their first token; eviction queues hold exactly the unlocked leaves; no
  // slot is held by two tree records; fork links join live leases of one
  // worker as a forest, and both ends of a link know the same tokens of the
  // positions it shares.
  // INTERNAL with a description of the first violation.
  absl::Status CheckInvariants() const;

  // Root-to-leaf token sequences resident on the worker in the
  // (model, cache_salt) tree, sorted. For tests and debugging.
  // NOT_FOUND: unknown worker.
  absl::StatusOr<std::vector<std::vector<int32_t>>> ResidentSequences(
      std::string_view model, std::string_view cache_salt,
      std::string_view worker_id) const;

 private:
  std::unique_ptr<CacheStateImpl> impl_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_CACHE_STATE_H_
