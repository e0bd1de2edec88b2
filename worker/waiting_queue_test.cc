#include "worker/waiting_queue.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

std::unique_ptr<Sequence> Seq(const std::string& id, int32_t priority,
                              int prompt_len = 4, int max_new_tokens = 8) {
  auto seq = std::make_unique<Sequence>();
  seq->request_id = id;
  seq->priority = priority;
  seq->tokens.assign(prompt_len, 3);
  seq->prompt_len = prompt_len;
  seq->sampling.max_new_tokens = max_new_tokens;
  return seq;
}

std::vector<std::string> DrainIds(WaitingQueue& queue) {
  std::vector<std::string> ids;
  while (auto seq = queue.PopFront()) ids.push_back(seq->request_id);
  return ids;
}

TEST(WaitingQueueTest, HigherPriorityFirstFifoWithinAPriority) {
  WaitingQueue queue;
  queue.PushBack(Seq("a0", 0));
  queue.PushBack(Seq("b1", 1));
  queue.PushBack(Seq("c0", 0));
  queue.PushBack(Seq("d2", 2));
  queue.PushBack(Seq("e1", 1));
  EXPECT_EQ(queue.size(), 5u);
  EXPECT_EQ(queue.front()->request_id, "d2");
  EXPECT_EQ(DrainIds(queue),
            (std::vector<std::string>{"d2", "b1", "e1", "a0", "c0"}));
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.front(), nullptr);
  EXPECT_EQ(queue.PopFront(), nullptr);
}

TEST(WaitingQueueTest, PreemptedGoAheadOfTheirPriorityLatestFirst) {
  WaitingQueue queue;
  queue.PushBack(Seq("w1", 1));
  queue.PushBack(Seq("w0", 0));
  queue.PushFront(Seq("p0-first", 0));
  queue.PushFront(Seq("p0-second", 0));
  queue.PushFront(Seq("p1", 1));
  queue.PushBack(Seq("late0", 0));
  EXPECT_EQ(DrainIds(queue),
            (std::vector<std::string>{"p1", "w1", "p0-second", "p0-first", "w0",
                                      "late0"}));
}

TEST(WaitingQueueTest, RemoveByIdAndOutstandingTokens) {
  WaitingQueue queue;
  queue.PushBack(Seq("a", 0, /*prompt_len=*/10, /*max_new_tokens=*/5));
  queue.PushBack(Seq("b", 0, 20, 7));
  auto preempted = Seq("c", 0, 30, 9);
  preempted->tokens.resize(33);  // 3 tokens generated before preemption.
  preempted->num_generated = 3;
  queue.PushFront(std::move(preempted));
  EXPECT_EQ(queue.outstanding_tokens(), 15 + 27 + (33 + 9 - 3));
  std::unique_ptr<Sequence> b = queue.Remove("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->request_id, "b");
  EXPECT_EQ(queue.Remove("b"), nullptr);
  EXPECT_EQ(queue.Remove("never"), nullptr);
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.outstanding_tokens(), 15 + 39);
  // A removed id may wait again (a request_id reused after it ended).
  queue.PushBack(std::move(b));
  EXPECT_EQ(DrainIds(queue), (std::vector<std::string>{"c", "a", "b"}));
  EXPECT_EQ(queue.outstanding_tokens(), 0);
}

TEST(WaitingQueueTest, RemoveIfKeepsTheRestInOrder) {
  WaitingQueue queue;
  for (int i = 0; i < 6; ++i) {
    auto seq = Seq("s" + std::to_string(i), i % 2);
    seq->admitted_once = i % 3 == 0;
    queue.PushBack(std::move(seq));
  }
  std::vector<std::unique_ptr<Sequence>> removed =
      queue.RemoveIf([](const Sequence& s) { return !s.admitted_once; });
  std::vector<std::string> removed_ids;
  for (const auto& seq : removed) removed_ids.push_back(seq->request_id);
  EXPECT_EQ(removed_ids, (std::vector<std::string>{"s1", "s5", "s2", "s4"}));
  EXPECT_EQ(queue.Remove("s1"), nullptr);
  EXPECT_EQ(DrainIds(queue), (std::vector<std::string>{"s3", "s0"}));
}

}  // namespace
}  // namespace radixkv::worker
