#include "cache_service/redis_journal.h"

#include <hiredis/hiredis.h>
#include <signal.h>
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
#include "absl/time/clock.h"
#include "cache_service/redis_server_process.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "_",
                      getpid());
}

// A plain hiredis connection for the test's own look at Redis.
class RawRedis {
 public:
  explicit RawRedis(int port) : context_(redisConnect("127.0.0.1", port)) {}
  ~RawRedis() {
    if (context_ != nullptr) redisFree(context_);
  }
  bool ok() const { return context_ != nullptr && context_->err == 0; }
  // Runs `argv`; returns the integer reply (or -1 for another reply type).
  int64_t Integer(const std::vector<std::string>& argv) {
    redisReply* reply = Command(argv);
    int64_t value = -1;
    if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) {
      value = reply->integer;
    } else if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
      if (!absl::SimpleAtoi(std::string(reply->str, reply->len), &value)) {
        value = -1;
      }
    }
    if (reply != nullptr) freeReplyObject(reply);
    return value;
  }

 private:
  redisReply* Command(const std::vector<std::string>& argv) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    return static_cast<redisReply*>(redisCommandArgv(
        context_, static_cast<int>(args.size()), args.data(), lens.data()));
  }
  redisContext* context_;
};

TEST(JournalRecordTest, EncodeDecodeRoundTripAndLegacyEntries) {
  const std::string entry("\x04payload\0with nul", 17);
  const std::string record = EncodeJournalRecord(0x2a, 7, entry);
  EXPECT_EQ(record.substr(0, kJournalRecordIdBytes),
            "#000000000000002a0000000000000007");
  EXPECT_EQ(record.size(), kJournalRecordIdBytes + entry.size());
  auto decoded = DecodeJournalRecord(record);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->id, "#000000000000002a0000000000000007");
  EXPECT_EQ(decoded->entry, entry);
  // An empty entry keeps its id.
  decoded = DecodeJournalRecord(EncodeJournalRecord(1, 1, ""));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->entry, "");
  EXPECT_EQ(decoded->id.size(), kJournalRecordIdBytes);
  // Records written before ids existed start with the op byte, never '#'.
  decoded = DecodeJournalRecord(std::string("\x07legacy", 7));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->id, "");
  EXPECT_EQ(decoded->entry, std::string("\x07legacy", 7));
  // A '#' record with a truncated id is corrupt.
  EXPECT_EQ(DecodeJournalRecord("#00000001").status().code(),
            absl::StatusCode::kDataLoss);
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

TEST_F(RedisJournalTest, SequenceNumbersCountAppendsFromOne) {
  auto journal = OpenJournal();
  EXPECT_EQ(journal->Append("a", nullptr), 1);
  journal->AppendSnapshot("s");  // takes no sequence number
  EXPECT_EQ(journal->Append("b", nullptr), 2);
  ASSERT_TRUE(journal->Flush().ok());
  EXPECT_TRUE(journal->unacknowledged_ids().empty());
}

// The adversarial case: a write times out while Redis is stalled (SIGSTOP)
// but sits in Redis's socket buffer and is executed once Redis resumes. The
// entry was answered UNAVAILABLE, so Reconnect() must remove it from Redis;
// records of other writers (legacy ones, another token with the same
// sequence number) and acknowledged entries stay, in order.
TEST_F(RedisJournalTest, ReconnectRemovesAnUnacknowledgedEntryThatRedisStored) {
  RawRedis raw(options_.port);
  ASSERT_TRUE(raw.ok());
  const std::string list = options_.key_prefix + ":journal";
  const std::string owner = options_.key_prefix + ":owner";
  // Left by earlier processes: a record without an id, and one of another
  // owner token whose sequence number equals the entry that will fail (2).
  ASSERT_EQ(raw.Integer({"RPUSH", list, "legacy"}), 1);
  ASSERT_EQ(raw.Integer({"RPUSH", list, EncodeJournalRecord(999, 2, "other")}),
            2);
  options_.io_timeout = absl::Milliseconds(300);
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  const int64_t token_before = raw.Integer({"GET", owner});
  EXPECT_EQ(journal->Append("acked", nullptr), 1);
  ASSERT_TRUE(journal->Flush().ok());

  ASSERT_EQ(kill(redis_->pid(), SIGSTOP), 0);
  absl::Notification done;
  absl::Status seen;
  EXPECT_EQ(journal->Append("unacked",
                            [&](const absl::Status& s) {
                              seen = s;
                              done.Notify();
                            }),
            2);
  done.WaitForNotification();
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable) << seen;
  ASSERT_EQ(journal->unacknowledged_ids().size(), 1u);
  EXPECT_EQ(journal->unacknowledged_ids()[0].substr(17),
            "0000000000000002");  // sequence number 2
  // Still stalled: reconnecting fails and the id is kept for the next try.
  EXPECT_EQ(journal->Reconnect().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(journal->unacknowledged_ids().size(), 1u);
  ASSERT_EQ(kill(redis_->pid(), SIGCONT), 0);

  // Redis now executes the buffered append: the failed entry is stored.
  int64_t length = 0;
  for (int i = 0; i < 200 && length != 4; ++i) {
    length = raw.Integer({"LLEN", list});
    if (length != 4) absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_EQ(length, 4) << "the timed-out append never reached redis";

  ASSERT_TRUE(journal->Reconnect().ok());
  EXPECT_EQ(journal->removed_unacknowledged_entries(), 1);
  EXPECT_TRUE(journal->unacknowledged_ids().empty());
  EXPECT_EQ(raw.Integer({"GET", owner}), token_before + 1);  // new token
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(contents->entries,
            std::vector<std::string>({"legacy", "other", "acked"}));
  // Writing goes on under the new token.
  EXPECT_EQ(journal->Append("next", nullptr), 3);
  ASSERT_TRUE(journal->Flush().ok());
  contents = journal->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(contents->entries,
            std::vector<std::string>({"legacy", "other", "acked", "next"}));
}

// A write of the old connection that Redis executes only after Reconnect()
// took the new token fails its fencing check: simulated by replaying the
// append script with the old token, as the stale pipeline would.
TEST_F(RedisJournalTest, ReconnectFencesStaleWritesOfTheOldToken) {
  RawRedis raw(options_.port);
  ASSERT_TRUE(raw.ok());
  const std::string list = options_.key_prefix + ":journal";
  const std::string owner = options_.key_prefix + ":owner";
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  journal->Append("a", nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  const int64_t old_token = raw.Integer({"GET", owner});
  ASSERT_TRUE(journal->Reconnect().ok());  // healthy: removes nothing
  EXPECT_EQ(journal->removed_unacknowledged_entries(), 0);
  EXPECT_EQ(raw.Integer({"GET", owner}), old_token + 1);
  // The stale write: the same fenced append the writer sends.
  const std::string script =
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
      "return redis.error_reply('FENCED') end "
      "return redis.call('RPUSH', KEYS[2], ARGV[2])";
  EXPECT_EQ(raw.Integer({"EVAL", script, "2", owner, list,
                         absl::StrCat(old_token), "stale"}),
            -1);  // an error reply
  EXPECT_EQ(raw.Integer({"LLEN", list}), 1);
  journal->Append("b", nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->entries, std::vector<std::string>({"a", "b"}));
}

// A background snapshot taken after entry 5 is committed while entries 6..8
// are already in Redis: exactly 1..5 are trimmed, 6..8 stay, in order.
TEST_F(RedisJournalTest, WriteSnapshotTrimsExactlyTheCoveredRecords) {
  RawRedis raw(options_.port);
  ASSERT_TRUE(raw.ok());
  // A record without an id, left by an old process: precedes everything.
  ASSERT_EQ(raw.Integer({"RPUSH", options_.key_prefix + ":journal", "legacy"}),
            1);
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  for (int i = 1; i <= 5; ++i) journal->Append(absl::StrCat("e", i), nullptr);
  const SnapshotPoint point = journal->snapshot_point();
  EXPECT_EQ(point.covered_sequence, 5);
  for (int i = 6; i <= 8; ++i) journal->Append(absl::StrCat("e", i), nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  ASSERT_TRUE(journal->WriteSnapshot("state-after-e5", point).ok());
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_TRUE(contents->snapshot.has_value());
  EXPECT_EQ(*contents->snapshot, "state-after-e5");
  EXPECT_EQ(contents->entries, std::vector<std::string>({"e6", "e7", "e8"}));
  // The staging key was renamed and lost its expiry.
  EXPECT_EQ(raw.Integer({"PTTL", options_.key_prefix + ":snapshot"}), -1);
  EXPECT_EQ(raw.Integer(
                {"EXISTS", options_.key_prefix + ":snapshot_staging:" +
                               absl::StrCat(raw.Integer(
                                   {"GET", options_.key_prefix + ":owner"}))}),
            0);
  // A snapshot covering everything empties the list; one covering nothing
  // new trims nothing.
  ASSERT_TRUE(
      journal->WriteSnapshot("state-after-e8", journal->snapshot_point()).ok());
  contents = journal->Load();
  EXPECT_EQ(*contents->snapshot, "state-after-e8");
  EXPECT_TRUE(contents->entries.empty());
  journal->Append("e9", nullptr);
  ASSERT_TRUE(journal->WriteSnapshot("state-after-e8-again", point).ok());
  contents = journal->Load();
  EXPECT_EQ(contents->entries, std::vector<std::string>({"e9"}));
}

// A snapshot taken before a Reconnect() may contain entries that were never
// acknowledged: it is refused and nothing is trimmed. So is one whose
// staging key expired before its commit; the journal stays healthy.
TEST_F(RedisJournalTest, StaleOrExpiredSnapshotsTrimNothing) {
  auto journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  journal->AppendSnapshot("base");
  journal->Append("e1", nullptr);
  SnapshotPoint point = journal->snapshot_point();
  ASSERT_TRUE(journal->Flush().ok());

  SnapshotPoint stale = point;
  stale.generation += 1;
  EXPECT_EQ(journal->WriteSnapshot("stale", stale).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(
      journal->WriteSnapshot("expired", point, absl::Milliseconds(5)).code(),
      absl::StatusCode::kNotFound);
  EXPECT_TRUE(journal->healthy().ok());
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(*contents->snapshot, "base");
  EXPECT_EQ(contents->entries, std::vector<std::string>({"e1"}));
  // Appends and a later snapshot work.
  journal->Append("e2", nullptr);
  ASSERT_TRUE(journal->WriteSnapshot("after-e1", point).ok());
  contents = journal->Load();
  EXPECT_EQ(*contents->snapshot, "after-e1");
  EXPECT_EQ(contents->entries, std::vector<std::string>({"e2"}));
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
