#include "tools/workload/workload.h"

#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

std::vector<int32_t> Corpus(int n) {
  std::vector<int32_t> c(n);
  std::iota(c.begin(), c.end(), 10);
  return c;
}

TEST(WorkloadTest, SharedPrefixGroupsShareTheirSystemPromptOnly) {
  SharedPrefixParams p;
  p.groups = 3;
  p.prompts_per_group = 4;
  p.system_tokens = 20;
  p.question_tokens = 5;
  p.output_tokens = 7;
  std::vector<int32_t> corpus = Corpus(1000);
  auto w = MakeSharedPrefixWorkload(p, corpus, /*bos=*/1, /*seed=*/7, 2048);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->name, "shared-prefix");
  EXPECT_EQ(w->num_requests(), 12);
  std::set<std::vector<int32_t>> systems;
  for (const WorkloadSession& s : w->sessions) {
    ASSERT_EQ(s.context.size(), 21u);
    EXPECT_EQ(s.context[0], 1);
    ASSERT_EQ(s.user_turns.size(), 1u);
    EXPECT_EQ(s.user_turns[0].size(), 5u);
    EXPECT_EQ(s.max_new_tokens, 7);
    EXPECT_FALSE(s.carry_history);
    systems.insert(s.context);
  }
  EXPECT_EQ(systems.size(), 3u);
  // Deterministic under the seed.
  auto again = MakeSharedPrefixWorkload(p, corpus, 1, 7, 2048);
  for (size_t i = 0; i < w->sessions.size(); ++i) {
    EXPECT_EQ(w->sessions[i].name, again->sessions[i].name);
    EXPECT_EQ(w->sessions[i].user_turns, again->sessions[i].user_turns);
  }
}

TEST(WorkloadTest, MultiTurnCarriesHistoryAndMustFitTheContext) {
  MultiTurnParams p;
  p.conversations = 2;
  p.rounds = 3;
  p.system_tokens = 10;
  p.user_tokens = 4;
  p.output_tokens = 6;
  std::vector<int32_t> corpus = Corpus(100);
  auto w = MakeMultiTurnWorkload(p, corpus, 1, 3, 2048);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->num_requests(), 6);
  for (const WorkloadSession& s : w->sessions) {
    EXPECT_TRUE(s.carry_history);
    EXPECT_EQ(s.user_turns.size(), 3u);
  }
  // 1 + 10 + 3*4 + 2*6 = 35 prompt tokens + 6 output = 41 positions.
  EXPECT_TRUE(MakeMultiTurnWorkload(p, corpus, 1, 3, 41).ok());
  EXPECT_EQ(MakeMultiTurnWorkload(p, corpus, 1, 3, 40).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadTest, DocumentQaUsesTheDocumentPrefix) {
  DocumentQaParams p;
  p.document_name = "Apache-2.0";
  p.document_tokens = 50;
  p.questions = 5;
  p.question_tokens = 3;
  p.output_tokens = 2;
  std::vector<int32_t> doc = Corpus(80);
  std::vector<int32_t> corpus = Corpus(30);
  auto w = MakeDocumentQaWorkload(p, doc, corpus, 1, 1, 2048);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->num_requests(), 5);
  for (const WorkloadSession& s : w->sessions) {
    ASSERT_EQ(s.context.size(), 51u);
    EXPECT_EQ(std::vector<int32_t>(s.context.begin() + 1, s.context.end()),
              std::vector<int32_t>(doc.begin(), doc.begin() + 50));
  }
  EXPECT_EQ(MakeDocumentQaWorkload(p, {}, corpus, 1, 1, 2048).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.questions = 0;
  EXPECT_EQ(MakeDocumentQaWorkload(p, doc, corpus, 1, 1, 2048).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace radixkv::router
