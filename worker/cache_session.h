// CacheSession: a worker's standing with the cache service: registration
// under an epoch, a heartbeat thread that reports the worker's load and the
// leases it holds (renewing them), a fresh epoch when the service forgot
// the worker (every older lease is then gone), the leases the service
// reported lost, and deregistration at the end of a drain.
//
// Thread-safe. The scheduler reads epoch() / registered() and publishes its
// load; the heartbeat thread talks to the service.
#ifndef RADIXKV_WORKER_CACHE_SESSION_H_
#define RADIXKV_WORKER_CACHE_SESSION_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "radixkv/v1/cache_service.pb.h"
#include "worker/cache_client.h"

namespace radixkv::worker {

struct CacheSessionOptions {
  std::string worker_id;
  // RegisterRequest.address and metrics_address.
  std::string advertise_address;
  std::string metrics_address;
  std::string model_name;
  // The first epoch (> 0).
  int64_t epoch = 1;
  // Heartbeat period (also the heartbeat's deadline); 0 = the service's
  // RegisterResponse.heartbeat_interval_ms (at most a third of its lease
  // TTL).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // The pool registered.
  int64_t capacity_slots = 0;
  int32_t page_size = 1;
  int32_t vocab_size = 0;
};

class CacheSession {
 public:
  // `cache` must outlive the session.
  CacheSession(CacheSessionOptions options, KvCacheClient* cache);
  // Stops the heartbeat thread.
  ~CacheSession();
  CacheSession(const CacheSession&) = delete;
  CacheSession& operator=(const CacheSession&) = delete;

  // Registers (with a fresh epoch: re-registers; leases of older epochs are
  // then reported by TakeLostLeases). Errors: the service's.
  absl::Status RegisterWithService(bool fresh_epoch);
  // Starts the heartbeat thread: every heartbeat interval a heartbeat, or a
  // registration while unregistered (every second; under a fresh epoch
  // when the service forgot the worker).
  void StartHeartbeats();
  // Stops and joins the heartbeat thread (idempotent).
  void StopHeartbeats();
  // One heartbeat now (the thread's work), with the heartbeat interval as
  // its deadline: load and held leases out, lost leases in; when the
  // service no longer knows this worker (NOT_FOUND, FAILED_PRECONDITION), a
  // registration under a fresh epoch (retried by the thread if it fails).
  void SendHeartbeat();
  // Deregisters when registered (the end of a drain; call after
  // StopHeartbeats). Failures are logged.
  void Deregister();

  // The current epoch (also before the first registration succeeded).
  int64_t epoch() const;
  bool registered() const;
  // The epoch of the last successful registration (0 before the first).
  int64_t registered_epoch() const;
  // The period of heartbeats while registered.
  absl::Duration heartbeat_interval() const;
  // An RPC found the worker unknown to the service (NOT_FOUND, stale
  // epoch): the service dropped it or forgot it and freed its slots.
  // Generate answers UNAVAILABLE until the heartbeat thread has registered
  // again, under a fresh epoch, as after a failed heartbeat.
  void MarkForgotten();

  // What the next heartbeat reports.
  void SetLoad(const v1::WorkerLoad& load, std::vector<uint64_t> held_leases);

  struct LostLeases {
    // Reported lost by heartbeats since the last call.
    std::vector<uint64_t> lease_ids;
    // Every lease acquired under an older epoch is gone.
    int64_t invalid_before_epoch = 0;
  };
  LostLeases TakeLostLeases();

 private:
  struct SessionStats {
    // Reported by heartbeats.
    v1::WorkerLoad load;
    // Of the last successful registration.
    int64_t epoch = 0;
  };

  void HeartbeatLoop();

  const CacheSessionOptions options_;
  KvCacheClient* const cache_;
  const int64_t capacity_slots_;
  const int32_t page_size_;
  const int32_t vocab_size_;

  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  // Leases acquired under epochs older than this are gone (re-register).
  int64_t invalid_before_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The service no longer holds this worker's slots (NOT_FOUND / stale
  // epoch): its next Register must use a fresh epoch and drop every lease
  // of the old one (docs/architecture.md "Worker liveness").
  bool fresh_epoch_needed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> lost_leases_ ABSL_GUARDED_BY(mu_);
  // Lease ids held, for heartbeats.
  std::vector<uint64_t> held_leases_ ABSL_GUARDED_BY(mu_);
  SessionStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread heartbeat_thread_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_CACHE_SESSION_H_
