// Byte formats the cache service keeps in Redis (redis_journal.h stores
// them opaquely): journal entries, the snapshot blob and the sweep payload.
// Integers are 8-byte little endian. The values are durable: never change
// an encoding or renumber a JournalOp.
#ifndef RADIXKV_CACHE_SERVICE_JOURNAL_ENTRY_H_
#define RADIXKV_CACHE_SERVICE_JOURNAL_ENTRY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace radixkv::cache_service {

// Kind of a journal entry (its first byte).
enum class JournalOp : uint8_t {
  kRegister = 1,
  kHeartbeat = 2,
  kDeregister = 3,
  kAcquire = 4,
  kGrow = 5,
  kFork = 6,
  kCommit = 7,
  kRelease = 8,
  kEvict = 9,
  kFlush = 10,
  kSweep = 11,  // CreditServicePause, ExpireLeases, DropDeadWorkers at now
};

// Journal entry = uint8 JournalOp, int64 now_ms, then the payload (the
// serialized request proto; for kSweep see EncodeSweepPayload).
inline constexpr size_t kJournalEntryHeaderBytes = 1 + 8;

struct JournalEntry {
  JournalOp op = JournalOp::kSweep;  // not checked: replay refuses unknown ops
  int64_t now_ms = 0;                // the time the call was applied with, ms
  std::string_view payload;          // points into the decoded entry
};

std::string EncodeJournalEntry(JournalOp op, int64_t now_ms,
                               std::string_view payload);
// DATA_LOSS "truncated journal entry" when shorter than the header.
absl::StatusOr<JournalEntry> DecodeJournalEntry(std::string_view entry);

// Snapshot blob = "RKVSNAP1", int64 last_now_ms (the service's clock when
// it was taken), then CacheState::Serialize().
std::string EncodeSnapshotBlob(int64_t last_now_ms, std::string_view state);

struct SnapshotBlob {
  int64_t last_now_ms = 0;
  std::string_view state;  // CacheState::Serialize() bytes, into the blob
};

// DATA_LOSS "redis snapshot has an unknown format" on a bad magic or a blob
// shorter than its header.
absl::StatusOr<SnapshotBlob> DecodeSnapshotBlob(std::string_view blob);

// A sweep's payload: empty when it credited no pause, else int64 paused_ms.
std::string EncodeSweepPayload(int64_t paused_ms);
// paused_ms (0 for an empty payload); DATA_LOSS "sweep journal entry of a
// bad size" for any size but 0 and 8.
absl::StatusOr<int64_t> DecodeSweepPayload(std::string_view payload);

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_JOURNAL_ENTRY_H_
