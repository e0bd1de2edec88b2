#include "cache_service/journal_entry.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

TEST(JournalEntryTest, EntryBytesAndRoundTrip) {
  const std::string entry =
      EncodeJournalEntry(JournalOp::kCommit, 0x0102030405060708, "req");
  EXPECT_EQ(entry, std::string("\x07\x08\x07\x06\x05\x04\x03\x02\x01req", 12));
  absl::StatusOr<JournalEntry> decoded = DecodeJournalEntry(entry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->op, JournalOp::kCommit);
  EXPECT_EQ(decoded->now_ms, 0x0102030405060708);
  EXPECT_EQ(decoded->payload, "req");
}

TEST(JournalEntryTest, NegativeTimeAndEmptyPayload) {
  const std::string entry = EncodeJournalEntry(JournalOp::kSweep, -5, "");
  EXPECT_EQ(entry.size(), kJournalEntryHeaderBytes);
  absl::StatusOr<JournalEntry> decoded = DecodeJournalEntry(entry);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->op, JournalOp::kSweep);
  EXPECT_EQ(decoded->now_ms, -5);
  EXPECT_TRUE(decoded->payload.empty());
}

TEST(JournalEntryTest, TruncatedEntryIsDataLoss) {
  absl::StatusOr<JournalEntry> decoded =
      DecodeJournalEntry(std::string("\x01\x00\x00", 3));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(decoded.status().message(), "truncated journal entry");
}

TEST(JournalEntryTest, SnapshotBlobRoundTrip) {
  const std::string blob = EncodeSnapshotBlob(1234567, "state bytes");
  EXPECT_EQ(blob.substr(0, 8), "RKVSNAP1");
  absl::StatusOr<SnapshotBlob> decoded = DecodeSnapshotBlob(blob);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->last_now_ms, 1234567);
  EXPECT_EQ(decoded->state, "state bytes");
}

TEST(JournalEntryTest, SnapshotBlobWithoutMagicIsDataLoss) {
  EXPECT_EQ(DecodeSnapshotBlob("RKVSNAP1").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSnapshotBlob(std::string("RKVSNAP2\0\0\0\0\0\0\0\0", 16))
                .status()
                .message(),
            "redis snapshot has an unknown format");
}

TEST(JournalEntryTest, SweepPayload) {
  EXPECT_EQ(EncodeSweepPayload(0), "");
  EXPECT_EQ(EncodeSweepPayload(-3), "");
  EXPECT_EQ(*DecodeSweepPayload(""), 0);
  EXPECT_EQ(*DecodeSweepPayload(EncodeSweepPayload(86'400'000)), 86'400'000);
  EXPECT_EQ(DecodeSweepPayload("1234").status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace radixkv::cache_service
