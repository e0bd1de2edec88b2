#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"
#include "cache_service/token_range.h"

namespace radixkv::cache_service {

absl::Status EpochMismatch(std::string_view worker_id, int64_t epoch,
                           int64_t registered) {
  if (epoch > registered) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", std::string(worker_id), ": epoch ", epoch,
        " is newer than the registered epoch ", registered, "; re-register"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("worker ", std::string(worker_id), ": stale epoch ", epoch,
                   " (registered ", registered, ")"));
}

absl::Status UnknownWorker(std::string_view worker_id) {
  return absl::NotFoundError(
      absl::StrCat("unknown worker ", std::string(worker_id)));
}

uint64_t ForestRoot(absl::flat_hash_map<uint64_t, uint64_t>& parent,
                    uint64_t x) {
  while (true) {
    auto it = parent.find(x);
    if (it == parent.end() || it->second == x) return x;
    x = it->second;
  }
}

// ---- helpers ----

absl::StatusOr<WorkerEntry*> CacheStateImpl::WorkerAtEpoch(
    std::string_view worker_id, int64_t epoch) {
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) return UnknownWorker(worker_id);
  if (epoch != worker->info.epoch) {
    return EpochMismatch(worker_id, epoch, worker->info.epoch);
  }
  return worker;
}

RadixTree* CacheStateImpl::FindTree(const std::string& model,
                                    const std::string& salt) const {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  auto t = m->second.trees.find(salt);
  return t == m->second.trees.end() ? nullptr : t->second.get();
}

RadixTree* CacheStateImpl::GetOrCreateTree(const std::string& model,
                                           const std::string& salt) {
  ModelEntry& entry = models_.at(model);
  auto& slot = entry.trees[salt];
  if (slot == nullptr) {
    slot = std::make_unique<RadixTree>(model, salt, options_.eviction_policy,
                                       entry.contexts.get(), &next_node_id_);
  }
  return slot.get();
}

void CacheStateImpl::MaybeDropTree(RadixTree* tree) {
  if (!tree->empty()) return;
  auto m = models_.find(tree->model());
  if (m == models_.end()) return;
  m->second.trees.erase(tree->cache_salt());
}

absl::StatusOr<Lease*> CacheStateImpl::LiveLease(uint64_t lease_id,
                                                 int64_t now_ms) {
  Lease* lease = leases_.Find(lease_id);
  if (lease == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "lease ", lease_id, " not found (unknown, committed or released)"));
  }
  if (lease->expires_at_ms <= now_ms) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " expired at ",
                                            lease->expires_at_ms, " ms"));
  }
  return lease;
}

absl::Status CacheStateImpl::ValidateTokens(const std::vector<int32_t>& tokens,
                                            int32_t vocab_size) const {
  if (tokens.empty()) return absl::InvalidArgumentError("tokens is empty");
  if (static_cast<int64_t>(tokens.size()) > kMaxPromptTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokens.size(), " tokens exceed the limit of ", kMaxPromptTokens));
  }
  // SIMD scan first (Match of long prompts is hot), then locate the
  // offending position only on error.
  const uint32_t limit =
      vocab_size > 0 ? static_cast<uint32_t>(vocab_size) : uint32_t{1} << 31;
  if (!AnyTokenAtOrAbove(tokens, limit)) return absl::OkStatus();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || (vocab_size > 0 && tokens[i] >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", tokens[i], " at position ", i, " is outside [0, ",
          vocab_size > 0 ? vocab_size : 0, vocab_size > 0 ? ")" : "inf)"));
    }
  }
  return absl::OkStatus();
}

int32_t CacheStateImpl::ModelVocab(const std::string& model) const {
  int32_t vocab = 0;
  for (const auto& [id, worker] : workers_) {
    if (worker.info.model == model && worker.info.vocab_size > 0) {
      vocab = vocab == 0 ? worker.info.vocab_size
                         : std::min(vocab, worker.info.vocab_size);
    }
  }
  return vocab;
}

bool CacheStateImpl::EvictOne(WorkerEntry& worker, int64_t* evicted_tokens) {
  if (worker.queue->empty()) return false;
  RadixNode* node = worker.queue->Front().second;
  RadixTree* tree = node->tree();
  const EvictOutcome outcome = tree->EvictLeaf(node, worker.bit);
  *evicted_tokens += outcome.evicted_tokens;
  worker.evicted_tokens += outcome.evicted_tokens;
  MaybeDropTree(tree);
  return true;
}

int64_t CacheStateImpl::EvictUntilFree(WorkerEntry& worker, int64_t pages) {
  int64_t evicted = 0;
  while (worker.allocator->num_free_pages() < pages) {
    if (!EvictOne(worker, &evicted)) break;
  }
  return evicted;
}

int64_t CacheStateImpl::EndLease(Lease* lease) {
  WorkerEntry& worker = workers_.at(lease->worker_id);
  if (lease->terminal != nullptr) {
    lease->terminal->tree()->UnlockPath(lease->terminal, worker.bit);
  }
  int64_t freed = 0;
  for (int32_t page : lease->pages) {
    if (worker.allocator->Unref(page, /*protect=*/true)) ++freed;
  }
  worker.lease_ids.erase(lease->id);
  worker.lease_page_refs -= static_cast<int64_t>(lease->pages.size());
  fork_links_.Remove(lease->id);
  leases_.Erase(lease->id);
  return freed;
}

std::vector<int64_t> CacheStateImpl::TableSlots(const Lease& lease,
                                                int32_t page_size, int64_t from,
                                                int64_t to) const {
  std::vector<int64_t> slots(std::max<int64_t>(0, to - from));
  int64_t p = from;
  while (p < to) {
    // One page at a time: no division per position.
    const int64_t page_end = std::min(to, (p / page_size + 1) * page_size);
    const int64_t base =
        static_cast<int64_t>(lease.pages[p / page_size]) * page_size -
        (p / page_size) * page_size;
    for (; p < page_end; ++p) slots[p - from] = base + p;
  }
  return slots;
}

CacheState::CacheState(CacheOptions options)
    : impl_(std::make_unique<CacheStateImpl>(options)) {}
CacheState::~CacheState() = default;
CacheState::CacheState(CacheState&&) noexcept = default;
CacheState& CacheState::operator=(CacheState&&) noexcept = default;

const CacheOptions& CacheState::options() const { return impl_->options(); }

absl::StatusOr<RegisterWorkerResult> CacheState::RegisterWorker(
    const RegisterWorkerRequest& request, int64_t now_ms) {
  return impl_->RegisterWorker(request, now_ms);
}
absl::Status CacheState::CheckVocabAgreesWithLiveWorkers(
    const RegisterWorkerRequest& request, int64_t now_ms) const {
  return impl_->CheckVocabAgreesWithLiveWorkers(request, now_ms);
}
absl::Status CacheState::CheckRegisterWithinBounds(
    const RegisterWorkerRequest& request) const {
  return impl_->CheckRegisterWithinBounds(request);
}
absl::Status CacheState::CheckCommitWithinBounds(const CommitRequest& request,
                                                 int64_t now_ms) const {
  return impl_->CheckCommitWithinBounds(request, now_ms);
}
absl::StatusOr<HeartbeatResult> CacheState::Heartbeat(
    const HeartbeatRequest& request, int64_t now_ms) {
  return impl_->Heartbeat(request, now_ms);
}
absl::StatusOr<DeregisterResult> CacheState::DeregisterWorker(
    std::string_view worker_id, int64_t epoch, int64_t /*now_ms*/) {
  return impl_->DeregisterWorker(worker_id, epoch);
}
absl::StatusOr<MatchResult> CacheState::Match(const MatchRequest& request,
                                              int64_t now_ms) const {
  return impl_->Match(request, now_ms);
}
absl::StatusOr<AcquireResult> CacheState::Acquire(const AcquireRequest& request,
                                                  int64_t now_ms) {
  return impl_->Acquire(request, now_ms);
}
absl::StatusOr<GrowResult> CacheState::Grow(const GrowRequest& request,
                                            int64_t now_ms) {
  return impl_->Grow(request, now_ms);
}
absl::StatusOr<ForkResult> CacheState::Fork(const ForkRequest& request,
                                            int64_t now_ms) {
  return impl_->Fork(request, now_ms);
}
absl::StatusOr<CommitResult> CacheState::Commit(const CommitRequest& request,
                                                int64_t now_ms) {
  return impl_->Commit(request, now_ms);
}
absl::StatusOr<ReleaseResult> CacheState::Release(uint64_t lease_id,
                                                  int64_t now_ms) {
  return impl_->Release(lease_id, now_ms);
}
absl::StatusOr<EvictResult> CacheState::Evict(std::string_view worker_id,
                                              int64_t num_tokens,
                                              int64_t /*now_ms*/) {
  return impl_->Evict(worker_id, num_tokens);
}
absl::StatusOr<FlushResult> CacheState::Flush(std::string_view worker_id,
                                              int64_t /*now_ms*/) {
  return impl_->Flush(worker_id);
}
absl::StatusOr<StatsResult> CacheState::Stats(std::string_view worker_id,
                                              int64_t now_ms) const {
  return impl_->Stats(worker_id, now_ms);
}
ExpireResult CacheState::ExpireLeases(int64_t now_ms) {
  return impl_->ExpireLeases(now_ms);
}
DropResult CacheState::DropDeadWorkers(int64_t now_ms) {
  return impl_->DropDeadWorkers(now_ms);
}
void CacheState::CreditServicePause(int64_t paused_ms, int64_t now_ms) {
  impl_->CreditServicePause(paused_ms, now_ms);
}
void CacheState::MarkWorkersUnconfirmed() { impl_->MarkWorkersUnconfirmed(); }
std::string CacheState::CanonicalDump() const { return impl_->CanonicalDump(); }
std::string CacheState::Serialize() const { return impl_->Serialize(); }
absl::Status CacheState::Restore(std::string_view snapshot) {
  absl::StatusOr<std::unique_ptr<CacheStateImpl>> restored =
      CacheStateImpl::Deserialize(snapshot, impl_->options());
  if (!restored.ok()) return restored.status();
  impl_ = *std::move(restored);
  return absl::OkStatus();
}
absl::Status CacheState::CheckInvariants() const {
  return impl_->CheckInvariants();
}
absl::StatusOr<std::vector<std::vector<int32_t>>> CacheState::ResidentSequences(
    std::string_view model, std::string_view cache_salt,
    std::string_view worker_id) const {
  return impl_->ResidentSequences(model, cache_salt, worker_id);
}

}  // namespace radixkv::cache_service
