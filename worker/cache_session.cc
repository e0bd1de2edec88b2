#include "worker/cache_session.h"

#include <algorithm>
#include <utility>

#include "spdlog/spdlog.h"
#include "worker/log_format.h"

namespace radixkv::worker {

namespace {

int64_t NowMillis() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

CacheSession::CacheSession(CacheSessionOptions options, KvCacheClient* cache)
    : options_(std::move(options)),
      cache_(cache),
      capacity_slots_(options_.capacity_slots),
      page_size_(options_.page_size),
      vocab_size_(options_.vocab_size) {
  absl::MutexLock lock(&mu_);
  epoch_ = options_.epoch;
}

CacheSession::~CacheSession() { StopHeartbeats(); }

absl::Status CacheSession::RegisterWithService(bool fresh_epoch) {
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    if (fresh_epoch) epoch_ = std::max(NowMillis(), epoch_ + 1);
    epoch = epoch_;
  }
  v1::RegisterRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_address(options_.advertise_address);
  request.set_capacity_slots(capacity_slots_);
  request.set_page_size(page_size_);
  request.set_model(options_.model_name);
  request.set_epoch(epoch);
  request.set_vocab_size(vocab_size_);
  request.set_metrics_address(options_.metrics_address);
  absl::StatusOr<v1::RegisterResponse> response = cache_->Register(request);
  if (!response.ok()) return response.status();
  absl::MutexLock lock(&mu_);
  registered_ = true;
  absl::Duration interval = options_.heartbeat_interval;
  if (interval <= absl::ZeroDuration()) {
    // The service's cadence, else a quarter of its timeout.
    interval = response->heartbeat_interval_ms() > 0
                   ? absl::Milliseconds(response->heartbeat_interval_ms())
               : response->heartbeat_timeout_ms() > 0
                   ? absl::Milliseconds(response->heartbeat_timeout_ms()) / 4
                   : absl::Seconds(1);
  }
  if (response->lease_ttl_ms() > 0) {
    interval =
        std::min(interval, absl::Milliseconds(response->lease_ttl_ms()) / 3);
  }
  heartbeat_interval_ = std::max(interval, absl::Milliseconds(10));
  if (fresh_epoch) invalid_before_epoch_ = epoch;
  fresh_epoch_needed_ = false;
  stats_.epoch = epoch;
  spdlog::info(
      "registered with the cache service as {} epoch {} "
      "({} slots, page_size {}, heartbeat every {})",
      options_.worker_id, epoch, capacity_slots_, page_size_,
      FormatDurationForLog(heartbeat_interval_));
  return absl::OkStatus();
}

void CacheSession::StartHeartbeats() {
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void CacheSession::StopHeartbeats() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void CacheSession::HeartbeatLoop() {
  while (true) {
    absl::Duration interval;
    bool registered;
    bool fresh_epoch;
    {
      absl::MutexLock lock(&mu_);
      interval = registered_ ? heartbeat_interval_ : absl::Seconds(1);
      auto stopping = [this]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) return;
      registered = registered_;
      fresh_epoch = fresh_epoch_needed_;
    }
    if (!registered) {
      absl::Status status = RegisterWithService(fresh_epoch);
      if (!status.ok()) {
        spdlog::warn("cache service registration failed: {}",
                     status.ToString());
      }
      continue;
    }
    SendHeartbeat();
  }
}

void CacheSession::SendHeartbeat() {
  v1::HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  absl::Duration deadline;
  {
    absl::MutexLock lock(&mu_);
    deadline = heartbeat_interval_;
    request.set_epoch(epoch_);
    *request.mutable_load() = stats_.load;
    for (uint64_t id : held_leases_) request.add_lease_ids(id);
  }
  absl::StatusOr<v1::HeartbeatResponse> response =
      cache_->Heartbeat(request, deadline);
  if (response.ok()) {
    if (response->lost_lease_ids_size() > 0) {
      absl::MutexLock lock(&mu_);
      for (uint64_t id : response->lost_lease_ids()) lost_leases_.push_back(id);
    }
    return;
  }
  const absl::StatusCode code = response.status().code();
  if (code == absl::StatusCode::kNotFound ||
      code == absl::StatusCode::kFailedPrecondition) {
    // The service forgot this worker (restart without journal, timeout):
    // every lease is gone. Re-register with a fresh epoch; the scheduler
    // requeues the sequences whose leases predate it.
    spdlog::warn("heartbeat: {}; re-registering with a fresh epoch",
                 response.status().ToString());
    absl::Status status = RegisterWithService(true);
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      registered_ = false;
      fresh_epoch_needed_ = true;
    }
    return;
  }
  spdlog::warn("heartbeat failed: {}", response.status().ToString());
}

void CacheSession::Deregister() {
  bool registered;
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    registered = registered_;
    epoch = epoch_;
  }
  if (!registered) return;
  v1::DeregisterRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_epoch(epoch);
  absl::StatusOr<v1::DeregisterResponse> response = cache_->Deregister(request);
  if (response.ok()) {
    spdlog::info("deregistered from the cache service ({} leases released)",
                 response->released_leases());
    absl::MutexLock lock(&mu_);
    registered_ = false;
  } else {
    spdlog::warn("deregister failed: {}", response.status().ToString());
  }
}

int64_t CacheSession::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

bool CacheSession::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

int64_t CacheSession::registered_epoch() const {
  absl::MutexLock lock(&mu_);
  return stats_.epoch;
}

absl::Duration CacheSession::heartbeat_interval() const {
  absl::MutexLock lock(&mu_);
  return heartbeat_interval_;
}

void CacheSession::MarkForgotten() {
  absl::MutexLock lock(&mu_);
  registered_ = false;
  fresh_epoch_needed_ = true;
}

void CacheSession::SetLoad(const v1::WorkerLoad& load,
                           std::vector<uint64_t> held_leases) {
  absl::MutexLock lock(&mu_);
  stats_.load = load;
  held_leases_ = std::move(held_leases);
}

CacheSession::LostLeases CacheSession::TakeLostLeases() {
  absl::MutexLock lock(&mu_);
  LostLeases out;
  out.lease_ids.swap(lost_leases_);
  out.invalid_before_epoch = invalid_before_epoch_;
  return out;
}

}  // namespace radixkv::worker
