#include "cache_service/rpc_apply.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cache_service/cache_state.h"
#include "cache_service/journal_entry.h"
#include "gtest/gtest.h"
#include "radixkv/v1/cache_service.pb.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

pb::RegisterRequest Register(const std::string& id, int64_t capacity) {
  pb::RegisterRequest req;
  req.set_worker_id(id);
  req.set_address("127.0.0.1:1");
  req.set_capacity_slots(capacity);
  req.set_page_size(8);
  req.set_model("m");
  req.set_epoch(1);
  req.set_vocab_size(1000);
  return req;
}

pb::AcquireRequest Acquire(const std::vector<int32_t>& tokens) {
  pb::AcquireRequest req;
  req.set_worker_id("w0");
  req.set_epoch(1);
  for (int32_t t : tokens) req.add_tokens(t);
  req.set_reserve_tokens(4);
  return req;
}

TEST(RpcApplyTest, ReplayOfTheJournalGivesTheLiveState) {
  CacheState live;
  std::vector<std::string> journal;

  pb::RegisterResponse reg;
  ASSERT_TRUE(ApplyRegister(live, Register("w0", 256), 1000, &reg).ok());
  EXPECT_EQ(reg.epoch(), 1);
  journal.push_back(EncodeJournalEntry(
      JournalOp::kRegister, 1000, Register("w0", 256).SerializeAsString()));

  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  pb::AcquireResponse acq;
  ASSERT_TRUE(ApplyAcquire(live, Acquire(prompt), 1001, &acq).ok());
  EXPECT_EQ(acq.prefix_len(), 0);
  EXPECT_EQ(acq.kv_indices_size(), 14);
  journal.push_back(EncodeJournalEntry(JournalOp::kAcquire, 1001,
                                       Acquire(prompt).SerializeAsString()));

  pb::CommitRequest commit;
  commit.set_lease_id(acq.lease_id());
  for (int32_t t : prompt) commit.add_tokens(t);
  pb::CommitResponse com;
  ASSERT_TRUE(ApplyCommit(live, commit, 1002, &com).ok());
  EXPECT_EQ(com.inserted_tokens(), 10);
  journal.push_back(
      EncodeJournalEntry(JournalOp::kCommit, 1002, commit.SerializeAsString()));

  EXPECT_EQ(ApplySweep(live, 1003, 0), std::make_pair(0, 0));
  journal.push_back(
      EncodeJournalEntry(JournalOp::kSweep, 1003, EncodeSweepPayload(0)));

  // A failed call replays as the same failure and changes nothing.
  pb::ReleaseRequest release;
  release.set_lease_id(acq.lease_id());
  pb::ReleaseResponse rel;
  EXPECT_EQ(ApplyRelease(live, release, 1004, &rel).code(),
            absl::StatusCode::kNotFound);
  journal.push_back(EncodeJournalEntry(JournalOp::kRelease, 1004,
                                       release.SerializeAsString()));

  CacheState replayed;
  for (const std::string& bytes : journal) {
    absl::StatusOr<JournalEntry> entry = DecodeJournalEntry(bytes);
    ASSERT_TRUE(entry.ok());
    const absl::Status s = ReplayJournalEntry(replayed, *entry);
    if (entry->op == JournalOp::kRelease) {
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  EXPECT_EQ(replayed.CanonicalDump(), live.CanonicalDump());
  EXPECT_TRUE(replayed.CheckInvariants().ok());
}

TEST(RpcApplyTest, CorruptEntriesAreDataLoss) {
  CacheState state;
  const std::string before = state.CanonicalDump();
  JournalEntry unknown{static_cast<JournalOp>(200), 5, ""};
  EXPECT_EQ(ReplayJournalEntry(state, unknown).code(),
            absl::StatusCode::kDataLoss);
  JournalEntry garbage{JournalOp::kAcquire, 5, "\xff\xff\xff"};
  EXPECT_EQ(ReplayJournalEntry(state, garbage).code(),
            absl::StatusCode::kDataLoss);
  JournalEntry sweep{JournalOp::kSweep, 5, "123"};
  EXPECT_EQ(ReplayJournalEntry(state, sweep).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(state.CanonicalDump(), before);
}

TEST(RpcApplyTest, AdmissionRefusesBeyondBoundsWithoutChange) {
  CacheOptions options;
  options.bounds.max_total_slots = 256;
  CacheState state(options);
  pb::RegisterResponse resp;
  ASSERT_TRUE(
      AdmitAndApplyRegister(state, Register("w0", 256), 1000, &resp).ok());
  const std::string before = state.CanonicalDump();
  EXPECT_EQ(AdmitAndApplyRegister(state, Register("w1", 8), 1001, &resp).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(state.CanonicalDump(), before);
  // Replay (ApplyRegister alone) does not apply the live bound.
  EXPECT_TRUE(ApplyRegister(state, Register("w1", 8), 1001, &resp).ok());
}

}  // namespace
}  // namespace radixkv::cache_service
