// LeaseTable: the holders of lock_ref (SGLang's inc_lock_ref/dec_lock_ref,
// background.md §2.3): one lease per admitted request (and per forked child),
// with its page table (block_table, background.md §1.3), the tree path it
// locks, and a TTL so that a lease whose holder vanished is released by
// ExpireLeases().
//
// Lease ids come from a counter that is part of the journaled state (ids are
// never reused), so replaying the same calls reproduces the same ids. Leases
// are kept in id order (std::map: stable addresses, deterministic
// iteration); expiry is indexed by (expires_at_ms, id).
#ifndef RADIXKV_CACHE_SERVICE_LEASE_TABLE_H_
#define RADIXKV_CACHE_SERVICE_LEASE_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "cache_service/radix_tree.h"

namespace radixkv::cache_service {

struct Lease {
  uint64_t id = 0;
  std::string worker_id;
  std::string model;
  std::string cache_salt;
  std::string request_id;
  // The locked path ends at terminal (null = root, nothing locked). The node
  // stays valid while locked: splits keep the object as the lower half.
  RadixNode* terminal = nullptr;
  // Tokens the lease's KV holds for sure; Commit must extend them.
  std::vector<int32_t> prompt;
  // Tokens of positions [prompt.size(), prompt.size() + shared_tokens.size())
  // fixed by the Commit of a lease that shares those positions' KV through
  // Fork (fork_links.h); a Commit of this lease must agree with them where
  // it covers them.
  std::vector<int32_t> shared_tokens;
  int32_t priority = 0;
  // Leading prompt tokens resident on the locked path: prefix_len of
  // Acquire (capped by Fork), all committed tokens after a keep_lease Commit.
  int64_t prefix_len = 0;
  // Page table (block_table row): logical page i -> physical page; slot of
  // position p = pages[p / page_size] * page_size + p % page_size.
  std::vector<int32_t> pages;
  int64_t length = 0;  // positions with a slot, tokens
  int64_t expires_at_ms = 0;

  // Positions whose token is known: prompt then shared_tokens, tokens.
  int64_t known_length() const {
    return static_cast<int64_t>(prompt.size() + shared_tokens.size());
  }
  // The known token of position p, p in [0, known_length()).
  int32_t known_token(int64_t p) const {
    const int64_t n = static_cast<int64_t>(prompt.size());
    return p < n ? prompt[p] : shared_tokens[p - n];
  }
};

class LeaseTable {
 public:
  // Adds a lease with the next id (lease.id is overwritten); returns it.
  Lease* Add(Lease lease);
  // Adds a lease with its own id (snapshot restore); next_id is raised past
  // it. Returns null when the id exists.
  Lease* AddWithId(Lease lease);
  // The lease or null (expired-but-not-yet-collected leases are returned).
  Lease* Find(uint64_t id);
  const Lease* Find(uint64_t id) const;
  void Erase(uint64_t id);
  // Sets a new expiry.
  void Renew(Lease* lease, int64_t expires_at_ms);
  // Ids of leases with expires_at_ms <= now_ms, ascending.
  std::vector<uint64_t> ExpiredAt(int64_t now_ms) const;

  uint64_t next_id() const { return next_id_; }
  void set_next_id(uint64_t next_id) { next_id_ = next_id; }
  size_t size() const { return leases_.size(); }
  const std::map<uint64_t, Lease>& leases() const { return leases_; }

 private:
  uint64_t next_id_ = 1;
  std::map<uint64_t, Lease> leases_;
  absl::btree_set<std::pair<int64_t, uint64_t>> expiry_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_LEASE_TABLE_H_
