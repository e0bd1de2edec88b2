#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"

namespace radixkv::cache_service {

absl::Status CacheStateImpl::CheckCommitAgrees(
    const Lease& lease, const std::vector<int32_t>& tokens) const {
  const int64_t n =
      std::min(static_cast<int64_t>(tokens.size()), lease.known_length());
  const int64_t prompt = static_cast<int64_t>(lease.prompt.size());
  for (int64_t p = 0; p < n; ++p) {
    const int32_t known = lease.known_token(p);
    if (tokens[p] == known) continue;
    if (p < prompt) {
      return absl::InvalidArgumentError(
          absl::StrCat("commit tokens of lease ", lease.id,
                       " do not extend its prompt: position ", p,
                       " holds token ", tokens[p], ", the prompt ", known));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "commit tokens of lease ", lease.id, " disagree at position ", p,
        " with the KV it shares through Fork: a lease of its fork family "
        "committed token ",
        known, " there, this commit has ", tokens[p]));
  }
  return absl::OkStatus();
}

void CacheStateImpl::ShareCommittedTokens(uint64_t lease_id,
                                          const std::vector<int32_t>& tokens) {
  fork_links_.Visit(lease_id, static_cast<int64_t>(tokens.size()),
                    [&](uint64_t other, int64_t shared) {
                      Lease* lease = leases_.Find(other);
                      const int64_t known = lease->known_length();
                      // Everything past `other` already knows what it knows
                      // (the links keep knowledge propagated), so the walk can
                      // stop there.
                      if (known >= shared) return false;
                      lease->shared_tokens.insert(lease->shared_tokens.end(),
                                                  tokens.begin() + known,
                                                  tokens.begin() + shared);
                      return true;
                    });
}

absl::StatusOr<GrowResult> CacheStateImpl::Grow(const GrowRequest& request,
                                                int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* lease = *found;
  if (request.num_tokens < 1 || request.num_tokens > kMaxGrowTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", request.num_tokens, " outside [1, ",
                     kMaxGrowTokens, "]"));
  }
  WorkerEntry& worker = workers_.at(lease->worker_id);
  PageAllocator& allocator = *worker.allocator;
  const int32_t page_size = worker.info.page_size;
  const int64_t length = lease->length;
  const int64_t target =
      page_size > 1
          ? CeilDiv(length + request.num_tokens, page_size) * page_size
          : length + CeilDiv(request.num_tokens, options_.grow_chunk_tokens) *
                         options_.grow_chunk_tokens;
  const int32_t tail = static_cast<int32_t>(length % page_size);
  const bool copy_on_write =
      tail != 0 && allocator.ref_count(lease->pages.back()) > 1;
  const int64_t new_pages = CeilDiv(target, page_size) -
                            CeilDiv(length, page_size) +
                            (copy_on_write ? 1 : 0);
  // When this lease is the only protecting holder of its last page, every
  // other holder is an unlocked tree record: evicting them all lets the
  // lease write in place, so the copy's page is not strictly needed.
  const bool copy_avoidable =
      copy_on_write && allocator.protect_count(lease->pages.back()) == 1;
  const int64_t min_pages = new_pages - (copy_avoidable ? 1 : 0);
  const int64_t available_pages =
      allocator.num_free_pages() + allocator.num_evictable_pages();
  if (min_pages > available_pages) {
    return absl::ResourceExhaustedError(
        absl::StrCat("lease ", lease->id, " on worker ", lease->worker_id,
                     " needs ", min_pages * page_size, " slots but only ",
                     available_pages * page_size, " are free or evictable"));
  }
  GrowResult result;
  // With only min_pages obtainable this evicts every unlocked record,
  // including the other holders of the last page.
  result.evicted_tokens = EvictUntilFree(worker, new_pages);
  // Eviction may have dropped the other holders of the last page (unlocked
  // tree nodes): then the lease writes in place after all.
  int32_t fresh_last = 0;
  std::optional<CopyOp> op =
      copy_on_write
          ? allocator.CopyOnWrite(lease->pages.back(), tail, &fresh_last)
          : std::nullopt;
  if (op.has_value()) {
    result.copy_ops.push_back(*op);
    lease->pages.back() = fresh_last;
    result.first_remapped_position = length - tail;
    result.remapped_kv_indices =
        TableSlots(*lease, page_size, length - tail, length);
  }
  const std::vector<int32_t> fresh = allocator.Allocate(static_cast<int32_t>(
      CeilDiv(target, page_size) - static_cast<int64_t>(lease->pages.size())));
  lease->pages.insert(lease->pages.end(), fresh.begin(), fresh.end());
  worker.lease_page_refs += static_cast<int64_t>(fresh.size());
  lease->length = target;
  result.kv_indices = TableSlots(*lease, page_size, length, target);
  leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
  return result;
}

absl::StatusOr<ForkResult> CacheStateImpl::Fork(const ForkRequest& request,
                                                int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* parent = *found;
  if (request.num_children < 1 || request.num_children > kMaxForkChildren) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_children ", request.num_children, " outside [1, ",
                     kMaxForkChildren, "]"));
  }
  if (request.num_tokens < 1 || request.num_tokens > parent->length) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", request.num_tokens, " outside [1, ",
                     parent->length, "] (the lease length)"));
  }
  WorkerEntry& worker = workers_.at(parent->worker_id);
  const int32_t page_size = worker.info.page_size;
  const int64_t shared_pages = CeilDiv(request.num_tokens, page_size);
  const int64_t limit = LeasePageRefLimit(worker.allocator->num_pages());
  if (worker.lease_page_refs + request.num_children * shared_pages > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("lease ", parent->id, ": forking ", request.num_children,
                     " x ", shared_pages,
                     " pages exceeds the worker's lease page references "
                     "limit ",
                     limit, " (", worker.lease_page_refs, " in use)"));
  }
  leases_.Renew(parent, now_ms + options_.lease_ttl_ms);
  const uint64_t parent_id = parent->id;
  ForkResult result;
  for (int32_t i = 0; i < request.num_children; ++i) {
    const Lease& p = *leases_.Find(parent_id);
    Lease child;
    child.worker_id = p.worker_id;
    child.model = p.model;
    child.cache_salt = p.cache_salt;
    child.request_id = p.request_id;
    child.prompt.assign(p.prompt.begin(),
                        p.prompt.begin() + std::min<int64_t>(request.num_tokens,
                                                             p.prompt.size()));
    // What the family already fixed at the shared positions past the prompt.
    const int64_t known = std::min(request.num_tokens, p.known_length());
    for (int64_t k = static_cast<int64_t>(child.prompt.size()); k < known;
         ++k) {
      child.shared_tokens.push_back(p.known_token(k));
    }
    child.priority = p.priority;
    child.prefix_len = std::min(p.prefix_len, request.num_tokens);
    child.pages.assign(p.pages.begin(), p.pages.begin() + shared_pages);
    child.length = request.num_tokens;
    child.expires_at_ms = now_ms + options_.lease_ttl_ms;
    for (int32_t page : child.pages) worker.allocator->Ref(page, true);
    // The child locks only its own prefix [0, prefix_len), which may end
    // inside the parent's terminal edge (split there, token granular).
    if (p.terminal != nullptr && child.prefix_len > 0) {
      child.terminal = p.terminal->tree()->LockPrefix(
          p.terminal, child.prefix_len, worker.bit);
    }
    Lease* added = leases_.Add(std::move(child));
    fork_links_.Link(parent_id, added->id, request.num_tokens);
    worker.lease_ids.insert(added->id);
    worker.lease_page_refs += shared_pages;
    result.children.push_back(ForkedLease{
        added->id, TableSlots(*added, page_size, 0, added->length)});
  }
  return result;
}

absl::StatusOr<CommitResult> CacheStateImpl::Commit(
    const CommitRequest& request, int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* lease = *found;
  WorkerEntry& worker = workers_.at(lease->worker_id);
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  if (n < static_cast<int64_t>(lease->prompt.size()) || n > lease->length) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit of ", n, " tokens on lease ", lease->id,
                     ": must be in [", lease->prompt.size(), " (prompt), ",
                     lease->length, " (lease length)]"));
  }
  if (absl::Status s = CheckCommitAgrees(*lease, request.tokens); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateTokens(request.tokens, worker.info.vocab_size);
      !s.ok()) {
    return s;
  }
  const int bit = worker.bit;
  const int32_t page_size = worker.info.page_size;
  PageAllocator& allocator = *worker.allocator;
  RadixTree* tree = GetOrCreateTree(lease->model, lease->cache_salt);
  std::vector<int32_t> slots(n);
  for (int64_t k = 0; k * page_size < n; ++k) {
    const int32_t base = lease->pages[k] * page_size;
    const int64_t end = std::min<int64_t>(n, (k + 1) * page_size);
    for (int64_t p = k * page_size; p < end; ++p) {
      slots[p] = base + static_cast<int32_t>(p - k * page_size);
    }
  }
  const InsertResult inserted =
      tree->Insert(request.tokens, slots, bit, now_ms, lease->priority);
  ShareCommittedTokens(lease->id, request.tokens);
  CommitResult result;
  result.inserted_tokens = inserted.inserted_tokens;
  int64_t freed_pages = 0;
  if (!request.keep_lease) {
    freed_pages = EndLease(lease);
  } else {
    // Lock exactly the committed positions [0, n): Insert's terminal may
    // be an edge that extends past n (tokens already resident inside it).
    RadixNode* locked = tree->LockPrefix(inserted.terminal, n, bit);
    if (lease->terminal != nullptr) {
      lease->terminal->tree()->UnlockPath(lease->terminal, bit);
    }
    lease->terminal = locked;
    // Remap fully duplicated pages to the tree's pages and free the lease's
    // copies (positions [0, resident_before) were already cached).
    const int64_t dup_pages = inserted.resident_before / page_size;
    if (dup_pages > 0) {
      const PathMatch path = tree->MatchWorker(request.tokens, bit);
      const std::vector<int32_t> tree_slots =
          RadixTree::PathSlots(path, bit, dup_pages * page_size);
      for (int64_t k = 0; k < dup_pages; ++k) {
        const int32_t page = tree_slots[(k + 1) * page_size - 1] / page_size;
        if (page == lease->pages[k]) continue;
        allocator.Ref(page, /*protect=*/true);
        if (allocator.Unref(lease->pages[k], /*protect=*/true)) ++freed_pages;
        lease->pages[k] = page;
      }
    }
    // Known tokens past the commit stay known.
    std::vector<int32_t> still_known;
    for (int64_t p = n; p < lease->known_length(); ++p) {
      still_known.push_back(lease->known_token(p));
    }
    lease->prompt = request.tokens;
    lease->shared_tokens = std::move(still_known);
    lease->prefix_len = n;
    leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
    result.kv_indices = TableSlots(*lease, page_size, 0, lease->length);
  }
  result.freed_slots = freed_pages * page_size;
  return result;
}

absl::StatusOr<ReleaseResult> CacheStateImpl::Release(uint64_t lease_id,
                                                      int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(lease_id, now_ms);
  if (!found.ok()) return found.status();
  const int32_t page_size = workers_.at((*found)->worker_id).info.page_size;
  ReleaseResult result;
  result.freed_slots = EndLease(*found) * page_size;
  return result;
}

absl::StatusOr<EvictResult> CacheStateImpl::Evict(std::string_view worker_id,
                                                  int64_t num_tokens) {
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return UnknownWorker(worker_id);
  }
  if (num_tokens < 1 || num_tokens > worker->info.capacity_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", num_tokens, " outside [1, ",
                     worker->info.capacity_slots, "]"));
  }
  EvictResult result;
  while (result.evicted_tokens < num_tokens &&
         EvictOne(*worker, &result.evicted_tokens)) {
  }
  return result;
}

absl::StatusOr<FlushResult> CacheStateImpl::Flush(std::string_view worker_id) {
  FlushResult result;
  if (worker_id.empty()) {
    for (auto& [id, worker] : workers_) {
      while (EvictOne(worker, &result.evicted_tokens)) {
      }
    }
    return result;
  }
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return UnknownWorker(worker_id);
  }
  while (EvictOne(*worker, &result.evicted_tokens)) {
  }
  return result;
}

ExpireResult CacheStateImpl::ExpireLeases(int64_t now_ms) {
  ExpireResult result;
  for (uint64_t id : leases_.ExpiredAt(now_ms)) {
    Lease* lease = leases_.Find(id);
    WorkerEntry& worker = workers_.at(lease->worker_id);
    result.expired.push_back(ExpiredLease{id, lease->worker_id});
    ++worker.expired_leases;
    ++expired_leases_total_;
    EndLease(lease);
  }
  return result;
}

}  // namespace radixkv::cache_service
