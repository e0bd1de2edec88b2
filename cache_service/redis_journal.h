// Write-ahead journal of the cache service in Redis (hiredis 0.14): an ordered
// list of opaque entries plus one snapshot blob. An entry is acknowledged
// only after Redis has accepted it (group commit: one writer thread drains
// everything queued so far into one pipelined, fenced script). Recovery is
// always `Restore(snapshot)` then a replay of the list, in order. The
// design is in docs/architecture.md "Cache service design choices".
//
// Redis layout (K = key_prefix):
//   K:snapshot  string, the last snapshot blob (absent before the first one)
//   K:snapshot_staging:<owner token>  a background snapshot being written
//               (expires after RedisJournalOptions::snapshot_staging_ttl)
//   K:journal   list of records, oldest first, appended after that snapshot.
//               A record is EncodeJournalRecord(owner token, sequence number,
//               entry): its first kJournalRecordIdBytes bytes ("#", 16 hex
//               digits of the owner token, 16 of the sequence number) are
//               its unique id. A record without the "#" (the format without
//               ids) is read back whole, as an entry.
//   K:owner     integer, INCRed by every Open() and every Reconnect(): the
//               fencing token
//
// Snapshots: AppendSnapshot() replaces the list atomically (SET snapshot,
// DEL journal); a background snapshot (forked_snapshot.h) covers a sequence
// number S: WriteSnapshot() stores the blob under a staging key over a
// second connection, then a fenced script queued in append order renames it
// to K:snapshot and trims exactly the records with sequence <= S (binary
// search over (owner token, sequence)), so K:snapshot + K:journal always
// equals the acknowledged history.
//
// Fencing: every write is a Lua script that first checks K:owner against
// this process's token; once a newer process has opened the journal, the
// older one's writes fail with "FENCED" and it cannot reconnect (fenced()).
// The ids of failed writes are remembered; Reconnect() removes those records
// and INCRs K:owner in one script, so a stale pipelined write executed later
// fails its fencing check and one executed before is removed: no
// unacknowledged entry is replayed. A snapshot goes first in its pipelined
// batch, so it covers only acknowledged entries.
#ifndef RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_
#define RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  // Expiry of a staging key written by WriteSnapshot() (a crashed process's
  // leftover disappears after this); the commit script persists the key.
  absl::Duration snapshot_staging_ttl = absl::Minutes(10);
};

// What a snapshot taken now covers: every entry Append()ed so far (sequence
// <= covered_sequence), under journal generation `generation`.
struct SnapshotPoint {
  int64_t covered_sequence = 0;
  int64_t generation = 0;
};

// Bytes of a record's id prefix: "#" + 16 hex digits (owner token) + 16 hex
// digits (sequence number).
inline constexpr size_t kJournalRecordIdBytes = 33;

// One record of K:journal, decoded.
struct JournalRecord {
  // The kJournalRecordIdBytes-byte id; empty for a record written before
  // ids existed (no leading "#").
  std::string id;
  // The entry given to RedisJournal::Append.
  std::string entry;
};

// Frames `entry` as a K:journal record: "#%016x%016x" of (owner_token,
// sequence) followed by the entry bytes.
std::string EncodeJournalRecord(int64_t owner_token, int64_t sequence,
                                std::string_view entry);

// Inverse of EncodeJournalRecord. A record not starting with "#" is a legacy
// entry (id empty, entry = the record). DATA_LOSS: starts with "#" but is
// shorter than kJournalRecordIdBytes.
absl::StatusOr<JournalRecord> DecodeJournalRecord(std::string_view record);

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
  // is called with UNAVAILABLE right away, from this thread, and 0 is
  // returned. Otherwise returns the entry's sequence number: 1, 2, 3, ... in
  // Append order since Open() (snapshots take none). An entry whose write
  // fails is remembered as unacknowledged and removed from Redis by the
  // next successful Reconnect() (see the file comment).
  int64_t Append(std::string entry, DoneCallback done);

  // Queues a snapshot that covers every entry appended before this call:
  // atomically stores it and empties the journal list.
  void AppendSnapshot(std::string snapshot);

  // The point a snapshot of the caller's state covers if it is taken now.
  // The caller must serialize Append() with taking the snapshot (the service
  // holds its mutex for both).
  SnapshotPoint snapshot_point() const;

  // Stores a snapshot that covers `point` without blocking appends: SET of
  // the blob under K:snapshot_staging:<token> over a second connection, then
  // a fenced commit script queued behind every entry appended so far, which
  // renames it to K:snapshot and trims the journal records with sequence <=
  // point.covered_sequence (keeping later ones). Blocks until the commit ran.
  // Must not be called from a DoneCallback. Errors (nothing is trimmed):
  // ABORTED when a Reconnect() happened since `point` (the snapshot may hold
  // unacknowledged entries) or the journal failed; UNAVAILABLE on a Redis
  // error of the staging write (the journal itself stays healthy); NOT_FOUND
  // when the staging key expired before the commit ran.
  // `staging_ttl_for_testing` > 0 replaces options.snapshot_staging_ttl and
  // waits twice that long before queuing the commit (so the key expires).
  absl::Status WriteSnapshot(
      std::string_view snapshot, SnapshotPoint point,
      absl::Duration staging_ttl_for_testing = absl::ZeroDuration());

  // Blocks until everything queued before the call is written; returns the
  // journal's health afterwards.
  absl::Status Flush();

  // OK while every write so far succeeded; after the first failure,
  // UNAVAILABLE with the Redis error until Reconnect() succeeds.
  absl::Status healthy() const;

  // After a failure: reconnects, atomically removes every unacknowledged
  // entry from K:journal and takes a new owner token (one Lua script; see
  // the file comment), then clears the failure. The caller must rebuild its
  // state from Load() afterwards: it now holds exactly the acknowledged
  // entries. FAILED_PRECONDITION when fenced (permanent); UNAVAILABLE while
  // Redis cannot be reached (the unacknowledged ids are kept for the next
  // attempt).
  absl::Status Reconnect();

  // Unacknowledged entries that Reconnect() found stored in Redis and
  // removed, since Open() (monitoring and tests).
  int64_t removed_unacknowledged_entries() const;
  // Ids of failed entries not yet removed by a Reconnect() (tests).
  std::vector<std::string> unacknowledged_ids() const;

  // True once a write was refused because a newer process owns the journal.
  bool fenced() const;

  // Deletes both keys (tests and `--redis_reset`-style tooling).
  absl::Status Wipe();

  // Entries appended since the journal was opened (monitoring).
  int64_t appended_entries() const;

 private:
  enum class Kind {
    kEntry,
    // Whole-journal snapshot (AppendSnapshot).
    kSnapshot,
    // Commit of a staged background snapshot (WriteSnapshot).
    kSnapshotCommit,
  };
  struct Item {
    Kind kind = Kind::kEntry;
    // Sequence number of an entry; the covered sequence of a commit.
    int64_t sequence = 0;
    // The entry or snapshot (an entry becomes its K:journal record, id
    // prefix added, when it is written); the staging key of a commit.
    std::string payload;
    DoneCallback done;
    // Commit only: the generation of its SnapshotPoint, and its own outcome
    // (set by WriteBatchLocked) when the batch as a whole succeeded.
    int64_t generation = 0;
    absl::Status result;
  };

  explicit RedisJournal(const RedisJournalOptions& options);
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void WriterLoop();
  // Writes a batch as one pipeline (entries framed as records under the
  // current owner token; their ids are appended to `attempted_ids`). Called
  // on the writer thread with io_mu_.
  absl::Status WriteBatchLocked(std::vector<Item>& batch,
                                std::vector<std::string>* attempted_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The Reconnect() script: removal of unacknowledged records + new token.
  absl::Status ReclaimLocked(const std::vector<std::string>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);

  const RedisJournalOptions options_;
  const std::string snapshot_key_;
  const std::string journal_key_;
  const std::string owner_key_;
  // The fencing token (K:owner value) this process writes under; set by
  // Open(), replaced by Reconnect().
  std::string owner_token_ ABSL_GUARDED_BY(io_mu_);
  int64_t owner_token_value_ ABSL_GUARDED_BY(io_mu_) = 0;
  FlushObserver observer_;

  // The second connection, for staging snapshot blobs (WriteSnapshot).
  absl::Mutex snapshot_io_mu_;
  redisContext* snapshot_context_ ABSL_GUARDED_BY(snapshot_io_mu_) = nullptr;

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
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Successful Reconnect()s since Open().
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Ids of entries whose write was attempted and failed (see the file
  // comment); emptied by a successful Reconnect().
  std::vector<std::string> unacknowledged_ids_ ABSL_GUARDED_BY(mu_);
  int64_t removed_unacknowledged_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_REDIS_JOURNAL_H_
