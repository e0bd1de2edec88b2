// Write-ahead journal of the cache service in Redis (hiredis 0.14): an ordered
// list of opaque entries plus one snapshot blob. Every state change of the
// cache service is appended here and acknowledged to its client only after
// Redis has accepted it (group commit: one writer thread drains everything
// queued so far into a single pipelined RPUSH). A snapshot replaces the list
// atomically (a Lua script: SET snapshot, DEL journal), so recovery is
// always `Restore(snapshot)` followed by a replay of the list, in order.
//
// Redis layout (K = key_prefix):
//   K:snapshot  string, the last snapshot blob (absent before the first one)
//   K:journal   list, entries appended after that snapshot, oldest first
//   K:owner     integer, INCRed by every Open(): the fencing token
//
// Fencing: one logical cache service writes a given key_prefix. Every write
// is a Lua script that first checks K:owner against the token this process
// got at Open(); once a newer process has opened the journal (e.g. during a
// rolling restart), the older one's writes fail with "FENCED" and it can no
// longer reconnect (fenced()), so two processes never interleave.
#ifndef RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_
#define RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct redisContext;

namespace radixkv::cache_service {

// Connection and layout of a RedisJournal.
struct RedisJournalOptions {
  // Redis server, e.g. "127.0.0.1:6379".
  std::string host = "127.0.0.1";
  int port = 6379;
  // Prefix of the two keys (see the file comment).
  std::string key_prefix = "radixkv:cache";
  // Connect and per-command I/O timeout.
  absl::Duration io_timeout = absl::Seconds(2);
  // Most entries written by one pipelined flush.
  int max_batch_entries = 4096;
};

// Parses "host:port" (port in [1, 65535]). INVALID_ARGUMENT otherwise.
absl::Status ParseRedisAddress(const std::string& address,
                               RedisJournalOptions* options);

// The journal. Thread-safe: Append/AppendSnapshot may be called from any
// thread; the order of those calls is the order in Redis.
class RedisJournal {
 public:
  // Called once per entry when it is durable in Redis (OK) or when writing
  // it failed (UNAVAILABLE; the entry may or may not be in Redis). Runs on
  // the writer thread, without any journal lock held; must not block long.
  using DoneCallback = std::function<void(const absl::Status&)>;
  // Observes each flush: wall time of the pipelined round trip, seconds, and
  // the number of entries it carried.
  using FlushObserver = std::function<void(double seconds, int entries)>;

  // What Load() found in Redis.
  struct Contents {
    // Empty when no snapshot has been written yet.
    std::optional<std::string> snapshot;
    // Entries after the snapshot, oldest first.
    std::vector<std::string> entries;
  };

  // Connects (PING) and starts the writer thread. UNAVAILABLE when Redis
  // cannot be reached.
  static absl::StatusOr<std::unique_ptr<RedisJournal>> Open(
      const RedisJournalOptions& options, FlushObserver observer = nullptr);

  // Writes out everything queued, then stops the writer thread.
  ~RedisJournal();

  RedisJournal(const RedisJournal&) = delete;
  RedisJournal& operator=(const RedisJournal&) = delete;

  // Reads the snapshot and the journal in one MULTI/EXEC (a consistent
  // pair). Waits for queued writes first. UNAVAILABLE on a Redis error.
  absl::StatusOr<Contents> Load();

  // Queues `entry`; `done` is called once it is durable or failed. Entries
  // are never reordered. When the journal has failed (see healthy()), `done`
  // is called with UNAVAILABLE right away, from this thread.
  void Append(std::string entry, DoneCallback done);

  // Queues a snapshot that covers every entry appended before this call:
  // atomically stores it and empties the journal list.
  void AppendSnapshot(std::string snapshot);

  // Blocks until everything queued before the call is written; returns the
  // journal's health afterwards.
  absl::Status Flush();

  // OK while every write so far succeeded; after the first failure,
  // UNAVAILABLE with the Redis error until Reconnect() succeeds.
  absl::Status healthy() const;

  // After a failure: reconnects and clears the failure (the caller must
  // rebuild its state from Load(), since writes may have been lost).
  // FAILED_PRECONDITION when fenced (permanent).
  absl::Status Reconnect();

  // True once a write was refused because a newer process owns the journal.
  bool fenced() const;

  // Deletes both keys (tests and `--redis_reset`-style tooling).
  absl::Status Wipe();

  // Entries appended since the journal was opened (monitoring).
  int64_t appended_entries() const;

 private:
  struct Item {
    bool is_snapshot = false;
    std::string payload;
    DoneCallback done;
  };

  explicit RedisJournal(const RedisJournalOptions& options);
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void WriterLoop();
  // Writes a batch as one pipeline. Called on the writer thread with io_mu_.
  absl::Status WriteBatchLocked(const std::vector<Item>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);

  const RedisJournalOptions options_;
  const std::string snapshot_key_;
  const std::string journal_key_;
  const std::string owner_key_;
  std::string owner_token_;  // set by Open()
  FlushObserver observer_;

  // Protects the connection (writer thread, Load, Reconnect, Wipe).
  absl::Mutex io_mu_;
  redisContext* context_ ABSL_GUARDED_BY(io_mu_) = nullptr;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  // Items queued / written so far (for Flush()).
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t appended_entries_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_
