// Background Redis snapshots of the cache service without stalling its RPCs
// (Redis BGSAVE style): the state is captured by fork() while the caller
// holds its state mutex, so the only stall is the fork itself (copying the
// page tables and the ~500 mappings of the process: 0.4-1.2 ms of CPU at 1M
// cached tokens, docs/perf.md); the
// child serializes its copy-on-write view of the state and streams it to the
// parent through a pipe, then _exit()s; a collector thread of the parent
// reads it, waits for the child, and stores it with
// RedisJournal::WriteSnapshot(), which commits the blob and trims exactly
// the journal records it covers (SnapshotPoint taken at the fork), in
// journal order and only if no journal failure happened since.
//
// Why fork and not a copy under the mutex: docs/architecture.md "Snapshots
// without an RPC stall".
//
// Rules for the child (a fork of a multi-threaded process): it only runs
// the caller's serialize function (plain memory reads and malloc, which
// glibc makes fork-safe), write(2) and _exit(2). It never logs, never
// touches gRPC, Redis connections or any mutex another thread may hold.
// The child resets SIGTERM/SIGINT/SIGPIPE to their defaults and unblocks
// them, so it dies with the parent's process group on a signal and on
// EPIPE once the parent is gone (kill -9 of the service). gRPC's own fork
// handlers are only installed with GRPC_ENABLE_FORK_SUPPORT=1, which the
// service must not set.
//
// At most one snapshot runs at a time. Failures (fork, child crash,
// truncated stream, timeout, Redis errors, a journal failure since the
// fork) drop that snapshot: nothing is trimmed, the journal keeps every
// record, and the next due snapshot tries again. The destructor (SIGTERM
// path) gives a snapshot in flight up to shutdown_grace (2 s) to commit,
// then SIGKILLs its child and joins the collector thread, so the process
// exits promptly with Redis holding the previous snapshot + the full
// journal.
#ifndef RADIXKV_CACHE_SERVICE_FORKED_SNAPSHOT_H_
#define RADIXKV_CACHE_SERVICE_FORKED_SNAPSHOT_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache_service/redis_journal.h"

namespace radixkv::cache_service {

// Faults a test can inject into the next snapshots.
enum class SnapshotFault {
  kNone,
  // The child kills itself (SIGKILL) after serializing, before writing.
  kChildCrashes,
  // The staging key expires (1 ms TTL) before the commit runs: the commit
  // finds nothing to rename (the Redis-side failure path).
  kStagingKeyExpires,
};

struct ForkedSnapshotOptions {
  // A snapshot whose child has not delivered its blob by then is killed.
  absl::Duration timeout = absl::Seconds(120);
  // How long the destructor (shutdown) lets a snapshot in flight finish.
  absl::Duration shutdown_grace = absl::Seconds(2);
  // Nice increment of the child (it competes with RPC threads for cores).
  int child_nice = 10;
  // Testing: the child sleeps this long before serializing (keeps a
  // snapshot in flight, e.g. to deliver SIGTERM meanwhile).
  absl::Duration child_delay_for_testing = absl::ZeroDuration();
  // Testing: fault of the next `fault_count_for_testing` snapshots.
  SnapshotFault fault_for_testing = SnapshotFault::kNone;
  int fault_count_for_testing = 0;
};

// Counters of the snapshots so far (monitoring, benchmarks, tests).
struct ForkedSnapshotStats {
  int64_t started = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  // Wall time of the fork() call (the stall under the caller's mutex), ms.
  double last_fork_ms = 0;
  double max_fork_ms = 0;
  double total_fork_ms = 0;
  // CPU time of the forking thread in fork() (the wall time above minus
  // preemption: what the fork itself costs), ms.
  double max_fork_cpu_ms = 0;
  double total_fork_cpu_ms = 0;
  // Fork to commit in Redis of the last finished snapshot, ms.
  double last_duration_ms = 0;
  int64_t last_bytes = 0;
  // Covered sequence of the last committed snapshot.
  int64_t last_covered_sequence = 0;
  // Status of the last finished snapshot.
  absl::Status last_status;
};

// Runs snapshots in forked children; see the file comment. Thread-safe.
class ForkedSnapshotter {
 public:
  // Runs in the child: returns the complete snapshot blob.
  using SerializeFn = std::function<std::string()>;

  // `journal` must outlive this object.
  ForkedSnapshotter(RedisJournal* journal, ForkedSnapshotOptions options);
  // Waits up to options.shutdown_grace for a snapshot in flight, then
  // SIGKILLs its child (the snapshot is dropped) and joins.
  ~ForkedSnapshotter();
  ForkedSnapshotter(const ForkedSnapshotter&) = delete;
  ForkedSnapshotter& operator=(const ForkedSnapshotter&) = delete;

  // True while a snapshot is in flight (fork to commit).
  bool busy() const;

  // Forks now; the child runs `serialize`. The caller must hold the lock
  // that serializes its state changes and their journal Append()s (the
  // snapshot covers journal_->snapshot_point() read here).
  // FAILED_PRECONDITION while another snapshot is in flight; INTERNAL when
  // pipe() or fork() fails (nothing started).
  absl::Status Start(SerializeFn serialize);

  // Blocks until no snapshot is in flight; returns the last one's status
  // (tests, shutdown tooling).
  absl::Status WaitIdle() const;

  ForkedSnapshotStats stats() const;

 private:
  struct Job {
    pid_t pid = -1;
    int fd = -1;
    SnapshotPoint point;
    absl::Time started;
    bool expire_staging = false;
    // The stall of this snapshot: fork() wall and CPU time, ms.
    double fork_ms = 0;
    double fork_cpu_ms = 0;
  };

  void CollectorLoop();
  // Reads the child's stream, reaps it and writes the blob to Redis.
  absl::Status Collect(const Job& job, int64_t* bytes);

  RedisJournal* const journal_;
  ForkedSnapshotOptions options_;

  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool has_job_ ABSL_GUARDED_BY(mu_) = false;
  Job job_ ABSL_GUARDED_BY(mu_);
  int faults_left_ ABSL_GUARDED_BY(mu_) = 0;
  ForkedSnapshotStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread collector_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_FORKED_SNAPSHOT_H_
