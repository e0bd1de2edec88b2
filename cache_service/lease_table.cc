#include "cache_service/lease_table.h"

#include <algorithm>

namespace radixkv::cache_service {

Lease* LeaseTable::Add(Lease lease) {
  lease.id = next_id_++;
  expiry_.insert({lease.expires_at_ms, lease.id});
  auto [it, inserted] = leases_.emplace(lease.id, std::move(lease));
  return &it->second;
}

Lease* LeaseTable::AddWithId(Lease lease) {
  if (lease.id == 0 || leases_.contains(lease.id)) return nullptr;
  next_id_ = std::max(next_id_, lease.id + 1);
  expiry_.insert({lease.expires_at_ms, lease.id});
  auto [it, inserted] = leases_.emplace(lease.id, std::move(lease));
  return &it->second;
}

Lease* LeaseTable::Find(uint64_t id) {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

const Lease* LeaseTable::Find(uint64_t id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

void LeaseTable::Erase(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  expiry_.erase({it->second.expires_at_ms, id});
  leases_.erase(it);
}

void LeaseTable::Renew(Lease* lease, int64_t expires_at_ms) {
  expiry_.erase({lease->expires_at_ms, lease->id});
  lease->expires_at_ms = expires_at_ms;
  expiry_.insert({expires_at_ms, lease->id});
}

std::vector<uint64_t> LeaseTable::ExpiredAt(int64_t now_ms) const {
  std::vector<uint64_t> ids;
  for (const auto& [expires_at_ms, id] : expiry_) {
    if (expires_at_ms > now_ms) break;
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace radixkv::cache_service
