#include "cache_service/journal_entry.h"

#include "absl/status/status.h"

namespace radixkv::cache_service {
namespace {

constexpr std::string_view kSnapshotMagic = "RKVSNAP1";

void PutInt64(std::string* out, int64_t value) {
  uint64_t v = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// The first 8 bytes of `in` (the caller checked there are 8).
int64_t GetInt64(std::string_view in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return static_cast<int64_t>(v);
}

}  // namespace

std::string EncodeJournalEntry(JournalOp op, int64_t now_ms,
                               std::string_view payload) {
  std::string entry;
  entry.reserve(kJournalEntryHeaderBytes + payload.size());
  entry.push_back(static_cast<char>(op));
  PutInt64(&entry, now_ms);
  entry += payload;
  return entry;
}

absl::StatusOr<JournalEntry> DecodeJournalEntry(std::string_view entry) {
  if (entry.size() < kJournalEntryHeaderBytes) {
    return absl::DataLossError("truncated journal entry");
  }
  JournalEntry out;
  out.op = static_cast<JournalOp>(static_cast<uint8_t>(entry[0]));
  out.now_ms = GetInt64(entry.substr(1, 8));
  out.payload = entry.substr(kJournalEntryHeaderBytes);
  return out;
}

std::string EncodeSnapshotBlob(int64_t last_now_ms, std::string_view state) {
  std::string blob;
  blob.reserve(kSnapshotMagic.size() + 8 + state.size());
  blob += kSnapshotMagic;
  PutInt64(&blob, last_now_ms);
  blob += state;
  return blob;
}

absl::StatusOr<SnapshotBlob> DecodeSnapshotBlob(std::string_view blob) {
  if (blob.size() < kSnapshotMagic.size() + 8 ||
      blob.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
    return absl::DataLossError("redis snapshot has an unknown format");
  }
  SnapshotBlob out;
  out.last_now_ms = GetInt64(blob.substr(kSnapshotMagic.size(), 8));
  out.state = blob.substr(kSnapshotMagic.size() + 8);
  return out;
}

std::string EncodeSweepPayload(int64_t paused_ms) {
  std::string payload;
  if (paused_ms > 0) PutInt64(&payload, paused_ms);
  return payload;
}

absl::StatusOr<int64_t> DecodeSweepPayload(std::string_view payload) {
  if (!payload.empty() && payload.size() != 8) {
    return absl::DataLossError("sweep journal entry of a bad size");
  }
  return payload.empty() ? 0 : GetInt64(payload);
}

}  // namespace radixkv::cache_service
