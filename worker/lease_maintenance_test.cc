#include "worker/lease_maintenance.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// A sequence of `len` tokens with `slots` lease slots (slot = 100 + p),
// `computed` of them with KV: generating once computed >= len - 1 (its
// lease then covers len - 1 prompt tokens), prefilling before.
std::unique_ptr<Sequence> Seq(int len, int computed, int slots,
                              int max_new_tokens = 100) {
  auto seq = std::make_unique<Sequence>();
  for (int p = 0; p < len; ++p) seq->tokens.push_back(3 + p);
  for (int p = 0; p < slots; ++p) seq->kv_indices.push_back(100 + p);
  seq->prompt_len = len;
  seq->acquired_len = computed >= len - 1 ? len - 1 : len;
  seq->num_computed = computed;
  seq->sampling.max_new_tokens = max_new_tokens;
  seq->has_lease = true;
  return seq;
}

TEST(LeaseMaintenanceTest, AdmissionReserve) {
  auto seq = Seq(10, 0, 0, /*max_new_tokens=*/100);
  // max(reserve_tokens, 2 x (running + 1)), at most what it can use (99).
  EXPECT_EQ(AdmissionReserve(*seq, 0, 32), 32);
  EXPECT_EQ(AdmissionReserve(*seq, 20, 32), 42);
  EXPECT_EQ(AdmissionReserve(*seq, 60, 32), 99);
  auto short_seq = Seq(10, 0, 0, /*max_new_tokens=*/4);
  EXPECT_EQ(AdmissionReserve(*short_seq, 0, 32), 3);
  // Preempted and alone: all it can still need.
  auto preempted = Seq(10, 0, 0, /*max_new_tokens=*/1000);
  preempted->admitted_once = true;
  EXPECT_EQ(AdmissionReserve(*preempted, 0, 32), 999);
  EXPECT_EQ(AdmissionReserve(*preempted, 1, 32), 32);
}

TEST(LeaseMaintenanceTest, AcquireRequestAndLease) {
  auto seq = Seq(5, 0, 0);
  seq->request_id = "r";
  seq->cache_salt = "salt";
  seq->priority = 7;
  seq->disable_prefix_cache = true;
  v1::AcquireRequest request = AcquireRequestFor(*seq, "w", 42, "m", 3);
  EXPECT_EQ(request.worker_id(), "w");
  EXPECT_EQ(request.epoch(), 42);
  EXPECT_EQ(request.model(), "m");
  EXPECT_EQ(request.cache_salt(), "salt");
  EXPECT_EQ(
      std::vector<int32_t>(request.tokens().begin(), request.tokens().end()),
      seq->tokens);
  EXPECT_EQ(request.priority(), 7);
  EXPECT_EQ(request.reserve_tokens(), 3);
  EXPECT_EQ(request.request_id(), "r");
  EXPECT_TRUE(request.disable_match());

  v1::AcquireResponse lease;
  lease.set_lease_id(9);
  lease.set_prefix_len(2);
  for (int i = 0; i < 8; ++i) lease.add_kv_indices(50 + i);
  v1::CopyOp* op = lease.add_copy_ops();
  op->set_src_page(1);
  op->set_dst_page(4);
  op->set_num_tokens(2);
  seq->pending_copies.push_back(PageCopy{7, 7, 1});  // Stale: replaced.
  ASSERT_TRUE(ApplyAcquire(lease, 42, 3, seq.get()).ok());
  EXPECT_TRUE(seq->has_lease);
  EXPECT_EQ(seq->lease_id, 9u);
  EXPECT_EQ(seq->lease_epoch, 42);
  EXPECT_EQ(seq->acquired_len, 5);
  EXPECT_EQ(seq->num_computed, 2);
  EXPECT_EQ(seq->kv_indices,
            (std::vector<int64_t>{50, 51, 52, 53, 54, 55, 56, 57}));
  ASSERT_EQ(seq->pending_copies.size(), 1u);
  EXPECT_EQ(seq->pending_copies[0].dst_page, 4);

  // Inconsistent: 7 slots for 5 + 3, or a prefix covering the prompt.
  auto other = Seq(5, 0, 0);
  other->has_lease = false;
  lease.mutable_kv_indices()->RemoveLast();
  EXPECT_EQ(ApplyAcquire(lease, 42, 3, other.get()),
            absl::InternalError("cache service returned an inconsistent "
                                "lease: 7 slots for 5 + 3 tokens, prefix_len "
                                "2"));
  EXPECT_TRUE(other->has_lease);  // Ending it releases the lease.
  EXPECT_EQ(other->lease_id, 9u);
  EXPECT_TRUE(other->kv_indices.empty());
  lease.add_kv_indices(57);
  lease.set_prefix_len(5);
  EXPECT_EQ(ApplyAcquire(lease, 42, 3, other.get()).code(),
            absl::StatusCode::kInternal);
}

TEST(LeaseMaintenanceTest, GrowPlanUrgentFirstThenLeastHeadroom) {
  std::vector<std::unique_ptr<Sequence>> running;
  running.push_back(Seq(10, 9, 14));  // headroom 4
  running.push_back(Seq(10, 9, 12));  // headroom 2
  running.push_back(Seq(10, 5, 10));  // prefilling: never grown
  running[0]->admission_order = 1;
  running[1]->admission_order = 2;
  // grow_tokens 8: chunk max(8, 2 x 2 generating) = 8, watermark 4.
  GrowPlan plan = PlanGrow(running, 8, 1);
  EXPECT_EQ(plan.target, running[1].get());
  EXPECT_FALSE(plan.urgent);
  EXPECT_EQ(plan.num_tokens, 8);
  // Without a slot for the next token: urgent, the oldest such first.
  running.push_back(Seq(10, 9, 9));
  running.push_back(Seq(10, 9, 9));
  running[3]->admission_order = 5;
  running[4]->admission_order = 4;
  plan = PlanGrow(running, 8, 1);
  EXPECT_EQ(plan.target, running[4].get());
  EXPECT_TRUE(plan.urgent);
  // 4 generating: chunk 8.
  EXPECT_EQ(plan.num_tokens, 8);
  // Never more than the sequence can still use.
  std::vector<std::unique_ptr<Sequence>> near_end;
  near_end.push_back(Seq(10, 9, 10, /*max_new_tokens=*/3));  // needs 12.
  plan = PlanGrow(near_end, 8, 1);
  EXPECT_EQ(plan.num_tokens, 2);
  // Headroom above the watermark, or all slots held: nothing.
  std::vector<std::unique_ptr<Sequence>> fine;
  fine.push_back(Seq(10, 9, 40));
  fine.push_back(Seq(10, 9, 12, /*max_new_tokens=*/3));
  EXPECT_EQ(PlanGrow(fine, 8, 1).target, nullptr);
}

TEST(LeaseMaintenanceTest, GrowAppendsAndRemapsCopyOnWrite) {
  auto seq = Seq(10, 9, 12);
  v1::GrowResponse grown;
  grown.add_kv_indices(300);
  grown.add_kv_indices(301);
  grown.set_first_remapped_position(10);
  grown.add_remapped_kv_indices(200);
  grown.add_remapped_kv_indices(201);
  grown.add_remapped_kv_indices(202);  // Beyond the table: ignored.
  v1::CopyOp* op = grown.add_copy_ops();
  op->set_src_page(6);
  op->set_dst_page(12);
  op->set_num_tokens(2);
  ApplyGrow(grown, seq.get());
  EXPECT_EQ(seq->kv_indices,
            (std::vector<int64_t>{100, 101, 102, 103, 104, 105, 106, 107, 108,
                                  109, 200, 201, 300, 301}));
  ASSERT_EQ(seq->pending_copies.size(), 1u);
  EXPECT_EQ(seq->pending_copies[0].src_page, 6);
}

TEST(LeaseMaintenanceTest, PreemptionVictimAndPrefillCommitTarget) {
  std::vector<std::unique_ptr<Sequence>> running;
  for (int i = 0; i < 4; ++i) {
    running.push_back(Seq(10, 10, 12));
    running.back()->admission_order = 10 + i;
  }
  running[0]->priority = 1;
  running[3]->priority = 1;
  // Lowest priority, newest among them.
  EXPECT_EQ(PickPreemptionVictim(running), running[2].get());

  running[0]->disable_prefix_cache = true;
  running[1]->pending_copies.push_back(PageCopy{1, 2, 3});
  running[2]->prefill_committed = true;
  EXPECT_EQ(PickPrefillCommit(running), running[3].get());
  running[3]->num_computed = 5;  // Still in prefill.
  EXPECT_EQ(PickPrefillCommit(running), nullptr);
}

TEST(LeaseMaintenanceTest, CommitRequestAndRemappedTable) {
  auto seq = Seq(6, 4, 8);
  seq->lease_id = 17;
  v1::CommitRequest request = CommitRequestFor(*seq, /*keep_lease=*/true);
  EXPECT_EQ(request.lease_id(), 17u);
  EXPECT_TRUE(request.keep_lease());
  EXPECT_EQ(
      std::vector<int32_t>(request.tokens().begin(), request.tokens().end()),
      (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_FALSE(CommitRequestFor(*seq, false).keep_lease());

  v1::CommitResponse committed;
  for (int i = 0; i < 8; ++i)
    committed.add_kv_indices(i < 3 ? 900 + i : 100 + i);
  absl::StatusOr<int64_t> remapped = ApplyPrefillCommit(committed, seq.get());
  ASSERT_TRUE(remapped.ok());
  EXPECT_EQ(*remapped, 3);
  EXPECT_EQ(seq->kv_indices,
            (std::vector<int64_t>{900, 901, 902, 103, 104, 105, 106, 107}));
  committed.mutable_kv_indices()->RemoveLast();
  EXPECT_EQ(ApplyPrefillCommit(committed, seq.get()).status(),
            absl::InternalError("cache service returned a remapped table of 7 "
                                "slots for a lease of 8"));
  EXPECT_EQ(seq->kv_indices[0], 900);
}

}  // namespace
}  // namespace radixkv::worker
