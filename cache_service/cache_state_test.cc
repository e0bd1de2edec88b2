// Fixed cases (insert, lock and split; scrambled release; evict all; paged
// reuse), error paths with state-unchanged checks, snapshot round trips and the
// paged copy-on-write paths of CacheState.
#include "cache_service/cache_state.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cache_service/cache_state_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::Acq;
using testing::Concat;
using testing::kNow;
using testing::Range;
using testing::Worker;

class CacheStateTest : public testing::CacheStateTestBase {
 protected:
  // Every "lock_ref=N" in the dump.
  std::vector<int> LockRefs() {
    std::vector<int> refs;
    const std::string dump = state_.CanonicalDump();
    for (size_t pos = dump.find("lock_ref="); pos != std::string::npos;
         pos = dump.find("lock_ref=", pos + 1)) {
      refs.push_back(std::stoi(dump.substr(pos + 9)));
    }
    return refs;
  }
};

// (a) insert [1..8]; match and lock [1..4]; insert [1,2,3,4,9]; unlock ->
// every lock_ref is 0 and evictable == total tree tokens.
TEST_F(CacheStateTest,
       CaseA_SplitUnderLockThenUnlockLeavesEverythingEvictable) {
  Register(Worker("w", 64, 1));
  Store("w", Range(1, 8));
  const AcquireResult locked = MustAcquire(Acq("w", {1, 2, 3, 4, 100}));
  EXPECT_EQ(locked.prefix_len, 4);
  // Only the matched prefix is locked (background.md §2.3): the edge is split
  // at the match point, [1..4] locked, [5..8] unlocked and still evictable.
  EXPECT_THAT(LockRefs(), ElementsAre(1, 0));
  {
    const WorkerStats s = StatsOf("w");
    EXPECT_EQ(s.protected_slots, 5);  // [1..4] shared + the lease's 1 slot
    EXPECT_EQ(s.evictable_slots, 4);  // [5..8]
    EXPECT_EQ(s.free_slots, 64 - 9);
  }
  Store("w", {1, 2, 3, 4, 9});
  // [1..4] locked; [5..8] and [9] unlocked.
  EXPECT_THAT(LockRefs(), ElementsAre(1, 0, 0));
  ASSERT_TRUE(state_.Release(locked.lease_id, kNow).ok());
  ExpectInvariants();
  EXPECT_THAT(LockRefs(), ElementsAre(0, 0, 0));
  const WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.cached_tokens, 9);
  EXPECT_EQ(s.evictable_slots, 9);
  EXPECT_EQ(s.protected_slots, 0);
  EXPECT_EQ(s.free_slots, 64 - 9);
  EXPECT_EQ(state_.ResidentSequences("m", "", "w").value(),
            (std::vector<std::vector<int32_t>>{{1, 2, 3, 4, 5, 6, 7, 8},
                                               {1, 2, 3, 4, 9}}));
}

// (b) split while a lease is held, release leases in a scrambled order,
// insert duplicates -> free + evictable + protected == capacity each step.
TEST_F(CacheStateTest, CaseB_ScrambledReleasesAndDuplicatesStayBalanced) {
  Register(Worker("w", 256, 1));
  Store("w", Range(10, 40));
  ExpectBalanced("w");
  std::vector<uint64_t> leases;
  const std::vector<std::vector<int32_t>> prompts = {
      Concat(Range(10, 20), {7, 7}),         // splits at 11 tokens
      Concat(Range(10, 15), {8}),            // splits at 6
      Concat(Range(10, 40), {9, 9, 9}),      // full match + tail
      Range(10, 40),                         // duplicate of the cached run
      Concat(Range(10, 12), Range(50, 60)),  // splits at 3
  };
  for (const auto& prompt : prompts) {
    const AcquireResult a = MustAcquire(Acq("w", prompt, 4));
    leases.push_back(a.lease_id);
    ExpectBalanced("w");
  }
  // Commit two of them (inserting duplicates of what is cached), keep one.
  MustCommit(leases[3], Range(10, 40));  // all duplicate
  ExpectBalanced("w");
  const CommitResult kept = MustCommit(leases[0], prompts[0], true);
  EXPECT_EQ(kept.inserted_tokens, 2);
  ExpectBalanced("w");
  for (size_t i : {4, 0, 2, 1}) {
    ASSERT_TRUE(state_.Release(leases[i], kNow).ok());
    ExpectBalanced("w");
  }
  // Duplicates of everything: nothing new is inserted, nothing leaks.
  for (const auto& prompt : prompts) {
    const AcquireResult a = MustAcquire(Acq("w", prompt));
    const CommitResult c = MustCommit(a.lease_id, prompt);
    ExpectBalanced("w");
    (void)c;
  }
  const WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.protected_slots, 0);
  EXPECT_EQ(s.active_leases, 0);
  EXPECT_EQ(s.evictable_slots, s.cached_tokens);
  EXPECT_THAT(LockRefs(), ::testing::Each(0));
}

// (c) store [A,B,C,D] and [A,B,E,F], evict everything -> only the root left.
TEST_F(CacheStateTest, CaseC_EvictEverythingShrinksToRoot) {
  Register(Worker("w", 64, 1));
  Store("w", {1, 2, 3, 4});
  Store("w", {1, 2, 5, 6});
  StatsResult before = state_.Stats("", kNow).value();
  EXPECT_EQ(before.tree_nodes, 3);
  EXPECT_EQ(before.tree_tokens, 6);
  absl::StatusOr<EvictResult> evicted = state_.Evict("w", 64, kNow);
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->evicted_tokens, 6);
  ExpectInvariants();
  const StatsResult after = state_.Stats("", kNow).value();
  EXPECT_EQ(after.tree_nodes, 0);
  EXPECT_EQ(after.trees, 0);
  EXPECT_EQ(after.workers[0].free_slots, 64);
  EXPECT_EQ(after.workers[0].cached_tokens, 0);
  EXPECT_TRUE(state_.ResidentSequences("m", "", "w").value().empty());
  EXPECT_EQ(state_.CanonicalDump().find("tree "), std::string::npos);
}

// (d) the same 32-token prompt three times with page_size 16 -> the third
// request reuses every reusable token (31: one is always recomputed), 15 of
// them through a partial-page copy; page-granular reuse would give 16.
TEST_F(CacheStateTest, CaseD_SamePromptThreeTimesPageSize16) {
  Register(Worker("w", 256, 16));
  const std::vector<int32_t> prompt = Range(100, 131);
  const AcquireResult first = MustAcquire(Acq("w", prompt));
  EXPECT_EQ(first.prefix_len, 0);
  EXPECT_TRUE(first.copy_ops.empty());
  MustCommit(first.lease_id, prompt);
  AcquireResult last;
  for (int turn = 2; turn <= 3; ++turn) {
    last = MustAcquire(Acq("w", prompt));
    EXPECT_EQ(last.matched_tokens, 32);
    EXPECT_EQ(last.prefix_len, 31);
    EXPECT_EQ(last.page_aligned_prefix_len, 16);
    // Page 0 is shared; page 1's first 15 tokens are copied to a fresh page.
    EXPECT_EQ(std::vector<int64_t>(last.kv_indices.begin(),
                                   last.kv_indices.begin() + 16),
              std::vector<int64_t>(first.kv_indices.begin(),
                                   first.kv_indices.begin() + 16));
    ASSERT_EQ(last.copy_ops.size(), 1u);
    EXPECT_EQ(last.copy_ops[0].src_page, first.kv_indices[16] / 16);
    EXPECT_EQ(last.copy_ops[0].dst_page, last.kv_indices[16] / 16);
    EXPECT_NE(last.copy_ops[0].dst_page, last.copy_ops[0].src_page);
    EXPECT_EQ(last.copy_ops[0].num_tokens, 15);
    const CommitResult c = MustCommit(last.lease_id, prompt);
    EXPECT_EQ(c.inserted_tokens, 0);
    EXPECT_EQ(c.freed_slots, 16);  // the copied page duplicates the tree
  }
  const MatchResult m =
      state_.Match(MatchRequest{"m", "", prompt}, kNow).value();
  ASSERT_EQ(m.workers.size(), 1u);
  EXPECT_EQ(m.workers[0].matched_tokens, 32);
  EXPECT_EQ(m.workers[0].page_aligned_tokens, 32);
  const WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.prefix_hit_tokens, 62);
  EXPECT_EQ(s.free_slots, 256 - 32);
}

TEST_F(CacheStateTest, MatchReportsEveryWorkerOfTheModel) {
  Register(Worker("b", 64, 8));
  Register(Worker("a", 64, 1));
  Register(Worker("other", 64, 1, 1, "other-model"));
  Store("a", Range(1, 20));
  Store("b", Range(1, 11));
  Store("b", {1, 2, 3, 50});
  const MatchResult m =
      state_.Match(MatchRequest{"m", "", Concat(Range(1, 12), {77})}, kNow)
          .value();
  ASSERT_EQ(m.workers.size(), 2u);
  EXPECT_EQ(m.workers[0].worker_id, "a");
  EXPECT_EQ(m.workers[0].matched_tokens, 12);
  EXPECT_EQ(m.workers[0].page_aligned_tokens, 12);
  EXPECT_EQ(m.workers[1].worker_id, "b");
  EXPECT_EQ(m.workers[1].matched_tokens, 11);
  EXPECT_EQ(m.workers[1].page_aligned_tokens, 8);
  // Another salt is another tree.
  const MatchResult salted =
      state_.Match(MatchRequest{"m", "salt", Range(1, 12)}, kNow).value();
  EXPECT_EQ(salted.workers[0].matched_tokens, 0);
  EXPECT_EQ(salted.workers[1].matched_tokens, 0);
}

TEST_F(CacheStateTest, EvictionFollowsLruAndSkipsLockedPaths) {
  Register(Worker("w", 12, 1));
  Store("w", {1, 2, 3, 4});  // t = kNow for all; lease ids order the ties
  AcquireResult a = MustAcquire(Acq("w", {5, 6, 7, 8}));
  MustCommit(a.lease_id, {5, 6, 7, 8});
  // Touch [1..4] later so [5..8] is the LRU leaf.
  a = state_.Acquire(Acq("w", {1, 2, 3, 4, 9}), kNow + 10).value();
  ASSERT_TRUE(state_.Release(a.lease_id, kNow + 10).ok());
  // Lock [1,2,3] and ask for more room than is free: [5..8] goes first.
  const AcquireResult locked = MustAcquire(Acq("w", {1, 2, 3, 4}));
  const AcquireResult big = MustAcquire(Acq("w", {20, 21, 22, 23, 24, 25}));
  EXPECT_EQ(big.evicted_tokens, 4);
  EXPECT_EQ(state_.ResidentSequences("m", "", "w").value(),
            (std::vector<std::vector<int32_t>>{{1, 2, 3, 4}}));
  // Nothing else can be evicted: [1..4] is locked.
  absl::StatusOr<AcquireResult> none =
      state_.Acquire(Acq("w", {30, 31, 32, 33}), kNow);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(state_.Release(locked.lease_id, kNow).ok());
  ASSERT_TRUE(state_.Release(big.lease_id, kNow).ok());
  ExpectInvariants();
}

TEST_F(CacheStateTest, ForkSharesPagesAndGrowCopiesOnWrite) {
  Register(Worker("w", 128, 8));
  const std::vector<int32_t> prompt = Range(1, 12);  // 1.5 pages
  const AcquireResult parent = MustAcquire(Acq("w", prompt));
  ASSERT_EQ(parent.kv_indices.size(), 12u);
  const ForkResult fork =
      state_.Fork(ForkRequest{parent.lease_id, 2, 12}, kNow).value();
  ExpectInvariants();
  ASSERT_EQ(fork.children.size(), 2u);
  for (const ForkedLease& child : fork.children) {
    EXPECT_EQ(child.kv_indices, parent.kv_indices);
  }
  // The shared last page is partly filled: the child's Grow copies it.
  const GrowResult grown =
      state_.Grow(GrowRequest{fork.children[0].lease_id, 1}, kNow).value();
  ExpectInvariants();
  ASSERT_EQ(grown.copy_ops.size(), 1u);
  EXPECT_EQ(grown.copy_ops[0].src_page, parent.kv_indices[8] / 8);
  EXPECT_EQ(grown.copy_ops[0].num_tokens, 4);
  EXPECT_EQ(grown.first_remapped_position, 8);
  ASSERT_EQ(grown.remapped_kv_indices.size(), 4u);
  EXPECT_EQ(grown.remapped_kv_indices[0], grown.copy_ops[0].dst_page * 8);
  EXPECT_EQ(grown.kv_indices.size(), 4u);  // to the end of the page
  EXPECT_EQ(grown.kv_indices[0], grown.copy_ops[0].dst_page * 8 + 4);
  // The second child now shares the page only with the parent: still copies.
  const GrowResult grown2 =
      state_.Grow(GrowRequest{fork.children[1].lease_id, 9}, kNow).value();
  EXPECT_EQ(grown2.copy_ops.size(), 1u);
  EXPECT_EQ(grown2.kv_indices.size(), 12u);  // 4 + one whole page
  // The parent is the last holder: it writes in place.
  const GrowResult grown3 =
      state_.Grow(GrowRequest{parent.lease_id, 2}, kNow).value();
  EXPECT_TRUE(grown3.copy_ops.empty());
  EXPECT_EQ(grown3.first_remapped_position, -1);
  EXPECT_EQ(grown3.kv_indices[0], parent.kv_indices[11] + 1);
  for (uint64_t id : {parent.lease_id, fork.children[0].lease_id,
                      fork.children[1].lease_id}) {
    ASSERT_TRUE(state_.Release(id, kNow).ok());
  }
  ExpectInvariants();
  EXPECT_EQ(StatsOf("w").free_slots, 128);
}

TEST_F(CacheStateTest, ForkFanOutIsBoundedByLeasePageReferences) {
  Register(Worker("w", 64, 1));
  const AcquireResult parent = MustAcquire(Acq("w", Range(1, 64)));
  // Each call adds 64 children x 64 page references; the limit is 2^20.
  const int forks = ((1 << 20) - 64) / (64 * 64);
  for (int i = 0; i < forks; ++i) {
    ASSERT_TRUE(state_.Fork(ForkRequest{parent.lease_id, 64, 64}, kNow).ok())
        << i;
  }
  const std::string before = state_.CanonicalDump();
  const absl::StatusOr<ForkResult> fork =
      state_.Fork(ForkRequest{parent.lease_id, 64, 64}, kNow);
  EXPECT_EQ(fork.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fork.status().message()), HasSubstr("limit"));
  EXPECT_EQ(state_.CanonicalDump(), before);
  ExpectInvariants();
  EXPECT_EQ(StatsOf("w").active_leases, 1 + 64 * forks);
}

TEST_F(CacheStateTest, GrowRoundsToChunksWithPageSizeOne) {
  Register(Worker("w", 128, 1));
  const AcquireResult a = MustAcquire(Acq("w", {1, 2, 3}));
  const GrowResult g = state_.Grow(GrowRequest{a.lease_id, 5}, kNow).value();
  EXPECT_EQ(g.kv_indices.size(), 16u);
  EXPECT_TRUE(g.copy_ops.empty());
  ExpectInvariants();
}

TEST_F(CacheStateTest, CommitWithKeepLeaseRemapsDuplicatePages) {
  Register(Worker("w", 256, 8));
  const std::vector<int32_t> base = Range(1, 20);
  Store("w", base);
  // A no-cache baseline lease computes the same tokens again.
  AcquireRequest req = Acq("w", Concat(base, {99}), 11);
  req.disable_match = true;
  const AcquireResult a = MustAcquire(req);
  EXPECT_EQ(a.prefix_len, 0);
  const CommitResult c = MustCommit(a.lease_id, Concat(base, {99}), true);
  EXPECT_EQ(c.inserted_tokens, 1);
  EXPECT_EQ(c.freed_slots, 16);  // two whole duplicated pages
  ASSERT_EQ(c.kv_indices.size(), a.kv_indices.size());
  const AcquireResult again = MustAcquire(Acq("w", Concat(base, {99, 5})));
  EXPECT_EQ(again.prefix_len, 21);
  for (int p = 0; p < 16; ++p) EXPECT_EQ(c.kv_indices[p], again.kv_indices[p]);
  // Positions 16.. stay in the lease's own page (it keeps writing there).
  EXPECT_EQ(c.kv_indices[16], a.kv_indices[16]);
  // The kept lease can commit again, extending its new prompt.
  const CommitResult c2 =
      MustCommit(a.lease_id, Concat(base, {99, 42, 43}), false);
  EXPECT_EQ(c2.inserted_tokens, 2);
  ASSERT_TRUE(state_.Release(again.lease_id, kNow).ok());
  ExpectInvariants();
}

TEST_F(CacheStateTest, NewEpochWipesWorkerAndDeadWorkersAreDropped) {
  Register(Worker("w", 64, 1));
  Register(Worker("v", 64, 1));
  Store("w", {1, 2, 3});
  Store("v", {1, 2, 3});
  const AcquireResult held = MustAcquire(Acq("w", {1, 2, 3, 4}));
  absl::StatusOr<RegisterWorkerResult> r =
      state_.RegisterWorker(Worker("w", 64, 1, 2), kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->wiped_previous_epoch);
  EXPECT_EQ(r->released_leases, 1);
  ExpectInvariants();
  EXPECT_EQ(state_.Release(held.lease_id, kNow).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(state_.ResidentSequences("m", "", "w").value().empty());
  EXPECT_EQ(state_.ResidentSequences("m", "", "v").value().size(), 1u);
  // v keeps heartbeating, w does not.
  const int64_t later = kNow + state_.options().heartbeat_timeout_ms + 1;
  ASSERT_TRUE(state_.Heartbeat(HeartbeatRequest{"v", 1, {}, {}}, later).ok());
  const DropResult dropped = state_.DropDeadWorkers(later);
  EXPECT_THAT(dropped.dropped_worker_ids, ElementsAre("w"));
  ExpectInvariants();
  EXPECT_EQ(state_.Stats("", later)->workers.size(), 1u);
}

// Liveness counts only time the service ran: a pause it credits (its
// process stopped for 8 s, more than the 10 s timeout minus the 3 s since
// the last heartbeat) moves every heartbeat and lease expiry later.
TEST_F(CacheStateTest, ACreditedPauseDoesNotCountAgainstWorkersOrLeases) {
  const int64_t timeout = state_.options().heartbeat_timeout_ms;  // 10 s
  const int64_t ttl = state_.options().lease_ttl_ms;              // 30 s
  Register(Worker("w", 64, 1));
  const AcquireResult held = MustAcquire(Acq("w", {1, 2, 3}));
  const int64_t resumed = kNow + 3'000 + 8'000;
  state_.CreditServicePause(8'000, resumed);
  ExpectInvariants();
  EXPECT_TRUE(state_.DropDeadWorkers(resumed).dropped_worker_ids.empty());
  EXPECT_EQ(state_.Stats("w", resumed)->workers[0].heartbeat_age_ms, 3'000);
  // Dropped once the service has run a whole timeout without hearing it.
  EXPECT_TRUE(state_.DropDeadWorkers(kNow + 8'000 + timeout)
                  .dropped_worker_ids.empty());
  EXPECT_TRUE(state_.ExpireLeases(kNow + ttl).expired.empty());
  EXPECT_EQ(state_.ExpireLeases(kNow + 8'000 + ttl).expired.size(), 1u);
  EXPECT_THAT(
      state_.DropDeadWorkers(kNow + 8'000 + timeout + 1).dropped_worker_ids,
      ElementsAre("w"));
  ExpectInvariants();
  EXPECT_EQ(held.lease_id, 1u);
}

TEST_F(CacheStateTest, ACreditNeverMovesAHeartbeatPastNow) {
  Register(Worker("w", 64, 1));
  state_.CreditServicePause(60'000, kNow + 1'000);
  EXPECT_EQ(state_.Stats("w", kNow + 1'000)->workers[0].heartbeat_age_ms, 0);
  const std::string dump = state_.CanonicalDump();
  state_.CreditServicePause(0, kNow + 5'000);
  state_.CreditServicePause(-3, kNow + 5'000);
  EXPECT_EQ(state_.CanonicalDump(), dump);
}

// After a rebuild the residency of a worker that has not confirmed its
// epoch is not reported (the process may be new, its pool empty); a
// heartbeat or a same-epoch Register confirms it. Not logical state.
TEST_F(CacheStateTest, UnconfirmedWorkersMatchNothingUntilTheyHeartbeat) {
  Register(Worker("a", 64, 1));
  Register(Worker("b", 64, 1));
  Store("a", Range(1, 10));
  Store("b", Range(1, 10));
  const std::string dump = state_.CanonicalDump();
  state_.MarkWorkersUnconfirmed();
  EXPECT_EQ(state_.CanonicalDump(), dump);
  auto match = [&] {
    return state_.Match(MatchRequest{"m", "", Range(1, 12)}, kNow)->workers;
  };
  for (const WorkerMatch& w : match()) {
    EXPECT_TRUE(w.unconfirmed);
    EXPECT_EQ(w.matched_tokens, 0);
    EXPECT_EQ(w.page_aligned_tokens, 0);
    EXPECT_EQ(w.cached_tokens, 10);  // memory state is still reported
  }
  EXPECT_TRUE(StatsOf("a").unconfirmed);
  ASSERT_TRUE(state_.Heartbeat(HeartbeatRequest{"a", 1, {}, {}}, kNow).ok());
  ASSERT_TRUE(state_.RegisterWorker(Worker("b", 64, 1), kNow).ok());
  for (const WorkerMatch& w : match()) {
    EXPECT_FALSE(w.unconfirmed) << w.worker_id;
    EXPECT_EQ(w.matched_tokens, 10) << w.worker_id;
  }
  // A new epoch registers confirmed (and without residency).
  state_.MarkWorkersUnconfirmed();
  ASSERT_TRUE(state_.RegisterWorker(Worker("a", 64, 1, 2), kNow).ok());
  EXPECT_FALSE(match()[0].unconfirmed);
  EXPECT_EQ(match()[0].matched_tokens, 0);
  EXPECT_TRUE(match()[1].unconfirmed);
}

TEST_F(CacheStateTest, LeasesExpireUnlessRenewed) {
  Register(Worker("w", 64, 1));
  const AcquireResult a = MustAcquire(Acq("w", {1, 2, 3}));
  const AcquireResult b = MustAcquire(Acq("w", {4, 5, 6}));
  const int64_t ttl = state_.options().lease_ttl_ms;
  const HeartbeatResult hb =
      state_
          .Heartbeat(HeartbeatRequest{"w", 1, {}, {b.lease_id, 999}},
                     kNow + ttl / 2)
          .value();
  EXPECT_THAT(hb.lost_lease_ids, ElementsAre(999));
  // a is past its TTL: calls on it fail without changing anything.
  const std::string dump = state_.CanonicalDump();
  EXPECT_EQ(
      state_.Commit(CommitRequest{a.lease_id, {1, 2, 3}, false}, kNow + ttl)
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(state_.CanonicalDump(), dump);
  const ExpireResult expired = state_.ExpireLeases(kNow + ttl);
  ASSERT_EQ(expired.expired.size(), 1u);
  EXPECT_EQ(expired.expired[0].lease_id, a.lease_id);
  EXPECT_EQ(expired.expired[0].worker_id, "w");
  ExpectInvariants();
  EXPECT_EQ(state_.Stats("", kNow + ttl)->expired_leases_total, 1);
  EXPECT_EQ(state_.ExpireLeases(kNow + ttl + ttl / 2).expired.size(), 1u);
  EXPECT_EQ(StatsOf("w").free_slots, 64);
}

// ---- locking only the matched prefix (background.md §2.3-§2.4) ----

// Adversarial repro: a match ending inside a long cached edge locks only the
// matched prefix; the rest of the edge is evicted to make room.
TEST_F(CacheStateTest, AcquireLocksOnlyTheMatchedPrefixOfAnEdge) {
  Register(Worker("w", 256, 16));
  Store("w", Range(1, 200));
  WorkerStats s = StatsOf("w");
  ASSERT_EQ(s.free_slots, 48);
  ASSERT_EQ(s.evictable_slots, 208);
  const AcquireResult a = MustAcquire(Acq("w", Concat({1}, Range(501, 599))));
  EXPECT_EQ(a.prefix_len, 1);
  EXPECT_EQ(a.matched_tokens, 1);
  ASSERT_EQ(a.copy_ops.size(), 1u);
  EXPECT_EQ(a.copy_ops[0].src_page, 0);  // the page holding token 1
  EXPECT_EQ(a.copy_ops[0].num_tokens, 1);
  EXPECT_EQ(a.evicted_tokens, 199);  // [2..200], the unlocked rest
  s = StatsOf("w");
  EXPECT_EQ(s.cached_tokens, 1);
  EXPECT_EQ(s.protected_slots, 128);  // page 0 (locked [1]) + 7 lease pages
  EXPECT_EQ(s.free_slots, 128);
  EXPECT_EQ(s.evictable_slots, 0);
  EXPECT_THAT(LockRefs(), ElementsAre(1));
  MustCommit(a.lease_id, Concat({1}, Range(501, 599)));
  ExpectBalanced("w");
  EXPECT_EQ(StatsOf("w").cached_tokens, 100);
}

// The largest request that fits exactly, and one page more: the error gives
// the numbers that were really available (the lock's page excluded) and
// changes nothing.
TEST_F(CacheStateTest, AcquireRoomIsCountedAsIfOnlyThePrefixWereLocked) {
  Register(Worker("w", 256, 16));
  Store("w", Range(1, 200));
  const std::string dump = state_.CanonicalDump();
  // 1 cached token + 256 new: 17 pages; 3 free + 13 evictable - page 0
  // (locked with the prefix) = 15 pages.
  const absl::StatusOr<AcquireResult> too_big =
      state_.Acquire(Acq("w", Concat({1}, Range(300, 555))), kNow);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("needs 272 slots for 257 tokens (1 cached) + reserve 0 "
                        "but only 240 are free or evictable"));
  EXPECT_EQ(state_.CanonicalDump(), dump);
  ExpectInvariants();
  // 240 tokens = 15 pages: exactly what is obtainable.
  const AcquireResult a = MustAcquire(Acq("w", Concat({1}, Range(300, 538))));
  EXPECT_EQ(a.prefix_len, 1);
  EXPECT_EQ(a.evicted_tokens, 199);
  const WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.free_slots, 0);
  EXPECT_EQ(s.evictable_slots, 0);
  EXPECT_EQ(s.protected_slots, 256);
}

// End to end: Generate([BOS], max_new_tokens = pool - 1) fills the pool with
// one edge; afterwards every BOS-prefixed prompt must still be admitted
// (without needing Flush).
TEST_F(CacheStateTest, FullPoolSingleEdgeStillAdmitsBosPrefixedPrompts) {
  for (const int32_t page_size : {1, 16}) {
    SCOPED_TRACE(page_size);
    state_ = CacheState();
    Register(Worker("w", 2048, page_size));
    const AcquireResult gen = MustAcquire(Acq("w", {1}, /*reserve=*/2047));
    ASSERT_EQ(gen.kv_indices.size(), 2048u);
    std::vector<int32_t> generated = {1};  // BOS + 2047 tokens, ids < 1000
    for (int32_t i = 0; i < 2047; ++i) generated.push_back(2 + i % 997);
    MustCommit(gen.lease_id, generated);
    WorkerStats s = StatsOf("w");
    ASSERT_EQ(s.free_slots, 0);
    ASSERT_EQ(s.evictable_slots, 2048);
    for (int i = 0; i < 3; ++i) {
      const std::vector<int32_t> prompt = {1, 700 + i, 800 + i};
      const AcquireResult a = MustAcquire(Acq("w", prompt));
      EXPECT_EQ(a.prefix_len, 1);
      // The first one evicts the 2047 tokens after BOS.
      EXPECT_EQ(a.evicted_tokens, i == 0 ? 2047 : 0);
      MustCommit(a.lease_id, prompt);
    }
    s = StatsOf("w");
    EXPECT_EQ(s.cached_tokens, 1 + 3 * 2);
    EXPECT_EQ(s.protected_slots, 0);
    ExpectBalanced("w");
  }
}

// Commit(keep_lease) locks exactly the committed tokens even when they end
// inside a cached edge, so Grow can evict the rest of that edge; Grow's
// error reports what is really available.
TEST_F(CacheStateTest, KeepLeaseCommitLocksOnlyCommittedTokensForGrow) {
  Register(Worker("w", 256, 16));
  Store("w", Range(1, 200));
  const AcquireResult a = MustAcquire(Acq("w", {1, 2, 3}));
  ASSERT_EQ(a.prefix_len, 2);
  const CommitResult c = MustCommit(a.lease_id, {1, 2, 3}, /*keep=*/true);
  EXPECT_EQ(c.inserted_tokens, 0);
  WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.free_slots, 32);        // 3 pages - the lease's copy page
  EXPECT_EQ(s.evictable_slots, 192);  // pages 1..12 ([4..200])
  EXPECT_EQ(s.protected_slots, 32);   // page 0 (locked [1..3]) + lease page
  const std::string dump = state_.CanonicalDump();
  // 3 + 300 -> 304 slots = 19 pages, 18 new > 2 free + 12 evictable.
  const absl::StatusOr<GrowResult> too_big =
      state_.Grow(GrowRequest{a.lease_id, 300}, kNow);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("needs 288 slots but only 224 are free or evictable"));
  EXPECT_EQ(state_.CanonicalDump(), dump);
  absl::StatusOr<GrowResult> g =
      state_.Grow(GrowRequest{a.lease_id, 200}, kNow);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->kv_indices.size(), 205u);  // up to 208 = 13 pages
  EXPECT_EQ(g->evicted_tokens, 197);      // [4..200]
  EXPECT_TRUE(g->copy_ops.empty());
  ExpectBalanced("w");
  s = StatsOf("w");
  EXPECT_EQ(s.free_slots, 32);
  EXPECT_EQ(s.protected_slots, 224);
  EXPECT_EQ(s.cached_tokens, 3);
}

// Grow's copy-on-write page is not required when the other holders of the
// lease's partly filled last page are only unlocked tree nodes: evicting
// them lets the lease write in place.
TEST_F(CacheStateTest, GrowEvictsUnlockedCoHoldersInsteadOfCopying) {
  Register(Worker("w", 32, 16));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  const AcquireResult parent = MustAcquire(Acq("w", prompt));
  ASSERT_EQ(parent.prefix_len, 0);
  absl::StatusOr<ForkResult> f =
      state_.Fork(ForkRequest{parent.lease_id, 1, 5}, kNow);
  ASSERT_TRUE(f.ok()) << f.status();
  // The child's commit puts the shared page into the tree, unlocked.
  MustCommit(f->children[0].lease_id, prompt);
  WorkerStats s = StatsOf("w");
  ASSERT_EQ(s.free_slots, 16);
  ASSERT_EQ(s.evictable_slots, 0);  // the page is protected by the parent
  ASSERT_EQ(s.cached_tokens, 5);
  const std::string dump = state_.CanonicalDump();
  // 5 + 28 -> 48 slots = 3 pages: 2 new > 1 free, no change.
  const absl::StatusOr<GrowResult> too_big =
      state_.Grow(GrowRequest{parent.lease_id, 28}, kNow);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("needs 32 slots but only 16 are free or evictable"));
  EXPECT_EQ(state_.CanonicalDump(), dump);
  // 5 + 20 -> 32 slots: one new page; the copy is avoided by evicting [1..5].
  absl::StatusOr<GrowResult> g =
      state_.Grow(GrowRequest{parent.lease_id, 20}, kNow);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->copy_ops.empty());
  EXPECT_EQ(g->first_remapped_position, -1);
  EXPECT_EQ(g->evicted_tokens, 5);
  EXPECT_EQ(g->kv_indices.size(), 27u);
  ExpectBalanced("w");
  s = StatsOf("w");
  EXPECT_EQ(s.free_slots, 0);
  EXPECT_EQ(s.protected_slots, 32);
  EXPECT_EQ(s.cached_tokens, 0);
}

// A forked child locks only its own prefix: once the parent ends, the rest
// of the parent's prefix is evictable again.
TEST_F(CacheStateTest, ForkChildLocksOnlyItsPrefix) {
  Register(Worker("w", 256, 16));
  Store("w", Range(1, 200));
  const AcquireResult parent =
      MustAcquire(Acq("w", Concat(Range(1, 100), {900})));
  ASSERT_EQ(parent.prefix_len, 100);
  absl::StatusOr<ForkResult> f =
      state_.Fork(ForkRequest{parent.lease_id, 1, 20}, kNow);
  ASSERT_TRUE(f.ok()) << f.status();
  ExpectInvariants();
  ASSERT_TRUE(state_.Release(parent.lease_id, kNow).ok());
  ExpectBalanced("w");
  const WorkerStats s = StatsOf("w");
  EXPECT_EQ(s.protected_slots, 32);   // pages 0, 1 ([1..20] and the child)
  EXPECT_EQ(s.evictable_slots, 176);  // pages 2..12
  EXPECT_EQ(s.free_slots, 48);
  EXPECT_THAT(LockRefs(), ElementsAre(1, 0, 0));
  ASSERT_TRUE(state_.Release(f->children[0].lease_id, kNow).ok());
  ExpectBalanced("w");
  EXPECT_EQ(StatsOf("w").evictable_slots, 208);
}

// ---- error paths: code, message, and no state change ----

class ErrorPathTest : public CacheStateTest {
 protected:
  void SetUp() override {
    Register(Worker("w", 32, 8));
    Store("w", Range(1, 10));
    lease_ = MustAcquire(Acq("w", Concat(Range(1, 10), {70, 71}), 3));
    dump_ = state_.CanonicalDump();
  }
  template <typename T>
  void ExpectError(const absl::StatusOr<T>& result, absl::StatusCode code,
                   const std::string& message_part) {
    EXPECT_EQ(result.status().code(), code) << result.status();
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr(message_part));
    EXPECT_EQ(state_.CanonicalDump(), dump_);
    ExpectInvariants();
  }
  AcquireResult lease_;
  std::string dump_;
};

TEST_F(ErrorPathTest, Register) {
  using C = absl::StatusCode;
  ExpectError(state_.RegisterWorker(Worker("", 32, 8), kNow),
              C::kInvalidArgument, "worker_id");
  ExpectError(state_.RegisterWorker(Worker("x", 32, 7), kNow),
              C::kInvalidArgument, "page_size");
  ExpectError(state_.RegisterWorker(Worker("x", 36, 8), kNow),
              C::kInvalidArgument, "capacity_slots");
  ExpectError(state_.RegisterWorker(Worker("x", 0, 1), kNow),
              C::kInvalidArgument, "capacity_slots");
  ExpectError(state_.RegisterWorker(Worker("x", 32, 8, 1, ""), kNow),
              C::kInvalidArgument, "model");
  ExpectError(state_.RegisterWorker(Worker("w", 32, 8, 0), kNow),
              C::kFailedPrecondition, "older");
  ExpectError(state_.RegisterWorker(Worker("w", 64, 8, 1), kNow),
              C::kFailedPrecondition, "another shape");
  EXPECT_TRUE(state_.RegisterWorker(Worker("w", 32, 8, 1), kNow).ok());
}

TEST_F(ErrorPathTest, HeartbeatAndDeregister) {
  using C = absl::StatusCode;
  ExpectError(state_.Heartbeat(HeartbeatRequest{"nope", 1, {}, {}}, kNow),
              C::kNotFound, "unknown worker");
  ExpectError(state_.Heartbeat(HeartbeatRequest{"w", 2, {}, {}}, kNow),
              C::kFailedPrecondition,
              "epoch 2 is newer than the registered epoch 1; re-register");
  ExpectError(state_.Heartbeat(HeartbeatRequest{"w", 0, {}, {}}, kNow),
              C::kFailedPrecondition, "stale epoch 0 (registered 1)");
  // Negative load values are rejected before anything changes.
  for (int field = 0; field < 4; ++field) {
    WorkerLoad load{3, 2, 100, 50};
    switch (field) {
      case 0:
        load.running_requests = -1;
        break;
      case 1:
        load.waiting_requests = -1;
        break;
      case 2:
        load.outstanding_tokens = -1;
        break;
      case 3:
        load.available_slots = -1;
        break;
    }
    ExpectError(state_.Heartbeat(HeartbeatRequest{"w", 1, load, {}}, kNow + 5),
                C::kInvalidArgument, "must be >= 0");
    const absl::StatusOr<MatchResult> m =
        state_.Match(MatchRequest{"m", "", {1}}, kNow);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->workers.at(0).load, WorkerLoad{}) << field;
  }

  ExpectError(state_.DeregisterWorker("nope", 1, kNow), C::kNotFound,
              "unknown worker");
  ExpectError(state_.DeregisterWorker("w", 0, kNow), C::kFailedPrecondition,
              "stale epoch 0 (registered 1)");
  ExpectError(state_.DeregisterWorker("w", 5, kNow), C::kFailedPrecondition,
              "epoch 5 is newer than the registered epoch 1; re-register");
  // Zero and positive load values are accepted and reach Match.
  ASSERT_TRUE(
      state_
          .Heartbeat(HeartbeatRequest{"w", 1, WorkerLoad{3, 2, 100, 0}, {}},
                     kNow)
          .ok());
  EXPECT_EQ(state_.Match(MatchRequest{"m", "", {1}}, kNow)->workers.at(0).load,
            (WorkerLoad{3, 2, 100, 0}));
}

// The metadata bounds of live Register and Commit calls, with the numbers.
TEST(CacheStateBoundsTest, RegisterBeyondTheBoundsIsResourceExhausted) {
  CacheOptions options;
  options.bounds.max_total_slots = 1000;
  options.bounds.max_workers = 2;
  CacheState state(options);
  ASSERT_TRUE(state.RegisterWorker(Worker("a", 600, 1), kNow).ok());
  const absl::Status over =
      state.CheckRegisterWithinBounds(Worker("b", 500, 1));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.message()),
              HasSubstr("capacity_slots 500 with the 600 slots other workers "
                        "have registered exceeds the service's limit of 1000 "
                        "slots (--max_total_slots"));
  EXPECT_TRUE(state.CheckRegisterWithinBounds(Worker("b", 392, 1)).ok());
  // A new epoch of "a" replaces its own 600 slots.
  EXPECT_TRUE(state.CheckRegisterWithinBounds(Worker("a", 1000, 1, 2)).ok());
  EXPECT_EQ(state.CheckRegisterWithinBounds(Worker("a", 1008, 8, 2)).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(state.RegisterWorker(Worker("b", 392, 1), kNow).ok());
  const absl::Status third = state.CheckRegisterWithinBounds(Worker("c", 8, 8));
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.message()),
              HasSubstr("2 workers are registered, the service's limit is 2 "
                        "(--max_workers)"));
  EXPECT_EQ(state.CheckRegisterWithinBounds(Worker("", 8, 8)).code(),
            absl::StatusCode::kInvalidArgument);
  // The operation itself (journal replay) does not apply the bounds.
  EXPECT_TRUE(state.RegisterWorker(Worker("c", 8, 8), kNow).ok());
}

TEST(CacheStateBoundsTest, CommitThatWouldAddATreeBeyondTheBoundIsRefused) {
  CacheOptions options;
  options.bounds.max_trees = 1;
  CacheState state(options);
  ASSERT_TRUE(state.RegisterWorker(Worker("a", 64, 1), kNow).ok());
  const AcquireResult first = state.Acquire(Acq("a", {1, 2}), kNow).value();
  AcquireRequest salted = Acq("a", {1, 2});
  salted.cache_salt = "tenant";
  const AcquireResult second = state.Acquire(salted, kNow).value();
  const CommitRequest first_commit{first.lease_id, {1, 2}};
  ASSERT_TRUE(state.CheckCommitWithinBounds(first_commit, kNow).ok());
  ASSERT_TRUE(state.Commit(first_commit, kNow).ok());
  const absl::Status refused = state.CheckCommitWithinBounds(
      CommitRequest{second.lease_id, {1, 2}}, kNow);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("to the 1 trees the service holds; the limit is 1 "
                        "(--max_trees)"));
  // Commits into an existing tree, and calls Commit refuses anyway, pass.
  const AcquireResult third = state.Acquire(Acq("a", {1, 2, 3}), kNow).value();
  EXPECT_TRUE(state
                  .CheckCommitWithinBounds(
                      CommitRequest{third.lease_id, {1, 2, 3}}, kNow)
                  .ok());
  EXPECT_TRUE(
      state.CheckCommitWithinBounds(CommitRequest{999, {1}}, kNow).ok());
}

// A pool whose page allocator cannot be allocated (address space limit in a
// child process) is RESOURCE_EXHAUSTED, and the previous epoch stays.
TEST(CacheStateBoundsTest, AllocatorOutOfMemoryKeepsThePreviousEpoch) {
  EXPECT_EXIT(
      {
        CacheState state;
        if (!state.RegisterWorker(Worker("w", 64, 1), kNow).ok()) _exit(10);
        state.Acquire(Acq("w", {1, 2, 3}), kNow).IgnoreError();
        const std::string before = state.CanonicalDump();
        if (!testing::LimitAddressSpace(int64_t{256} << 20)) _exit(11);
        // 2^26 pages x 12 bytes = 768 MiB.
        absl::StatusOr<RegisterWorkerResult> r =
            state.RegisterWorker(Worker("w", kMaxCapacitySlots, 1, 2), kNow);
        if (r.status().code() != absl::StatusCode::kResourceExhausted)
          _exit(12);
        if (r.status().message().find("out of memory") == std::string::npos) {
          _exit(13);
        }
        _exit(state.CanonicalDump() == before ? 0 : 14);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(ErrorPathTest, MatchAndAcquireValidation) {
  using C = absl::StatusCode;
  ExpectError(state_.Match(MatchRequest{"m", "", {}}, kNow),
              C::kInvalidArgument, "empty");
  ExpectError(state_.Match(MatchRequest{"m", "", {1, 1000}}, kNow),
              C::kInvalidArgument, "outside [0, 1000)");
  ExpectError(state_.Match(MatchRequest{"m", "", {-1}}, kNow),
              C::kInvalidArgument, "outside");
  ExpectError(state_.Match(MatchRequest{"m", std::string(300, 's'), {1}}, kNow),
              C::kInvalidArgument, "cache_salt");
  // Bad ids inside the SIMD-scanned body of a long prompt.
  std::vector<int32_t> long_prompt(100, 999);
  long_prompt[37] = 1000;
  ExpectError(state_.Match(MatchRequest{"m", "", long_prompt}, kNow),
              C::kInvalidArgument, "position 37");
  long_prompt[37] = 0;
  long_prompt[64] = -5;
  ExpectError(state_.Match(MatchRequest{"m", "", long_prompt}, kNow),
              C::kInvalidArgument, "position 64");
  long_prompt[64] = 0;
  EXPECT_TRUE(state_.Match(MatchRequest{"m", "", long_prompt}, kNow).ok());
  // Unknown vocab (no worker of the model): only negative ids are invalid.
  std::vector<int32_t> big_ids(20, INT32_MAX);
  EXPECT_TRUE(state_.Match(MatchRequest{"nomodel", "", big_ids}, kNow).ok());
  big_ids[9] = INT32_MIN;
  ExpectError(state_.Match(MatchRequest{"nomodel", "", big_ids}, kNow),
              C::kInvalidArgument, "position 9");
  std::vector<int32_t> huge(kMaxPromptTokens + 1, 1);
  ExpectError(state_.Match(MatchRequest{"m", "", huge}, kNow),
              C::kInvalidArgument, "exceed");
  ExpectError(state_.Acquire(Acq("nope", {1}), kNow), C::kNotFound,
              "unknown worker");
  ExpectError(state_.Acquire(Acq("w", {1}, 0, 2), kNow), C::kFailedPrecondition,
              "epoch 2 is newer than the registered epoch 1; re-register");
  ExpectError(state_.Acquire(Acq("w", {1}, 0, 0), kNow), C::kFailedPrecondition,
              "stale epoch 0");
  AcquireRequest other_model = Acq("w", {1});
  other_model.model = "other";
  ExpectError(state_.Acquire(other_model, kNow), C::kFailedPrecondition,
              "serves model");
  ExpectError(state_.Acquire(Acq("w", {}), kNow), C::kInvalidArgument, "empty");
  ExpectError(state_.Acquire(Acq("w", {5, 1000}), kNow), C::kInvalidArgument,
              "position 1");
  ExpectError(state_.Acquire(Acq("w", {5}, -1), kNow), C::kInvalidArgument,
              "reserve_tokens");
  ExpectError(state_.Acquire(Acq("w", {5}, 70000), kNow), C::kInvalidArgument,
              "reserve_tokens");
}

TEST_F(ErrorPathTest, AcquireAndGrowResourceExhaustedChangeNothing) {
  using C = absl::StatusCode;
  // 32 slots: 16 held by the lease (2 pages), 16 cached (one page shared
  // with the lease, one evictable after... ) - ask for far too much.
  ExpectError(state_.Acquire(Acq("w", Range(200, 230)), kNow),
              C::kResourceExhausted, "free or evictable");
  ExpectError(
      state_.Acquire(Acq("w", Concat(Range(1, 10), Range(300, 330))), kNow),
      C::kResourceExhausted, "free or evictable");
  ExpectError(state_.Grow(GrowRequest{lease_.lease_id, 64}, kNow),
              C::kResourceExhausted, "free or evictable");
}

TEST_F(ErrorPathTest, LeaseCalls) {
  using C = absl::StatusCode;
  const uint64_t id = lease_.lease_id;
  ExpectError(state_.Grow(GrowRequest{999, 1}, kNow), C::kNotFound, "999");
  ExpectError(state_.Grow(GrowRequest{id, 0}, kNow), C::kInvalidArgument,
              "num_tokens");
  ExpectError(state_.Grow(GrowRequest{id, 65537}, kNow), C::kInvalidArgument,
              "num_tokens");
  ExpectError(state_.Fork(ForkRequest{id, 0, 1}, kNow), C::kInvalidArgument,
              "num_children");
  ExpectError(state_.Fork(ForkRequest{id, 65, 1}, kNow), C::kInvalidArgument,
              "num_children");
  ExpectError(state_.Fork(ForkRequest{id, 1, 0}, kNow), C::kInvalidArgument,
              "num_tokens");
  ExpectError(state_.Fork(ForkRequest{id, 1, 16}, kNow), C::kInvalidArgument,
              "num_tokens");
  ExpectError(state_.Fork(ForkRequest{999, 1, 1}, kNow), C::kNotFound, "999");
  ExpectError(state_.Commit(CommitRequest{id, Range(1, 10), false}, kNow),
              C::kInvalidArgument, "must be in");
  ExpectError(
      state_.Commit(CommitRequest{id, Concat(Range(1, 10), {70, 72}), false},
                    kNow),
      C::kInvalidArgument, "do not extend");
  ExpectError(
      state_.Commit(
          CommitRequest{id, Concat(Range(1, 10), {70, 71, 1, 2, 3, 4}), false},
          kNow),
      C::kInvalidArgument, "lease length");
  ExpectError(
      state_.Commit(
          CommitRequest{id, Concat(Range(1, 10), {70, 71, 5000}), false}, kNow),
      C::kInvalidArgument, "outside");
  ExpectError(state_.Evict("nope", 1, kNow), C::kNotFound, "unknown worker");
  ExpectError(state_.Evict("w", 0, kNow), C::kInvalidArgument, "num_tokens");
  ExpectError(state_.Flush("nope", kNow), C::kNotFound, "unknown worker");
  ExpectError(state_.Stats("nope", kNow), C::kNotFound, "unknown worker");
  // Double commit / double release.
  ASSERT_TRUE(
      state_
          .Commit(CommitRequest{id, Concat(Range(1, 10), {70, 71}), false},
                  kNow)
          .ok());
  dump_ = state_.CanonicalDump();
  ExpectError(
      state_.Commit(CommitRequest{id, Concat(Range(1, 10), {70, 71}), false},
                    kNow),
      C::kNotFound, "not found");
  ExpectError(state_.Release(id, kNow), C::kNotFound, "not found");
  const AcquireResult b = MustAcquire(Acq("w", {9, 9}));
  ASSERT_TRUE(state_.Release(b.lease_id, kNow).ok());
  dump_ = state_.CanonicalDump();
  ExpectError(state_.Release(b.lease_id, kNow), C::kNotFound, "not found");
}

// ---- snapshots ----

TEST_F(CacheStateTest, SerializeRestoreRoundTripIsExact) {
  Register(Worker("a", 256, 1));
  Register(Worker("b", 256, 16));
  Register(Worker("c", 128, 8, 3, "other"));
  Store("a", Range(1, 40));
  Store("b", Range(1, 40));
  Store("b", Concat(Range(1, 20), {9, 9, 9}));
  const AcquireResult held = MustAcquire(Acq("b", Concat(Range(1, 35), {5})));
  MustCommit(MustAcquire(Acq("a", Range(1, 50), 4)).lease_id, Range(1, 50),
             true);
  ASSERT_TRUE(state_.Fork(ForkRequest{held.lease_id, 2, 30}, kNow).ok());
  AcquireRequest salted = Acq("a", {7, 7, 7});
  salted.cache_salt = "tenant";
  Store("a", {7, 7});
  MustCommit(MustAcquire(salted).lease_id, {7, 7, 7});
  ExpectInvariants();
  const std::string snapshot = state_.Serialize();
  CacheState restored;
  ASSERT_TRUE(restored.Restore(snapshot).ok());
  EXPECT_TRUE(restored.CheckInvariants().ok());
  EXPECT_EQ(restored.CanonicalDump(), state_.CanonicalDump());
  EXPECT_EQ(restored.Serialize(), snapshot);
  // The restored state behaves identically.
  const AcquireResult x = MustAcquire(Acq("b", Concat(Range(1, 30), {1, 1})));
  const AcquireResult y =
      restored.Acquire(Acq("b", Concat(Range(1, 30), {1, 1})), kNow).value();
  EXPECT_EQ(x.lease_id, y.lease_id);
  EXPECT_EQ(x.kv_indices, y.kv_indices);
  EXPECT_EQ(x.copy_ops, y.copy_ops);
  EXPECT_EQ(restored.CanonicalDump(), state_.CanonicalDump());
}

TEST_F(CacheStateTest, RestoreRejectsCorruptSnapshotsAndKeepsState) {
  Register(Worker("a", 64, 8));
  Store("a", Range(1, 20));
  MustAcquire(Acq("a", Range(1, 25)));
  const std::string snapshot = state_.Serialize();
  CacheState other;
  ASSERT_TRUE(other.RegisterWorker(Worker("z", 8, 8), kNow).ok());
  const std::string before = other.CanonicalDump();
  for (size_t cut :
       {size_t{0}, size_t{5}, snapshot.size() / 2, snapshot.size() - 1}) {
    EXPECT_FALSE(other.Restore(snapshot.substr(0, cut)).ok()) << cut;
    EXPECT_EQ(other.CanonicalDump(), before);
  }
  EXPECT_FALSE(other.Restore(snapshot + "x").ok());
  // Flip bytes of the trees and leases: must never crash; either rejected or
  // a consistent state.
  for (size_t i = snapshot.size() / 2; i < snapshot.size(); ++i) {
    std::string bad = snapshot;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    CacheState s;
    if (s.Restore(bad).ok()) {
      EXPECT_TRUE(s.CheckInvariants().ok()) << "byte " << i;
    }
  }
}

}  // namespace
}  // namespace radixkv::cache_service
