// The gRPC CacheService (proto/radixkv/v1/cache_service.proto) over
// CacheState (cache_state.h), made crash safe by a Redis write-ahead journal
// (redis_journal.h; the design is in docs/architecture.md "Cache service
// design choices" and "Worker liveness"). Files of this class:
//   cache_service_impl.cc      construction, recovery, journal, sweep
//   cache_service_handlers.cc  the unary RPCs
//   lease_stream_reactor.cc    LeaseStream
//   cache_service_mutation.h   RunMutation, shared by both
// with rpc_apply.h (the Apply function of each RPC, shared with replay) and
// journal_entry.h (the bytes kept in Redis).
//
// Concurrency: one absl::Mutex around the CacheState; Match/Stats/Dump take
// it shared, every other RPC exclusively. Handlers use gRPC's callback API,
// so an RPC waiting for its journal write holds no thread.
//
// Write-ahead rule (Redis mode): a state change is applied and its journal
// entry (JournalOp, the time used, the request) queued in one critical
// section, so journal order == apply order; the RPC is acknowledged only once
// the entry is in Redis. Reads may see a change whose write is in flight.
// A snapshot is due after --snapshot_every_ops operations AND
// snapshot_journal_ratio x the last snapshot's bytes of journal, and is
// taken by a forked child (forked_snapshot.h). Start-up: Restore(snapshot)
// + replay with the recorded times, CheckInvariants(), a fresh snapshot.
// After a failed journal write every RPC is UNAVAILABLE until the sweep
// reconnects and rebuilds from Redis; entries answered UNAVAILABLE are
// removed first (RedisJournal::Reconnect). A process fenced by a newer one
// stays UNAVAILABLE.
//
// The background sweep expires leases and drops dead workers, journaled
// like RPCs; a gap of more than two sweep intervals is credited to every
// worker and lease first (CacheState::CreditServicePause), so a stall of the
// service itself drops no one.
#ifndef RADIXKV_CACHE_SERVICE_CACHE_SERVICE_IMPL_H_
#define RADIXKV_CACHE_SERVICE_CACHE_SERVICE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cache_service/cache_metrics.h"
#include "cache_service/cache_state.h"
#include "cache_service/forked_snapshot.h"
#include "cache_service/journal_entry.h"
#include "cache_service/redis_journal.h"
#include "radixkv/v1/cache_service.grpc.pb.h"

namespace radixkv::cache_service {

// gRPC metadata key of the request id a client (the router) may send with
// Match; the service only logs it (debug level), to join a Match's phases
// with the client's.
inline constexpr char kRequestIdMetadataKey[] = "radixkv-request-id";

// Configuration of the service.
struct CacheServiceOptions {
  // Options of the core (lease TTL, heartbeat timeout, eviction policy).
  CacheOptions cache;
  // Longest prompt accepted by Match/Acquire, tokens, in [1, 1,048,576].
  int64_t max_prompt_tokens = kMaxPromptTokens;
  // Least journaled operations between two snapshots (Redis mode), >= 1; a
  // snapshot also waits until the journal since the last one is 4x as large
  // as that snapshot.
  int64_t snapshot_every_ops = 10'000;
  // ... and waits until the journal since the last snapshot holds this many
  // times the snapshot's bytes (> 0; benchmarks lower it to snapshot often).
  double snapshot_journal_ratio = 4;
  // Redis mode: snapshots in a forked child (true) or Serialize() under the
  // service mutex (false: Serialize() under the mutex, which stalls every RPC
  // while it runs; kept for measurements and platforms without fork).
  bool background_snapshots = true;
  // Timeout, child priority and test faults of background snapshots.
  ForkedSnapshotOptions forked_snapshot;
  // Period of the background expiry/dead-worker sweep and metrics refresh.
  absl::Duration sweep_interval = absl::Milliseconds(250);
  // Milliseconds on a wall clock; default Unix time. Tests inject their own.
  // The service never lets its time go backwards (it uses the max of this
  // and the last time it used, recovered from the journal after a restart).
  std::function<int64_t()> clock_ms;
  // Called with false when a journal write fails (the service then answers
  // UNAVAILABLE) and with true once the state is rebuilt from Redis; main
  // uses it to drop and restore grpc.health.v1 readiness. Any thread.
  std::function<void(bool available)> availability_observer;
};

// What start-up recovery found in Redis.
struct RecoveryReport {
  bool had_snapshot = false;
  int64_t replayed_entries = 0;
  // Entries whose replay returned an error (should be 0: only successful
  // calls are journaled and the core is deterministic).
  int64_t replay_errors = 0;
};

class CacheServiceImpl final
    : public radixkv::v1::CacheService::CallbackService {
 public:
  // Builds the service. With a journal (Redis mode) the state is first
  // rebuilt from it (see the file comment); `journal` null = in-memory mode.
  // `metrics` may be null. Errors: UNAVAILABLE (Redis), DATA_LOSS /
  // INVALID_ARGUMENT (undecodable snapshot or entries), INTERNAL (recovered
  // state fails CheckInvariants).
  static absl::StatusOr<std::unique_ptr<CacheServiceImpl>> Create(
      CacheServiceOptions options, std::unique_ptr<RedisJournal> journal,
      std::shared_ptr<CacheMetrics> metrics);

  // Stops the sweep and flushes the journal.
  ~CacheServiceImpl() override;

  // "redis" or "memory" (Stats.persistence).
  const char* persistence() const {
    return journal_ != nullptr ? "redis" : "memory";
  }
  const RecoveryReport& recovery() const { return recovery_; }
  // Snapshots taken by the snapshot trigger so far (not the start-up and
  // repair ones). With background_snapshots=false they are inline, and the
  // fork_ms fields hold the time Serialize() held the mutex instead.
  ForkedSnapshotStats snapshot_stats() const;
  // Blocks until no background snapshot is in flight; its status (tests).
  absl::Status WaitForSnapshot() const;

  // Starts the background sweep thread (every options.sweep_interval).
  void StartBackgroundSweep();
  // One sweep now: expire leases, drop dead workers (journaled), repair a
  // failed journal, refresh metrics. Returns the number of leases expired.
  int SweepOnce();

  // Graceful end of every LeaseStream (call before the gRPC server's
  // Shutdown): each open stream stops applying new operations, sends the
  // responses of those applied, then ends with UNAVAILABLE; new streams end
  // at once. Without it, server shutdown cancels open streams after its
  // drain grace. Idempotent; any thread.
  void DrainLeaseStreams();

  // Canonical dump and invariant check of the current state (tests).
  std::string CanonicalDumpForTest();
  absl::Status CheckInvariantsForTest();

  // ---- radixkv.v1.CacheService ----
  grpc::ServerUnaryReactor* Register(
      grpc::CallbackServerContext* context,
      const radixkv::v1::RegisterRequest* request,
      radixkv::v1::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(
      grpc::CallbackServerContext* context,
      const radixkv::v1::HeartbeatRequest* request,
      radixkv::v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Deregister(
      grpc::CallbackServerContext* context,
      const radixkv::v1::DeregisterRequest* request,
      radixkv::v1::DeregisterResponse* response) override;
  grpc::ServerUnaryReactor* Match(
      grpc::CallbackServerContext* context,
      const radixkv::v1::MatchRequest* request,
      radixkv::v1::MatchResponse* response) override;
  grpc::ServerUnaryReactor* Acquire(
      grpc::CallbackServerContext* context,
      const radixkv::v1::AcquireRequest* request,
      radixkv::v1::AcquireResponse* response) override;
  grpc::ServerUnaryReactor* Grow(grpc::CallbackServerContext* context,
                                 const radixkv::v1::GrowRequest* request,
                                 radixkv::v1::GrowResponse* response) override;
  grpc::ServerUnaryReactor* Fork(grpc::CallbackServerContext* context,
                                 const radixkv::v1::ForkRequest* request,
                                 radixkv::v1::ForkResponse* response) override;
  grpc::ServerUnaryReactor* Commit(
      grpc::CallbackServerContext* context,
      const radixkv::v1::CommitRequest* request,
      radixkv::v1::CommitResponse* response) override;
  grpc::ServerUnaryReactor* Release(
      grpc::CallbackServerContext* context,
      const radixkv::v1::ReleaseRequest* request,
      radixkv::v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Evict(
      grpc::CallbackServerContext* context,
      const radixkv::v1::EvictRequest* request,
      radixkv::v1::EvictResponse* response) override;
  grpc::ServerUnaryReactor* Flush(
      grpc::CallbackServerContext* context,
      const radixkv::v1::FlushRequest* request,
      radixkv::v1::FlushResponse* response) override;
  grpc::ServerUnaryReactor* Stats(
      grpc::CallbackServerContext* context,
      const radixkv::v1::StatsRequest* request,
      radixkv::v1::StatsResponse* response) override;
  grpc::ServerUnaryReactor* Dump(grpc::CallbackServerContext* context,
                                 const radixkv::v1::DumpRequest* request,
                                 radixkv::v1::DumpResponse* response) override;
  // One reactor per stream (lease_stream_reactor.cc): operations are run by
  // the same code as the unary RPCs, responses sent in request order.
  grpc::ServerBidiReactor<radixkv::v1::LeaseStreamRequest,
                          radixkv::v1::LeaseStreamResponse>*
  LeaseStream(grpc::CallbackServerContext* context) override;

 private:
  CacheServiceImpl(CacheServiceOptions options,
                   std::unique_ptr<RedisJournal> journal,
                   std::shared_ptr<CacheMetrics> metrics);

  // Rebuilds state_ from the journal's snapshot + entries.
  absl::Status RecoverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Next time for a state change (monotonic).
  int64_t NowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Time for a read-only call.
  int64_t NowForRead() const;

  class LeaseStreamReactor;
  // Receives the final status of one state-changing operation (after its
  // journal write in Redis mode); any thread, no service lock held.
  using MutationDone = std::function<void(const absl::Status&)>;

  // Calls `done` after journaling (op, now_ms, request) when the service has
  // a journal; records metrics. Called with mu_ held (keeps journal order ==
  // apply order).
  void JournalThenDoneLocked(CacheRpc rpc, absl::Time start, JournalOp op,
                             int64_t now_ms,
                             const google::protobuf::Message& request,
                             MutationDone done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues an entry (and a snapshot when due). `done` gets the journal's
  // verdict. Requires journal_.
  void JournalLocked(JournalOp op, int64_t now_ms, std::string payload,
                     RedisJournal::DoneCallback done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a state-changing operation: `validation` (service-level checks),
  // then `apply` under the mutex, then (Redis mode) the journal write; then
  // `done` gets the status (inline when nothing is journaled). A failed
  // operation leaves the state unchanged and `response` cleared. Shared by
  // the unary RPCs and LeaseStream, so both behave identically.
  template <typename Request, typename Response>
  void RunMutation(CacheRpc rpc, JournalOp op, const Request& request,
                   Response* response,
                   absl::Status (*apply)(CacheState&, const Request&, int64_t,
                                         Response*),
                   absl::Status validation, MutationDone done);
  // RunMutation finishing a unary RPC's reactor.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* HandleMutation(
      grpc::CallbackServerContext* context, CacheRpc rpc, JournalOp op,
      const Request* request, Response* response,
      absl::Status (*apply)(CacheState&, const Request&, int64_t, Response*),
      absl::Status validation);
  // Records the metrics of one finished operation.
  void Observe(CacheRpc rpc, absl::Time start, const absl::Status& status);
  // Service-level checks of Acquire and Commit (beyond the core's).
  absl::Status ValidateAcquire(
      const radixkv::v1::AcquireRequest& request) const;
  absl::Status ValidateCommit(const radixkv::v1::CommitRequest& request) const;
  // Finishes with a status and records metrics.
  void Finish(grpc::ServerUnaryReactor* reactor, CacheRpc rpc, absl::Time start,
              const absl::Status& status);
  // UNAVAILABLE while the journal is broken or the service stops.
  absl::Status Available() const;
  // Sets journal_broken_ (first time: tells the availability observer).
  void MarkJournalBroken();
  // How long the service was paused before the sweep at now_ms (it could
  // not run its sweep, so it heard nobody): the time since the previous
  // sweep minus one sweep interval when that exceeds two intervals, else 0.
  // Records now_ms as the previous sweep.
  int64_t PauseBeforeSweepLocked(int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The status of a mutation whose apply threw std::bad_alloc (out of
  // memory or address space), instead of letting it escape into gRPC (whose
  // callback API answers an escaped exception with an empty UNIMPLEMENTED):
  // RESOURCE_EXHAUSTED; in Redis mode the state is rebuilt from the journal
  // (the call may be half applied), in memory mode INTERNAL when the state
  // fails CheckInvariants.
  absl::Status OutOfMemoryLocked(CacheRpc rpc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds from Redis after a journal failure (sweep thread).
  void RepairJournal();
  void RefreshMetrics();
  void FillStats(const StatsResult& stats,
                 radixkv::v1::StatsResponse* out) const;
  absl::Status ValidateTokens(
      const google::protobuf::RepeatedField<int32_t>& tokens) const;

  const CacheServiceOptions options_;
  const std::unique_ptr<RedisJournal> journal_;
  const std::shared_ptr<CacheMetrics> metrics_;
  RecoveryReport recovery_;
  // Background snapshots (Redis mode with background_snapshots); reset
  // first in the destructor (kills a running child).
  std::unique_ptr<ForkedSnapshotter> snapshotter_;

  mutable absl::Mutex mu_;
  CacheState state_ ABSL_GUARDED_BY(mu_);
  int64_t last_now_ms_ ABSL_GUARDED_BY(mu_) = 0;
  // Time of the previous sweep (before the first one: the service's start;
  // after a rebuild from Redis: the last journaled time), for
  // PauseBeforeSweepLocked.
  int64_t last_sweep_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ops_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_snapshot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Inline snapshots by the trigger (background_snapshots=false).
  ForkedSnapshotStats inline_snapshot_stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> last_now_ms_for_read_{0};

  // Set by a failed journal write; cleared by RepairJournal().
  std::atomic<bool> journal_broken_{false};
  std::atomic<bool> fenced_reported_{false};

  absl::Notification stop_sweep_;
  std::thread sweep_thread_;

  // Open LeaseStreams (for DrainLeaseStreams); reactors add and remove
  // themselves.
  absl::Mutex streams_mu_;
  std::set<LeaseStreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool draining_streams_ ABSL_GUARDED_BY(streams_mu_) = false;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_CACHE_SERVICE_IMPL_H_
