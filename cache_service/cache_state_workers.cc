#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"

namespace radixkv::cache_service {

namespace {

// The INVALID_ARGUMENT checks of RegisterWorker (see cache_state.h).
absl::Status ValidateRegisterFields(const RegisterWorkerRequest& request) {
  if (request.worker_id.empty() ||
      request.worker_id.size() > kMaxWorkerIdBytes) {
    return absl::InvalidArgumentError("worker_id must be 1..128 bytes");
  }
  if (request.model.empty()) {
    return absl::InvalidArgumentError("model must not be empty");
  }
  if (!IsValidPageSize(request.page_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", request.page_size,
                     " is not one of 1, 8, 16, 32, 64, 128"));
  }
  if (request.capacity_slots < request.page_size ||
      request.capacity_slots % request.page_size != 0 ||
      request.capacity_slots > kMaxCapacitySlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_slots ", request.capacity_slots,
                     " must be a multiple of page_size ", request.page_size,
                     " in [", request.page_size, ", ", kMaxCapacitySlots, "]"));
  }
  if (request.epoch < 0 || request.vocab_size < 0) {
    return absl::InvalidArgumentError("epoch and vocab_size must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RegisterWorkerResult> CacheStateImpl::RegisterWorker(
    const RegisterWorkerRequest& request, int64_t now_ms) {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  RegisterWorkerResult result;
  result.epoch = request.epoch;
  result.lease_ttl_ms = options_.lease_ttl_ms;
  result.heartbeat_timeout_ms = options_.heartbeat_timeout_ms;
  result.heartbeat_interval_ms = std::max<int64_t>(
      1, std::min(options_.heartbeat_timeout_ms, options_.lease_ttl_ms) / 4);
  if (WorkerEntry* known = FindWorker(request.worker_id)) {
    if (request.epoch < known->info.epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", request.worker_id, ": epoch ", request.epoch,
          " is older than the registered epoch ", known->info.epoch));
    }
    if (request.epoch == known->info.epoch) {
      if (request.capacity_slots != known->info.capacity_slots ||
          request.page_size != known->info.page_size ||
          request.model != known->info.model ||
          request.vocab_size != known->info.vocab_size) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", request.worker_id, " epoch ", request.epoch,
            " is already registered with another shape (capacity, page_size, "
            "model or vocab_size); use a new epoch"));
      }
      known->info.address = request.address;
      known->info.metrics_address = request.metrics_address;
      known->last_heartbeat_ms = now_ms;
      known->confirmed = true;
      return result;
    }
    // A newer epoch: the old process's KV is gone. The model might change, so
    // check room in the new model before wiping.
    if (request.model != known->info.model) {
      auto m = models_.find(request.model);
      if (m != models_.end() && m->second.mask == ~uint64_t{0}) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model ", request.model, " already has ",
                         kMaxWorkersPerModel, " workers"));
      }
    }
  } else {
    auto m = models_.find(request.model);
    if (m != models_.end() && m->second.mask == ~uint64_t{0}) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model ", request.model, " already has ",
                       kMaxWorkersPerModel, " workers"));
    }
  }
  // The largest allocation comes first: if it fails, nothing has changed
  // (the previous epoch is still registered).
  absl::StatusOr<PageAllocator> allocator =
      PageAllocator::Create(request.capacity_slots, request.page_size);
  if (!allocator.ok()) return allocator.status();
  if (FindWorker(request.worker_id) != nullptr) {
    result.wiped_previous_epoch = true;
    result.released_leases = RemoveWorker(request.worker_id);
  }
  ModelEntry& model = models_[request.model];
  const int bit = std::countr_one(model.mask);
  WorkerEntry& worker = workers_[request.worker_id];
  worker.info = request;
  worker.last_heartbeat_ms = now_ms;
  worker.bit = bit;
  worker.allocator = std::make_unique<PageAllocator>(*std::move(allocator));
  worker.queue = std::make_unique<EvictionQueue>();
  model.mask |= uint64_t{1} << bit;
  model.bit_owner[bit] = request.worker_id;
  (*model.contexts)[bit] =
      WorkerContext{worker.allocator.get(), worker.queue.get(), 0};
  return result;
}

absl::Status CacheStateImpl::CheckVocabAgreesWithLiveWorkers(
    const RegisterWorkerRequest& request, int64_t now_ms) const {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  if (request.vocab_size == 0) return absl::OkStatus();
  // workers_ is ordered by worker_id: the first disagreeing worker is the
  // smallest id, so the message is deterministic.
  for (const auto& [id, worker] : workers_) {
    if (id == request.worker_id || worker.info.model != request.model ||
        worker.info.vocab_size <= 0 ||
        worker.info.vocab_size == request.vocab_size ||
        now_ms - worker.last_heartbeat_ms > options_.heartbeat_timeout_ms) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id, ": vocab_size ", request.vocab_size,
        " differs from vocab_size ", worker.info.vocab_size, " of live worker ",
        id, " (epoch ", worker.info.epoch, ") of model ", request.model,
        "; all live workers of a model must share its vocabulary (token ids "
        "are validated against it)"));
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckRegisterWithinBounds(
    const RegisterWorkerRequest& request) const {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  const MetadataBounds& bounds = options_.bounds;
  int64_t in_use = 0;
  for (const auto& [id, worker] : workers_) {
    if (id != request.worker_id) in_use += worker.info.capacity_slots;
  }
  if (in_use + request.capacity_slots > bounds.max_total_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, ": capacity_slots ",
        request.capacity_slots, " with the ", in_use,
        " slots other workers have registered exceeds the service's limit of ",
        bounds.max_total_slots,
        " slots (--max_total_slots; metadata costs 12 bytes per page and "
        "8-360 bytes per cached token, docs/architecture.md)"));
  }
  const size_t others =
      workers_.size() - (FindWorker(request.worker_id) != nullptr);
  if (static_cast<int64_t>(others) + 1 > bounds.max_workers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", request.worker_id, ": ", others,
                     " workers are registered, the service's limit is ",
                     bounds.max_workers, " (--max_workers)"));
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckCommitWithinBounds(
    const CommitRequest& request, int64_t now_ms) const {
  const Lease* lease = leases_.Find(request.lease_id);
  if (lease == nullptr || lease->expires_at_ms <= now_ms ||
      FindTree(lease->model, lease->cache_salt) != nullptr) {
    return absl::OkStatus();
  }
  size_t trees = 0;
  for (const auto& [name, model] : models_) trees += model.trees.size();
  if (static_cast<int64_t>(trees) < options_.bounds.max_trees) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "commit of lease ", lease->id, " would add a radix tree for model ",
      lease->model, " and its cache_salt to the ", trees,
      " trees the service holds; the limit is ", options_.bounds.max_trees,
      " (--max_trees); the tokens are not cached, the lease is unchanged"));
}

absl::StatusOr<HeartbeatResult> CacheStateImpl::Heartbeat(
    const HeartbeatRequest& request, int64_t now_ms) {
  absl::StatusOr<WorkerEntry*> found =
      WorkerAtEpoch(request.worker_id, request.epoch);
  if (!found.ok()) return found.status();
  WorkerEntry* worker = *found;
  const WorkerLoad& load = request.load;
  if (load.running_requests < 0 || load.waiting_requests < 0 ||
      load.outstanding_tokens < 0 || load.available_slots < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", request.worker_id,
        ": load values must be >= 0 (running_requests ", load.running_requests,
        ", waiting_requests ", load.waiting_requests, ", outstanding_tokens ",
        load.outstanding_tokens, ", available_slots ", load.available_slots,
        ")"));
  }
  worker->load = request.load;
  worker->last_heartbeat_ms = std::max(worker->last_heartbeat_ms, now_ms);
  worker->confirmed = true;
  HeartbeatResult result;
  for (uint64_t id : request.lease_ids) {
    Lease* lease = leases_.Find(id);
    if (lease == nullptr || lease->worker_id != request.worker_id ||
        lease->expires_at_ms <= now_ms) {
      result.lost_lease_ids.push_back(id);
      continue;
    }
    leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
  }
  return result;
}

absl::StatusOr<DeregisterResult> CacheStateImpl::DeregisterWorker(
    std::string_view worker_id, int64_t epoch) {
  if (absl::StatusOr<WorkerEntry*> found = WorkerAtEpoch(worker_id, epoch);
      !found.ok()) {
    return found.status();
  }
  DeregisterResult result;
  result.released_leases = RemoveWorker(std::string(worker_id));
  return result;
}

int32_t CacheStateImpl::RemoveWorker(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  WorkerEntry& worker = it->second;
  const int32_t released = static_cast<int32_t>(worker.lease_ids.size());
  // The worker's pool is gone: its leases and residency vanish without
  // touching its allocator (which is dropped with it).
  for (uint64_t id : worker.lease_ids) {
    fork_links_.Remove(id);
    leases_.Erase(id);
  }
  ModelEntry& model = models_.at(worker.info.model);
  for (auto t = model.trees.begin(); t != model.trees.end();) {
    t->second->RemoveWorker(worker.bit);
    t = t->second->empty() ? model.trees.erase(t) : std::next(t);
  }
  (*model.contexts)[worker.bit] = WorkerContext{};
  model.mask &= ~(uint64_t{1} << worker.bit);
  model.bit_owner[worker.bit].clear();
  if (model.mask == 0 && model.trees.empty()) models_.erase(worker.info.model);
  workers_.erase(it);
  return released;
}

absl::StatusOr<StatsResult> CacheStateImpl::Stats(std::string_view worker_id,
                                                  int64_t now_ms) const {
  if (!worker_id.empty() && FindWorker(worker_id) == nullptr) {
    return UnknownWorker(worker_id);
  }
  StatsResult result;
  for (const auto& [id, worker] : workers_) {
    if (!worker_id.empty() && id != worker_id) continue;
    const ModelEntry& model = models_.at(worker.info.model);
    WorkerStats s;
    s.worker_id = id;
    s.address = worker.info.address;
    s.metrics_address = worker.info.metrics_address;
    s.epoch = worker.info.epoch;
    s.model = worker.info.model;
    s.page_size = worker.info.page_size;
    s.vocab_size = worker.info.vocab_size;
    s.capacity_slots = worker.allocator->capacity_slots();
    s.free_slots = worker.allocator->free_slots();
    s.evictable_slots = worker.allocator->evictable_slots();
    s.protected_slots = worker.allocator->protected_slots();
    s.cached_tokens = (*model.contexts)[worker.bit].resident_tokens;
    s.active_leases = static_cast<int32_t>(worker.lease_ids.size());
    s.load = worker.load;
    s.heartbeat_age_ms =
        std::max<int64_t>(0, now_ms - worker.last_heartbeat_ms);
    s.prefix_query_tokens = worker.prefix_query_tokens;
    s.prefix_hit_tokens = worker.prefix_hit_tokens;
    s.evicted_tokens = worker.evicted_tokens;
    s.expired_leases = worker.expired_leases;
    s.unconfirmed = !worker.confirmed;
    result.workers.push_back(std::move(s));
  }
  result.active_leases = static_cast<int64_t>(leases_.size());
  result.expired_leases_total = expired_leases_total_;
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      ++result.trees;
      result.tree_nodes += tree->num_nodes();
      result.tree_metadata_bytes += tree->MetadataBytes();
      result.tree_tokens += tree->num_tokens();
    }
    for (const WorkerContext& ctx : *model.contexts) {
      result.resident_tokens += ctx.resident_tokens;
    }
  }
  return result;
}

DropResult CacheStateImpl::DropDeadWorkers(int64_t now_ms) {
  DropResult result;
  std::vector<std::string> dead;
  for (const auto& [id, worker] : workers_) {
    if (now_ms - worker.last_heartbeat_ms > options_.heartbeat_timeout_ms) {
      dead.push_back(id);
    }
  }
  for (const std::string& id : dead) {
    result.released_leases += RemoveWorker(id);
    result.dropped_worker_ids.push_back(id);
  }
  return result;
}

void CacheStateImpl::CreditServicePause(int64_t paused_ms, int64_t now_ms) {
  if (paused_ms <= 0) return;
  for (auto& [id, worker] : workers_) {
    worker.last_heartbeat_ms =
        std::max(worker.last_heartbeat_ms,
                 std::min(now_ms, worker.last_heartbeat_ms + paused_ms));
  }
  std::vector<Lease*> leases;
  leases.reserve(leases_.size());
  for (const auto& [id, lease] : leases_.leases()) {
    leases.push_back(leases_.Find(id));
  }
  for (Lease* lease : leases) {
    leases_.Renew(lease, lease->expires_at_ms + paused_ms);
  }
}

void CacheStateImpl::MarkWorkersUnconfirmed() {
  for (auto& [id, worker] : workers_) worker.confirmed = false;
}

}  // namespace radixkv::cache_service
