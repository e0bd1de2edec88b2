#include "cache_service/redis_journal.h"

#include <stdlib.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "cache_service/redis_server_process.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "_",
                      getpid());
}

class RedisJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto redis = RedisServerProcess::Start(TempDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = std::move(*redis);
    options_.host = "127.0.0.1";
    options_.port = redis_->port();
    options_.key_prefix = "test:journal";
  }

  std::unique_ptr<RedisJournal> OpenJournal() {
    auto journal = RedisJournal::Open(options_);
    EXPECT_TRUE(journal.ok()) << journal.status();
    return journal.ok() ? std::move(*journal) : nullptr;
  }

  std::unique_ptr<RedisServerProcess> redis_;
  RedisJournalOptions options_;
};

TEST(ParseRedisAddressTest, AcceptsHostPortAndRejectsTheRest) {
  RedisJournalOptions options;
  ASSERT_TRUE(ParseRedisAddress("10.0.0.7:6380", &options).ok());
  EXPECT_EQ(options.host, "10.0.0.7");
  EXPECT_EQ(options.port, 6380);
  EXPECT_FALSE(ParseRedisAddress("localhost", &options).ok());
  EXPECT_FALSE(ParseRedisAddress(":6379", &options).ok());
  EXPECT_FALSE(ParseRedisAddress("h:0", &options).ok());
  EXPECT_FALSE(ParseRedisAddress("h:70000", &options).ok());
  EXPECT_FALSE(ParseRedisAddress("h:abc", &options).ok());
}

TEST_F(RedisJournalTest, EmptyRedisLoadsNothing) {
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_FALSE(contents->snapshot.has_value());
  EXPECT_TRUE(contents->entries.empty());
}

TEST_F(RedisJournalTest, EntriesAreDurableInOrderBeforeTheirCallback) {
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  std::atomic<int> ok_callbacks{0};
  for (int i = 0; i < 100; ++i) {
    // Binary-safe payloads: include NUL bytes.
    std::string entry = absl::StrCat("e", i);
    entry.push_back('\0');
    entry.push_back(static_cast<char>(i));
    journal->Append(entry, [&](const absl::Status& s) {
      if (s.ok()) ok_callbacks.fetch_add(1);
    });
  }
  ASSERT_TRUE(journal->Flush().ok());
  EXPECT_EQ(ok_callbacks.load(), 100);
  EXPECT_EQ(journal->appended_entries(), 100);
  // A second connection (a restarted process) sees the same entries.
  journal.reset();
  auto reopened = OpenJournal();
  auto contents = reopened->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->entries.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    std::string expected = absl::StrCat("e", i);
    expected.push_back('\0');
    expected.push_back(static_cast<char>(i));
    EXPECT_EQ(contents->entries[i], expected);
  }
}

TEST_F(RedisJournalTest, SnapshotReplacesEntriesBeforeIt) {
  auto journal = OpenJournal();
  journal->Append("a", nullptr);
  journal->Append("b", nullptr);
  journal->AppendSnapshot("state-after-a-b");
  journal->Append("c", nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  ASSERT_TRUE(contents->snapshot.has_value());
  EXPECT_EQ(*contents->snapshot, "state-after-a-b");
  EXPECT_EQ(contents->entries, std::vector<std::string>({"c"}));

  journal->AppendSnapshot("state-after-c");
  ASSERT_TRUE(journal->Flush().ok());
  contents = journal->Load();
  EXPECT_EQ(*contents->snapshot, "state-after-c");
  EXPECT_TRUE(contents->entries.empty());

  ASSERT_TRUE(journal->Wipe().ok());
  contents = journal->Load();
  EXPECT_FALSE(contents->snapshot.has_value());
}

TEST_F(RedisJournalTest, ConcurrentAppendersKeepPerThreadOrder) {
  auto journal = OpenJournal();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> threads;
  std::atomic<int> acked{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::Notification durable;
        journal->Append(absl::StrCat(t, ":", i), [&](const absl::Status& s) {
          if (s.ok()) acked.fetch_add(1);
          durable.Notify();
        });
        durable.WaitForNotification();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(acked.load(), kThreads * kPerThread);
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  ASSERT_EQ(contents->entries.size(), size_t{kThreads * kPerThread});
  std::map<int, int> next;
  for (const std::string& e : contents->entries) {
    std::vector<std::string> parts = absl::StrSplit(e, ':');
    ASSERT_EQ(parts.size(), 2u);
    int t = 0, i = 0;
    ASSERT_TRUE(absl::SimpleAtoi(parts[0], &t));
    ASSERT_TRUE(absl::SimpleAtoi(parts[1], &i));
    EXPECT_EQ(i, next[t]) << "thread " << t << " out of order";
    next[t] = i + 1;
  }
}

TEST_F(RedisJournalTest, FailureIsReportedAndStopsFurtherAppends) {
  auto journal = OpenJournal();
  journal->Append("before", nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  redis_.reset();  // SIGKILL the server
  absl::Notification done;
  absl::Status seen;
  journal->Append("lost", [&](const absl::Status& s) {
    seen = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable) << seen;
  EXPECT_EQ(journal->healthy().code(), absl::StatusCode::kUnavailable);
  bool called = false;
  journal->Append("after", [&](const absl::Status& s) {
    called = true;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  });
  EXPECT_TRUE(called);  // refused synchronously
  EXPECT_FALSE(journal->Reconnect().ok());
}

TEST_F(RedisJournalTest, ANewerOpenFencesTheOlderWriter) {
  auto older = OpenJournal();
  older->Append("old-1", nullptr);
  ASSERT_TRUE(older->Flush().ok());
  auto newer = OpenJournal();  // e.g. the replacement pod of a rolling update
  absl::Notification done;
  absl::Status seen;
  older->Append("old-2", [&](const absl::Status& s) {
    seen = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_FALSE(seen.ok());
  EXPECT_NE(seen.message().find("FENCED"), absl::string_view::npos) << seen;
  EXPECT_TRUE(older->fenced());
  EXPECT_EQ(older->Reconnect().code(), absl::StatusCode::kFailedPrecondition);
  older->AppendSnapshot("old-snapshot");  // refused: journal failed
  newer->Append("new-1", nullptr);
  ASSERT_TRUE(newer->Flush().ok());
  EXPECT_FALSE(newer->fenced());
  auto contents = newer->Load();
  ASSERT_TRUE(contents.ok());
  EXPECT_FALSE(contents->snapshot.has_value());
  EXPECT_EQ(contents->entries, std::vector<std::string>({"old-1", "new-1"}));
}

TEST(RedisJournalOpenTest, UnreachableRedisIsUnavailable) {
  RedisJournalOptions options;
  options.port = PickFreeLoopbackPort();
  options.io_timeout = absl::Milliseconds(300);
  auto journal = RedisJournal::Open(options);
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace radixkv::cache_service
