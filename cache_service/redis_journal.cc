#include "cache_service/redis_journal.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const {
    if (reply != nullptr) freeReplyObject(reply);
  }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Reads one pipelined reply; UNAVAILABLE on I/O errors and error replies.
absl::StatusOr<ReplyPtr> ReadReply(redisContext* context) {
  void* raw = nullptr;
  if (redisGetReply(context, &raw) != REDIS_OK || raw == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("redis I/O error: ", context->errstr));
  }
  ReplyPtr reply(static_cast<redisReply*>(raw));
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("redis error: ", std::string(reply->str, reply->len)));
  }
  return reply;
}

void AppendArgv(redisContext* context, std::vector<const char*>& argv,
                const std::vector<size_t>& lens) {
  redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(),
                         lens.data());
}

// Appends ARGV[2..] to the journal list KEYS[2] if KEYS[1] still holds this
// process's owner token ARGV[1] (unpack in chunks: Lua's stack is bounded).
constexpr std::string_view kAppendScript =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
    "return redis.error_reply('FENCED: another cache_service owns this "
    "journal') end "
    "for i = 2, #ARGV, 4000 do "
    "redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 3999, #ARGV))) "
    "end "
    "return #ARGV - 1";
// Stores snapshot ARGV[2] in KEYS[2] and empties the journal KEYS[3], if
// KEYS[1] still holds the owner token ARGV[1]. Atomic (a script).
constexpr std::string_view kSnapshotScript =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
    "return redis.error_reply('FENCED: another cache_service owns this "
    "journal') end "
    "redis.call('SET', KEYS[2], ARGV[2]) "
    "redis.call('DEL', KEYS[3]) "
    "return 1";
constexpr std::string_view kEval = "EVAL";
constexpr std::string_view kTwo = "2";
constexpr std::string_view kThree = "3";

}  // namespace

absl::Status ParseRedisAddress(const std::string& address,
                               RedisJournalOptions* options) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis must be host:port, got '", address, "'"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--redis port must be in [1, 65535], got '", address, "'"));
  }
  options->host = address.substr(0, colon);
  options->port = port;
  return absl::OkStatus();
}

RedisJournal::RedisJournal(const RedisJournalOptions& options)
    : options_(options),
      snapshot_key_(options.key_prefix + ":snapshot"),
      journal_key_(options.key_prefix + ":journal"),
      owner_key_(options.key_prefix + ":owner") {}

absl::StatusOr<std::unique_ptr<RedisJournal>> RedisJournal::Open(
    const RedisJournalOptions& options, FlushObserver observer) {
  std::unique_ptr<RedisJournal> journal(new RedisJournal(options));
  journal->observer_ = std::move(observer);
  {
    absl::MutexLock lock(&journal->io_mu_);
    absl::Status connected = journal->ConnectLocked();
    if (!connected.ok()) return connected;
    // Take ownership: every later write checks this token, so a process
    // that opened the journal earlier can no longer write to it.
    redisAppendCommand(journal->context_, "INCR %b", journal->owner_key_.data(),
                       journal->owner_key_.size());
    absl::StatusOr<ReplyPtr> token = ReadReply(journal->context_);
    if (!token.ok()) return token.status();
    if ((*token)->type != REDIS_REPLY_INTEGER) {
      return absl::UnavailableError("redis: INCR of the owner key failed");
    }
    journal->owner_token_ = absl::StrCat((*token)->integer);
  }
  journal->writer_ = std::thread([j = journal.get()] { j->WriterLoop(); });
  return journal;
}

RedisJournal::~RedisJournal() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  absl::MutexLock lock(&io_mu_);
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
}

absl::Status RedisJournal::ConnectLocked() {
  if (context_ != nullptr) redisFree(context_);
  context_ = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                     absl::ToTimeval(options_.io_timeout));
  if (context_ == nullptr || context_->err != 0) {
    std::string error =
        context_ == nullptr ? "out of memory" : context_->errstr;
    if (context_ != nullptr) redisFree(context_);
    context_ = nullptr;
    return absl::UnavailableError(absl::StrCat("cannot connect to redis ",
                                               options_.host, ":",
                                               options_.port, ": ", error));
  }
  redisSetTimeout(context_, absl::ToTimeval(options_.io_timeout));
  redisEnableKeepAlive(context_);
  redisAppendCommand(context_, "PING");
  absl::StatusOr<ReplyPtr> pong = ReadReply(context_);
  if (!pong.ok()) {
    redisFree(context_);
    context_ = nullptr;
    return pong.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisJournal::Contents> RedisJournal::Load() {
  absl::Status flushed = Flush();
  if (!flushed.ok()) return flushed;
  absl::MutexLock lock(&io_mu_);
  if (context_ == nullptr) return absl::UnavailableError("redis not connected");
  redisAppendCommand(context_, "MULTI");
  redisAppendCommand(context_, "GET %b", snapshot_key_.data(),
                     snapshot_key_.size());
  redisAppendCommand(context_, "LRANGE %b 0 -1", journal_key_.data(),
                     journal_key_.size());
  redisAppendCommand(context_, "EXEC");
  for (int i = 0; i < 3; ++i) {  // +OK, +QUEUED, +QUEUED
    absl::StatusOr<ReplyPtr> reply = ReadReply(context_);
    if (!reply.ok()) return reply.status();
  }
  absl::StatusOr<ReplyPtr> exec = ReadReply(context_);
  if (!exec.ok()) return exec.status();
  const redisReply* r = exec->get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
    return absl::UnavailableError("redis: unexpected EXEC reply in Load");
  }
  Contents contents;
  const redisReply* snapshot = r->element[0];
  if (snapshot->type == REDIS_REPLY_STRING) {
    contents.snapshot = std::string(snapshot->str, snapshot->len);
  } else if (snapshot->type != REDIS_REPLY_NIL) {
    return absl::UnavailableError(
        absl::StrCat("redis: ", snapshot_key_, " is not a string"));
  }
  const redisReply* list = r->element[1];
  if (list->type != REDIS_REPLY_ARRAY) {
    return absl::UnavailableError(
        absl::StrCat("redis: ", journal_key_, " is not a list"));
  }
  contents.entries.reserve(list->elements);
  for (size_t i = 0; i < list->elements; ++i) {
    const redisReply* e = list->element[i];
    if (e->type != REDIS_REPLY_STRING) {
      return absl::UnavailableError("redis: non-string journal entry");
    }
    contents.entries.emplace_back(e->str, e->len);
  }
  return contents;
}

void RedisJournal::Append(std::string entry, DoneCallback done) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok() && !stopping_) {
      queue_.push_back(Item{false, std::move(entry), std::move(done)});
      ++enqueued_;
      ++appended_entries_;
      return;
    }
    failed = failure_.ok() ? absl::UnavailableError("journal is stopping")
                           : failure_;
  }
  if (done) done(failed);
}

void RedisJournal::AppendSnapshot(std::string snapshot) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok() || stopping_) return;
  queue_.push_back(Item{true, std::move(snapshot), nullptr});
  ++enqueued_;
}

absl::Status RedisJournal::Flush() {
  absl::MutexLock lock(&mu_);
  const int64_t target = enqueued_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return written_ >= target;
  };
  mu_.Await(absl::Condition(&done));
  return failure_;
}

bool RedisJournal::fenced() const {
  absl::MutexLock lock(&mu_);
  return fenced_;
}

absl::Status RedisJournal::healthy() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

int64_t RedisJournal::appended_entries() const {
  absl::MutexLock lock(&mu_);
  return appended_entries_;
}

absl::Status RedisJournal::Reconnect() {
  absl::Status flushed = Flush();  // drains (and fails) whatever is queued
  (void)flushed;
  {
    absl::MutexLock lock(&mu_);
    if (fenced_) {
      return absl::FailedPreconditionError(
          "fenced: another cache_service opened this journal later");
    }
  }
  absl::MutexLock io_lock(&io_mu_);
  absl::Status connected = ConnectLocked();
  if (!connected.ok()) return connected;
  absl::MutexLock lock(&mu_);
  failure_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status RedisJournal::Wipe() {
  absl::Status flushed = Flush();
  if (!flushed.ok()) return flushed;
  absl::MutexLock lock(&io_mu_);
  if (context_ == nullptr) return absl::UnavailableError("redis not connected");
  redisAppendCommand(context_, "DEL %b %b", snapshot_key_.data(),
                     snapshot_key_.size(), journal_key_.data(),
                     journal_key_.size());
  absl::StatusOr<ReplyPtr> reply = ReadReply(context_);
  return reply.status();
}

absl::Status RedisJournal::WriteBatchLocked(const std::vector<Item>& batch) {
  if (context_ == nullptr) return absl::UnavailableError("redis not connected");
  // One pipeline: each run of entries is one append script, each snapshot one
  // snapshot script. Both check the owner token first (fencing) and run
  // atomically in Redis.
  int expected_replies = 0;
  size_t i = 0;
  while (i < batch.size()) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    auto add = [&](std::string_view s) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    };
    if (batch[i].is_snapshot) {
      add(kEval);
      add(kSnapshotScript);
      add(kThree);
      add(owner_key_);
      add(snapshot_key_);
      add(journal_key_);
      add(owner_token_);
      add(batch[i].payload);
      ++i;
    } else {
      add(kEval);
      add(kAppendScript);
      add(kTwo);
      add(owner_key_);
      add(journal_key_);
      add(owner_token_);
      while (i < batch.size() && !batch[i].is_snapshot) {
        add(batch[i].payload);
        ++i;
      }
    }
    AppendArgv(context_, argv, lens);
    ++expected_replies;
  }
  absl::Status first_error;
  for (int r = 0; r < expected_replies; ++r) {
    absl::StatusOr<ReplyPtr> reply = ReadReply(context_);
    if (!reply.ok()) {
      if (first_error.ok()) first_error = reply.status();
      if (reply.status().message().find("FENCED") != absl::string_view::npos) {
        absl::MutexLock lock(&mu_);
        fenced_ = true;
      }
      // An I/O error leaves the pipeline unusable: stop reading.
      if (context_->err != 0) break;
    }
  }
  if (!first_error.ok()) {
    redisFree(context_);  // the stream may be out of sync with our replies
    context_ = nullptr;
  }
  return first_error;
}

void RedisJournal::WriterLoop() {
  while (true) {
    std::vector<Item> batch;
    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty() && stopping_) return;
      while (!queue_.empty() &&
             static_cast<int>(batch.size()) < options_.max_batch_entries) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      failed = failure_;
    }
    int entries = 0;
    for (const Item& item : batch) entries += item.is_snapshot ? 0 : 1;
    absl::Status status = failed;
    if (status.ok()) {
      absl::Time start = absl::Now();
      {
        absl::MutexLock io_lock(&io_mu_);
        status = WriteBatchLocked(batch);
      }
      if (observer_)
        observer_(absl::ToDoubleSeconds(absl::Now() - start), entries);
      if (!status.ok()) {
        spdlog::error("redis journal write failed ({} entries): {}", entries,
                      status.ToString());
      }
    }
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && failure_.ok()) failure_ = status;
    }
    for (Item& item : batch) {
      if (item.done) item.done(status);
    }
    absl::MutexLock lock(&mu_);
    written_ += static_cast<int64_t>(batch.size());
  }
}

}  // namespace radixkv::cache_service
