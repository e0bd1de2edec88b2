#include "worker/testing/fake_kv_cache_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace radixkv::worker::testing {
namespace {

std::vector<int64_t> PagesOf(const std::vector<int64_t>& slots,
                             int32_t page_size) {
  std::vector<int64_t> pages;
  for (int64_t slot : slots) {
    int64_t page = slot / page_size;
    if (std::find(pages.begin(), pages.end(), page) == pages.end()) {
      pages.push_back(page);
    }
  }
  return pages;
}

}  // namespace

FakeKvCacheClient::FakeKvCacheClient(int64_t capacity_slots, int32_t page_size)
    : num_pages_(capacity_slots / page_size), page_size_(page_size) {
  absl::MutexLock lock(&mu_);
  page_refs_.assign(num_pages_, 0);
  for (int64_t p = num_pages_ - 1; p >= 0; --p) free_.push_back(p);
}

absl::Status FakeKvCacheClient::Check(const char* rpc) {
  ++calls_[rpc];
  if (unavailable_) {
    return absl::UnavailableError(absl::StrCat(rpc, ": connection refused"));
  }
  if (auto failing = fail_next_.find(rpc); failing != fail_next_.end()) {
    absl::Status status = std::move(failing->second);
    fail_next_.erase(failing);
    return status;
  }
  auto exhausted = exhaust_.find(rpc);
  if (exhausted != exhaust_.end() && exhausted->second > 0) {
    --exhausted->second;
    return absl::ResourceExhaustedError(
        absl::StrCat(rpc, ": no free pages (injected)"));
  }
  return absl::OkStatus();
}

bool FakeKvCacheClient::AllocatePages(int64_t n, std::vector<int64_t>* pages) {
  while (static_cast<int64_t>(free_.size()) < n && !entries_.empty()) {
    auto lru = std::min_element(
        entries_.begin(), entries_.end(),
        [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    Unref(lru->pages);
    entries_.erase(lru);
  }
  if (static_cast<int64_t>(free_.size()) < n) return false;
  for (int64_t i = 0; i < n; ++i) {
    int64_t page = free_.back();
    free_.pop_back();
    page_refs_[page] = 1;
    pages->push_back(page);
  }
  peak_used_pages_ = std::max<int64_t>(
      peak_used_pages_, num_pages_ - static_cast<int64_t>(free_.size()));
  return true;
}

void FakeKvCacheClient::Unref(const std::vector<int64_t>& pages) {
  for (int64_t page : pages) {
    if (--page_refs_[page] == 0) free_.push_back(page);
  }
}

bool FakeKvCacheClient::Extend(Lease& lease, int64_t to) {
  const int64_t from = static_cast<int64_t>(lease.kv_indices.size());
  int64_t new_pages = 0;
  for (int64_t p = from; p < to; ++p) new_pages += (p % page_size_ == 0);
  std::vector<int64_t> pages;
  if (!AllocatePages(new_pages, &pages)) return false;
  size_t next = 0;
  for (int64_t p = from; p < to; ++p) {
    if (p % page_size_ == 0) {
      lease.pages.push_back(pages[next]);
      lease.kv_indices.push_back(pages[next++] * page_size_);
    } else {
      lease.kv_indices.push_back(
          (lease.kv_indices.back() / page_size_) * page_size_ + p % page_size_);
    }
  }
  return true;
}

absl::StatusOr<v1::RegisterResponse> FakeKvCacheClient::Register(
    const v1::RegisterRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Register"); !s.ok()) return s;
  if (request.capacity_slots() != num_pages_ * page_size_ ||
      request.page_size() != page_size_) {
    return absl::InvalidArgumentError("shape mismatch");
  }
  registered_ = true;
  epoch_ = request.epoch();
  v1::RegisterResponse response;
  response.set_epoch(epoch_);
  response.set_lease_ttl_ms(30000);
  response.set_heartbeat_timeout_ms(9000);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> FakeKvCacheClient::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration /*timeout*/) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Heartbeat"); !s.ok()) return s;
  if (!registered_) return absl::NotFoundError("unknown worker");
  if (request.epoch() != epoch_) return absl::FailedPreconditionError("epoch");
  v1::HeartbeatResponse response;
  for (uint64_t id : lose_) {
    auto it = leases_.find(id);
    if (it != leases_.end()) {
      Unref(it->second.pages);
      leases_.erase(it);
    }
    response.add_lost_lease_ids(id);
  }
  lose_.clear();
  return response;
}

absl::StatusOr<v1::DeregisterResponse> FakeKvCacheClient::Deregister(
    const v1::DeregisterRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Deregister"); !s.ok()) return s;
  if (!registered_) return absl::NotFoundError("unknown worker");
  v1::DeregisterResponse response;
  response.set_released_leases(static_cast<int32_t>(leases_.size()));
  for (auto& [id, lease] : leases_) Unref(lease.pages);
  leases_.clear();
  registered_ = false;
  return response;
}

absl::StatusOr<v1::AcquireResponse> FakeKvCacheClient::Acquire(
    const v1::AcquireRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Acquire"); !s.ok()) return s;
  if (!registered_) return absl::NotFoundError("unknown worker");
  if (request.epoch() != epoch_) return absl::FailedPreconditionError("epoch");
  const std::vector<int32_t> tokens(request.tokens().begin(),
                                    request.tokens().end());
  if (tokens.empty()) return absl::InvalidArgumentError("empty tokens");
  // Longest page-aligned match, leaving one token to compute.
  Entry* best = nullptr;
  int64_t best_len = 0;
  if (!request.disable_match()) {
    for (Entry& entry : entries_) {
      int64_t n = 0;
      while (n < static_cast<int64_t>(entry.tokens.size()) &&
             n < static_cast<int64_t>(tokens.size()) &&
             entry.tokens[n] == tokens[n]) {
        ++n;
      }
      n = std::min<int64_t>(n, static_cast<int64_t>(tokens.size()) - 1);
      n -= n % page_size_;
      if (n > best_len) {
        best = &entry;
        best_len = n;
      }
    }
  }
  Lease lease;
  lease.prompt = tokens;
  lease.prefix_len = best_len;
  if (best != nullptr) {
    best->last_use = ++clock_;
    lease.kv_indices.assign(best->kv_indices.begin(),
                            best->kv_indices.begin() + best_len);
    lease.pages = PagesOf(lease.kv_indices, page_size_);
    for (int64_t page : lease.pages) ++page_refs_[page];
  }
  if (!Extend(lease,
              static_cast<int64_t>(tokens.size()) + request.reserve_tokens())) {
    Unref(lease.pages);
    return absl::ResourceExhaustedError("no free pages");
  }
  const uint64_t id = next_lease_++;
  v1::AcquireResponse response;
  response.set_lease_id(id);
  response.set_prefix_len(best_len);
  response.mutable_kv_indices()->Assign(lease.kv_indices.begin(),
                                        lease.kv_indices.end());
  response.set_lease_ttl_ms(30000);
  response.set_page_aligned_prefix_len(best_len);
  leases_[id] = std::move(lease);
  return response;
}

absl::StatusOr<v1::GrowResponse> FakeKvCacheClient::Grow(
    const v1::GrowRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Grow"); !s.ok()) return s;
  auto it = leases_.find(request.lease_id());
  if (it == leases_.end()) return absl::NotFoundError("unknown lease");
  if (request.num_tokens() < 1 || request.num_tokens() > 65536) {
    return absl::InvalidArgumentError("num_tokens");
  }
  Lease& lease = it->second;
  const int64_t from = static_cast<int64_t>(lease.kv_indices.size());
  v1::GrowResponse response;
  response.set_first_remapped_position(-1);
  const bool shared_partial_page =
      from % page_size_ != 0 && lease.forked &&
      page_refs_[lease.kv_indices[from - 1] / page_size_] > 1;
  if ((cow_next_grow_ || shared_partial_page) && from % page_size_ != 0) {
    if (!shared_partial_page) cow_next_grow_ = false;
    std::vector<int64_t> fresh;
    if (!AllocatePages(1, &fresh)) {
      return absl::ResourceExhaustedError("no free pages");
    }
    const int64_t first = from - from % page_size_;
    const int64_t old_page = lease.kv_indices[first] / page_size_;
    v1::CopyOp* op = response.add_copy_ops();
    op->set_src_page(old_page);
    op->set_dst_page(fresh[0]);
    op->set_num_tokens(static_cast<int32_t>(from - first));
    response.set_first_remapped_position(first);
    for (int64_t p = first; p < from; ++p) {
      lease.kv_indices[p] = fresh[0] * page_size_ + p % page_size_;
      response.add_remapped_kv_indices(lease.kv_indices[p]);
    }
    std::replace(lease.pages.begin(), lease.pages.end(), old_page, fresh[0]);
    Unref({old_page});
  }
  int64_t to = from + request.num_tokens();
  to = (to + page_size_ - 1) / page_size_ * page_size_;
  if (!Extend(lease, to)) return absl::ResourceExhaustedError("no free pages");
  response.mutable_kv_indices()->Assign(lease.kv_indices.begin() + from,
                                        lease.kv_indices.end());
  return response;
}

absl::StatusOr<v1::ForkResponse> FakeKvCacheClient::Fork(
    const v1::ForkRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Fork"); !s.ok()) return s;
  auto it = leases_.find(request.lease_id());
  if (it == leases_.end()) return absl::NotFoundError("unknown lease");
  Lease& parent = it->second;
  if (request.num_children() < 1 || request.num_children() > 64 ||
      request.num_tokens() < 1 ||
      request.num_tokens() > static_cast<int64_t>(parent.kv_indices.size())) {
    return absl::InvalidArgumentError("num_children or num_tokens");
  }
  parent.forked = true;
  const int64_t n = request.num_tokens();
  v1::ForkResponse response;
  for (int32_t c = 0; c < request.num_children(); ++c) {
    Lease child;
    child.prompt.assign(
        parent.prompt.begin(),
        parent.prompt.begin() + std::min<int64_t>(n, parent.prompt.size()));
    child.kv_indices.assign(parent.kv_indices.begin(),
                            parent.kv_indices.begin() + n);
    child.pages = PagesOf(child.kv_indices, page_size_);
    for (int64_t page : child.pages) ++page_refs_[page];
    child.prefix_len = std::min(parent.prefix_len, n);
    child.forked = true;
    const uint64_t id = next_lease_++;
    v1::ForkResponse::Child* out = response.add_children();
    out->set_lease_id(id);
    out->mutable_kv_indices()->Assign(child.kv_indices.begin(),
                                      child.kv_indices.end());
    leases_[id] = std::move(child);
  }
  return response;
}

absl::StatusOr<v1::CommitResponse> FakeKvCacheClient::Commit(
    const v1::CommitRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Commit"); !s.ok()) return s;
  auto it = leases_.find(request.lease_id());
  if (it == leases_.end()) return absl::NotFoundError("unknown lease");
  Lease& lease = it->second;
  const std::vector<int32_t> tokens(request.tokens().begin(),
                                    request.tokens().end());
  if (tokens.size() < lease.prompt.size() ||
      tokens.size() > lease.kv_indices.size() ||
      !std::equal(lease.prompt.begin(), lease.prompt.end(), tokens.begin())) {
    return absl::InvalidArgumentError(
        "tokens do not extend the prompt or exceed the lease");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  v1::CommitResponse response;
  if (request.keep_lease()) {
    // Like the real service: full pages whose tokens a committed entry
    // already holds are remapped to that entry's pages and the lease's
    // copies freed.
    int64_t dup = 0;
    const Entry* holder = nullptr;
    for (const Entry& e : entries_) {
      int64_t m = 0;
      while (m < n && m < static_cast<int64_t>(e.tokens.size()) &&
             e.tokens[m] == tokens[m]) {
        ++m;
      }
      m -= m % page_size_;
      if (m > dup) {
        dup = m;
        holder = &e;
      }
    }
    for (int64_t p = 0; p < dup; p += page_size_) {
      const int64_t old_page = lease.kv_indices[p] / page_size_;
      const int64_t new_page = holder->kv_indices[p] / page_size_;
      if (old_page == new_page) continue;
      ++page_refs_[new_page];
      std::replace(lease.pages.begin(), lease.pages.end(), old_page, new_page);
      Unref({old_page});
      for (int64_t q = p; q < p + page_size_; ++q) {
        lease.kv_indices[q] = new_page * page_size_ + q % page_size_;
      }
      response.set_freed_slots(response.freed_slots() + page_size_);
    }
  }
  Entry entry;
  entry.tokens = tokens;
  entry.kv_indices.assign(lease.kv_indices.begin(),
                          lease.kv_indices.begin() + n);
  entry.pages = PagesOf(entry.kv_indices, page_size_);
  entry.last_use = ++clock_;
  for (int64_t page : entry.pages) ++page_refs_[page];
  response.set_inserted_tokens(n - lease.prefix_len);
  if (request.keep_lease()) {
    lease.prompt = tokens;
    lease.prefix_len = n;
    response.mutable_kv_indices()->Assign(lease.kv_indices.begin(),
                                          lease.kv_indices.end());
    keep_lease_commits_.push_back(tokens);
  } else {
    Unref(lease.pages);
    leases_.erase(it);
    commits_.push_back(tokens);
  }
  entries_.push_back(std::move(entry));
  return response;
}

absl::StatusOr<v1::ReleaseResponse> FakeKvCacheClient::Release(
    const v1::ReleaseRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Check("Release"); !s.ok()) return s;
  auto it = leases_.find(request.lease_id());
  if (it == leases_.end()) return absl::NotFoundError("unknown lease");
  Unref(it->second.pages);
  leases_.erase(it);
  return v1::ReleaseResponse();
}

void FakeKvCacheClient::SetUnavailable(bool unavailable) {
  absl::MutexLock lock(&mu_);
  unavailable_ = unavailable;
}

void FakeKvCacheClient::ForgetWorker() {
  absl::MutexLock lock(&mu_);
  registered_ = false;
  for (auto& [id, lease] : leases_) Unref(lease.pages);
  leases_.clear();
  for (Entry& entry : entries_) Unref(entry.pages);
  entries_.clear();
}

void FakeKvCacheClient::LoseLeaseOnNextHeartbeat(uint64_t lease_id) {
  absl::MutexLock lock(&mu_);
  lose_.push_back(lease_id);
}

int64_t FakeKvCacheClient::free_pages() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size());
}

int32_t FakeKvCacheClient::page_refs(int64_t page) const {
  absl::MutexLock lock(&mu_);
  return page_refs_[page];
}

int64_t FakeKvCacheClient::peak_used_pages() const {
  absl::MutexLock lock(&mu_);
  return peak_used_pages_;
}

int32_t FakeKvCacheClient::active_leases() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(leases_.size());
}

bool FakeKvCacheClient::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

int64_t FakeKvCacheClient::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

int64_t FakeKvCacheClient::calls(const std::string& rpc) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(rpc);
  return it == calls_.end() ? 0 : it->second;
}

std::vector<std::vector<int32_t>> FakeKvCacheClient::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

std::vector<std::vector<int32_t>> FakeKvCacheClient::keep_lease_commits()
    const {
  absl::MutexLock lock(&mu_);
  return keep_lease_commits_;
}

void FakeKvCacheClient::Flush() {
  absl::MutexLock lock(&mu_);
  for (Entry& entry : entries_) Unref(entry.pages);
  entries_.clear();
}

}  // namespace radixkv::worker::testing
