#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"

namespace radixkv::cache_service {

absl::StatusOr<MatchResult> CacheStateImpl::Match(const MatchRequest& request,
                                                  int64_t now_ms) const {
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError("cache_salt exceeds 256 bytes");
  }
  if (absl::Status s =
          ValidateTokens(request.tokens, ModelVocab(request.model));
      !s.ok()) {
    return s;
  }
  MatchResult result;
  auto m = models_.find(request.model);
  if (m == models_.end()) return result;
  const ModelEntry& model = m->second;
  std::array<int64_t, kMaxResidentWorkers> matched;
  matched.fill(0);
  if (const RadixTree* tree = FindTree(request.model, request.cache_salt)) {
    tree->MatchAll(request.tokens, model.mask, &matched);
  }
  uint64_t bits = model.mask;
  while (bits != 0) {
    const int bit = std::countr_zero(bits);
    bits &= bits - 1;
    const WorkerEntry& worker = workers_.at(model.bit_owner[bit]);
    WorkerMatch match;
    match.worker_id = worker.info.worker_id;
    match.address = worker.info.address;
    match.epoch = worker.info.epoch;
    // An unconfirmed worker's residency may describe a pool that is gone.
    match.unconfirmed = !worker.confirmed;
    match.matched_tokens = worker.confirmed ? matched[bit] : 0;
    match.page_aligned_tokens =
        match.matched_tokens / worker.info.page_size * worker.info.page_size;
    match.load = worker.load;
    match.heartbeat_age_ms =
        std::max<int64_t>(0, now_ms - worker.last_heartbeat_ms);
    match.capacity_slots = worker.allocator->capacity_slots();
    match.free_slots = worker.allocator->free_slots();
    match.evictable_slots = worker.allocator->evictable_slots();
    match.protected_slots = worker.allocator->protected_slots();
    match.cached_tokens = (*model.contexts)[bit].resident_tokens;
    match.page_size = worker.info.page_size;
    result.workers.push_back(std::move(match));
  }
  std::sort(result.workers.begin(), result.workers.end(),
            [](const WorkerMatch& a, const WorkerMatch& b) {
              return a.worker_id < b.worker_id;
            });
  return result;
}

absl::StatusOr<AcquireResult> CacheStateImpl::Acquire(
    const AcquireRequest& request, int64_t now_ms) {
  absl::StatusOr<WorkerEntry*> found =
      WorkerAtEpoch(request.worker_id, request.epoch);
  if (!found.ok()) return found.status();
  WorkerEntry* worker = *found;
  if (!request.model.empty() && request.model != worker->info.model) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id, " serves model ",
                     worker->info.model, ", not ", request.model));
  }
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError("cache_salt exceeds 256 bytes");
  }
  if (request.reserve_tokens < 0 ||
      request.reserve_tokens > kMaxReserveTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve_tokens ", request.reserve_tokens, " outside [0, ",
                     kMaxReserveTokens, "]"));
  }
  if (absl::Status s = ValidateTokens(request.tokens, worker->info.vocab_size);
      !s.ok()) {
    return s;
  }
  const std::string& model_name = worker->info.model;
  const int bit = worker->bit;
  const int32_t page_size = worker->info.page_size;
  const int64_t num_tokens = static_cast<int64_t>(request.tokens.size());
  PageAllocator& allocator = *worker->allocator;

  RadixTree* tree = FindTree(model_name, request.cache_salt);
  PathMatch match;
  if (tree != nullptr && !request.disable_match) {
    match = tree->MatchWorker(request.tokens, bit);
  }
  const int64_t prefix_len = std::min(match.matched_tokens, num_tokens - 1);
  RadixNode* terminal = nullptr;
  for (RadixNode* node : match.path) {
    if (node->start() < prefix_len) terminal = node;
  }
  const int64_t length = num_tokens + request.reserve_tokens;
  const int64_t total_pages = CeilDiv(length, page_size);
  const int64_t shared_pages = prefix_len / page_size;
  const int32_t partial = static_cast<int32_t>(prefix_len % page_size);
  const int64_t new_pages = total_pages - shared_pages;

  if (worker->lease_page_refs + total_pages >
      LeasePageRefLimit(allocator.num_pages())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, ": leases already reference ",
        worker->lease_page_refs, " pages (limit ",
        LeasePageRefLimit(allocator.num_pages()), ")"));
  }
  // Only positions [0, prefix_len) get locked (background.md §2.3-§2.4, SGLang
  // semantics): the rest of the edge the match ends in stays evictable. Room
  // is decided before anything changes - the pages the lock would protect
  // are subtracted from the evictable ones - so a failed call leaves the
  // state (and CanonicalDump) untouched; the split for the lock happens only
  // once success is certain.
  const int64_t free_pages = allocator.num_free_pages();
  int64_t available_pages = free_pages + allocator.num_evictable_pages();
  if (new_pages > free_pages && terminal != nullptr) {
    available_pages -=
        tree->PagesProtectedByLockPrefix(terminal, prefix_len, bit);
  }
  if (new_pages > available_pages) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, " needs ", new_pages * page_size,
        " slots for ", num_tokens, " tokens (", prefix_len,
        " cached) + reserve ", request.reserve_tokens, " but only ",
        available_pages * page_size,
        " are free or evictable once the cached prefix is locked"));
  }
  // Slots of the matched prefix, read before the split below (which moves
  // the path's last node object to the lower half of its edge).
  std::vector<int32_t> tree_slots;
  if (prefix_len > 0) tree_slots = RadixTree::PathSlots(match, bit, prefix_len);
  // Lock before evicting so that eviction cannot take the matched prefix.
  if (terminal != nullptr)
    terminal = tree->LockPrefix(terminal, prefix_len, bit);
  AcquireResult result;
  result.evicted_tokens = EvictUntilFree(*worker, new_pages);
  if (terminal != nullptr) {
    tree->TouchPath(terminal, bit, now_ms, request.priority,
                    /*count_hit=*/true);
  }

  Lease lease;
  lease.worker_id = request.worker_id;
  lease.model = model_name;
  lease.cache_salt = request.cache_salt;
  lease.request_id = request.request_id;
  lease.terminal = terminal;
  lease.prompt = request.tokens;
  lease.priority = request.priority;
  lease.prefix_len = prefix_len;
  lease.length = length;
  lease.expires_at_ms = now_ms + options_.lease_ttl_ms;
  lease.pages.reserve(total_pages);
  if (prefix_len > 0) {
    // Whole matched pages are shared: the page holding a logical page's last
    // position holds valid KV for all of its positions (page-consistent
    // tables), page ref-count sharing, background.md §1.4.
    for (int64_t k = 0; k < shared_pages; ++k) {
      const int32_t page = tree_slots[(k + 1) * page_size - 1] / page_size;
      allocator.Ref(page, /*protect=*/true);
      lease.pages.push_back(page);
    }
    if (partial > 0) {
      // Token-granular reuse of a partially matched page: copy its first
      // `partial` positions into a fresh page the lease can write.
      const int32_t src = tree_slots[prefix_len - 1] / page_size;
      const int32_t dst = allocator.Allocate(1)[0];
      result.copy_ops.push_back(CopyOp{src, dst, partial});
      lease.pages.push_back(dst);
    }
  }
  const std::vector<int32_t> fresh = allocator.Allocate(static_cast<int32_t>(
      total_pages - static_cast<int64_t>(lease.pages.size())));
  lease.pages.insert(lease.pages.end(), fresh.begin(), fresh.end());

  Lease* added = leases_.Add(std::move(lease));
  worker->lease_ids.insert(added->id);
  worker->lease_page_refs += total_pages;
  worker->prefix_query_tokens += num_tokens;
  worker->prefix_hit_tokens += prefix_len;

  result.lease_id = added->id;
  result.prefix_len = prefix_len;
  result.page_aligned_prefix_len = shared_pages * page_size;
  result.matched_tokens = match.matched_tokens;
  result.kv_indices = TableSlots(*added, page_size, 0, length);
  result.lease_ttl_ms = options_.lease_ttl_ms;
  return result;
}

}  // namespace radixkv::cache_service
