// FakeKvCacheClient: an in-memory stand-in for the cache service, for
// scheduler tests. It keeps a page allocator with reference counts, a flat
// list of committed sequences (matched page-aligned, no radix tree), leases,
// LRU eviction of committed sequences, and failure injection. Semantics
// follow cache_service.proto closely enough for the scheduler: kv_indices of
// a lease put position p at slot page * page_size + p % page_size.
#ifndef RADIXKV_WORKER_TESTING_FAKE_KV_CACHE_CLIENT_H_
#define RADIXKV_WORKER_TESTING_FAKE_KV_CACHE_CLIENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/cache_client.h"

namespace radixkv::worker::testing {

class FakeKvCacheClient : public KvCacheClient {
 public:
  // `capacity_slots` must be a multiple of `page_size`.
  FakeKvCacheClient(int64_t capacity_slots, int32_t page_size);

  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override;
  absl::StatusOr<v1::DeregisterResponse> Deregister(
      const v1::DeregisterRequest& request) override;
  absl::StatusOr<v1::AcquireResponse> Acquire(
      const v1::AcquireRequest& request) override;
  absl::StatusOr<v1::GrowResponse> Grow(
      const v1::GrowRequest& request) override;
  // Children share the parent's pages of positions [0, num_tokens) (ref
  // counts + 1); a child's (or the parent's) next Grow copies a shared
  // partial last page to a fresh one, as the real service does.
  absl::StatusOr<v1::ForkResponse> Fork(
      const v1::ForkRequest& request) override;
  absl::StatusOr<v1::CommitResponse> Commit(
      const v1::CommitRequest& request) override;
  absl::StatusOr<v1::ReleaseResponse> Release(
      const v1::ReleaseRequest& request) override;

  // Every RPC returns UNAVAILABLE while set.
  void SetUnavailable(bool unavailable);
  // The next `n` calls of `rpc` ("Acquire" or "Grow") answer
  // RESOURCE_EXHAUSTED without changing anything, like a pool whose memory
  // is held elsewhere for a while.
  void ExhaustNext(const std::string& rpc, int n) {
    absl::MutexLock lock(&mu_);
    exhaust_[rpc] = n;
  }
  // The next call of `rpc` answers `status` without changing anything (e.g.
  // NOT_FOUND "unknown worker" for an Acquire, as from a service that
  // dropped the worker, while heartbeats still succeed).
  void FailNext(const std::string& rpc, absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_next_[rpc] = std::move(status);
  }
  // The next Grow of a lease whose length ends inside a page moves that
  // partial page (copy-on-write): it returns a copy op to a fresh page and
  // the remapped slots of the moved positions, like the real service does
  // for a shared last page.
  void CopyOnWriteOnNextGrow() {
    absl::MutexLock lock(&mu_);
    cow_next_grow_ = true;
  }
  // Forgets the worker and all its leases and cached sequences, like a
  // cache service restarted without its journal: the next Heartbeat answers
  // NOT_FOUND.
  void ForgetWorker();
  // Leases reported lost by the next heartbeat.
  void LoseLeaseOnNextHeartbeat(uint64_t lease_id);

  int64_t free_pages() const;
  // References to `page` (leases and committed sequences).
  int32_t page_refs(int64_t page) const;
  // Pages referenced by leases or committed sequences, at most ever
  // (peak of num_pages - free pages).
  int64_t peak_used_pages() const;
  int64_t num_pages() const { return num_pages_; }
  int32_t active_leases() const;
  bool registered() const;
  int64_t epoch() const;
  // Calls per RPC name ("Acquire", "Grow", ...), successful or not.
  int64_t calls(const std::string& rpc) const;
  // Token lists of every successful Commit that ended its lease, in order.
  std::vector<std::vector<int32_t>> commits() const;
  // Token lists of every successful Commit with keep_lease, in order.
  std::vector<std::vector<int32_t>> keep_lease_commits() const;
  // Drops every committed sequence (like CacheService.Flush).
  void Flush();

 private:
  struct Lease {
    std::vector<int32_t> prompt;
    std::vector<int64_t> kv_indices;
    // Every page the lease references (shared prefix pages and its own).
    std::vector<int64_t> pages;
    int64_t prefix_len = 0;
    // Shares pages through Fork: its next Grow copies a shared partial page.
    bool forked = false;
  };
  struct Entry {
    std::vector<int32_t> tokens;
    std::vector<int64_t> kv_indices;
    std::vector<int64_t> pages;
    uint64_t last_use = 0;
  };

  absl::Status Check(const char* rpc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `n` free pages, evicting committed entries (LRU) if needed.
  bool AllocatePages(int64_t n, std::vector<int64_t>* pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unref(const std::vector<int64_t>& pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends slots for positions [from, to) of a lease, allocating pages.
  bool Extend(Lease& lease, int64_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t num_pages_;
  const int32_t page_size_;
  mutable absl::Mutex mu_;
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int32_t> page_refs_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> free_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int32_t>> commits_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int32_t>> keep_lease_commits_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> lose_ ABSL_GUARDED_BY(mu_);
  bool cow_next_grow_ ABSL_GUARDED_BY(mu_) = false;
  int64_t peak_used_pages_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> exhaust_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> fail_next_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_TESTING_FAKE_KV_CACHE_CLIENT_H_
