#include "cache_service/redis_journal.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
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

// A new connection (connect, timeouts, keep-alive, PING). UNAVAILABLE when
// Redis cannot be reached; the caller owns the returned context.
absl::StatusOr<redisContext*> ConnectRedis(const RedisJournalOptions& options) {
  redisContext* context = redisConnectWithTimeout(
      options.host.c_str(), options.port, absl::ToTimeval(options.io_timeout));
  if (context == nullptr || context->err != 0) {
    std::string error = context == nullptr ? "out of memory" : context->errstr;
    if (context != nullptr) redisFree(context);
    return absl::UnavailableError(absl::StrCat("cannot connect to redis ",
                                               options.host, ":", options.port,
                                               ": ", error));
  }
  redisSetTimeout(context, absl::ToTimeval(options.io_timeout));
  redisEnableKeepAlive(context);
  redisAppendCommand(context, "PING");
  absl::StatusOr<ReplyPtr> pong = ReadReply(context);
  if (!pong.ok()) {
    redisFree(context);
    return pong.status();
  }
  return context;
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
// Reconnect(): if KEYS[1] (owner) still holds ARGV[1], removes from the
// journal list KEYS[2] every record whose kJournalRecordIdBytes-byte id is
// one of ARGV[2..] (keeping the others in order), then INCRs the owner
// token. Returns {new token, records removed}. Atomic (a script), so a
// stale write under the old token either ran before (and is removed) or
// runs after (and fails its fencing check).
constexpr std::string_view kReclaimScript =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
    "return redis.error_reply('FENCED: another cache_service owns this "
    "journal') end "
    "local removed = 0 "
    "if #ARGV > 1 then "
    "local drop = {} "
    "for i = 2, #ARGV do drop[ARGV[i]] = true end "
    "local records = redis.call('LRANGE', KEYS[2], 0, -1) "
    "local keep = {} "
    "for _, r in ipairs(records) do "
    "if drop[string.sub(r, 1, 33)] then removed = removed + 1 "
    "else keep[#keep + 1] = r end "
    "end "
    "if removed > 0 then "
    "redis.call('DEL', KEYS[2]) "
    "for i = 1, #keep, 4000 do "
    "redis.call('RPUSH', KEYS[2], unpack(keep, i, math.min(i + 3999, #keep))) "
    "end "
    "end "
    "end "
    "return {redis.call('INCR', KEYS[1]), removed}";
// Commits a staged background snapshot: if KEYS[1] (owner) still holds
// ARGV[1] and the staging key KEYS[2] exists, renames it to KEYS[3]
// (snapshot), drops its expiry and trims from the journal list KEYS[4] the
// prefix of records covered by the snapshot: id (owner token, sequence) <=
// (ARGV[1], ARGV[2]), compared as numbers (records are ordered by id, so a
// binary search with LINDEX finds the cut; legacy records without an id
// precede every record with one). Returns the number of records trimmed, or
// -1 when the staging key is gone (expired). Atomic (a script).
constexpr std::string_view kCommitSnapshotScript =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
    "return redis.error_reply('FENCED: another cache_service owns this "
    "journal') end "
    "if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end "
    "redis.call('RENAME', KEYS[2], KEYS[3]) "
    "redis.call('PERSIST', KEYS[3]) "
    "local owner = tonumber(ARGV[1]) "
    "local seq = tonumber(ARGV[2]) "
    "local function covered(r) "
    "if string.sub(r, 1, 1) ~= '#' then return true end "
    "local o = tonumber(string.sub(r, 2, 17), 16) "
    "if o ~= owner then return o < owner end "
    "return tonumber(string.sub(r, 18, 33), 16) <= seq "
    "end "
    "local lo = 0 "
    "local hi = redis.call('LLEN', KEYS[4]) "
    "while lo < hi do "
    "local mid = math.floor((lo + hi) / 2) "
    "if covered(redis.call('LINDEX', KEYS[4], mid)) then lo = mid + 1 "
    "else hi = mid end "
    "end "
    "if lo > 0 then redis.call('LTRIM', KEYS[4], lo, -1) end "
    "return lo";
constexpr std::string_view kEval = "EVAL";
constexpr std::string_view kFour = "4";
constexpr std::string_view kTwo = "2";
constexpr std::string_view kThree = "3";

}  // namespace

std::string EncodeJournalRecord(int64_t owner_token, int64_t sequence,
                                std::string_view entry) {
  std::string record =
      absl::StrFormat("#%016x%016x", static_cast<uint64_t>(owner_token),
                      static_cast<uint64_t>(sequence));
  record.append(entry.data(), entry.size());
  return record;
}

absl::StatusOr<JournalRecord> DecodeJournalRecord(std::string_view record) {
  JournalRecord out;
  if (record.empty() || record[0] != '#') {
    out.entry = std::string(record);
    return out;
  }
  if (record.size() < kJournalRecordIdBytes) {
    return absl::DataLossError(absl::StrCat("journal record of ", record.size(),
                                            " bytes has a truncated id"));
  }
  out.id = std::string(record.substr(0, kJournalRecordIdBytes));
  out.entry = std::string(record.substr(kJournalRecordIdBytes));
  return out;
}

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
    journal->owner_token_value_ = (*token)->integer;
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
  {
    absl::MutexLock lock(&snapshot_io_mu_);
    if (snapshot_context_ != nullptr) redisFree(snapshot_context_);
    snapshot_context_ = nullptr;
  }
  absl::MutexLock lock(&io_mu_);
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
}

absl::Status RedisJournal::ConnectLocked() {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  absl::StatusOr<redisContext*> context = ConnectRedis(options_);
  if (!context.ok()) return context.status();
  context_ = *context;
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
    absl::StatusOr<JournalRecord> record =
        DecodeJournalRecord(std::string_view(e->str, e->len));
    if (!record.ok()) return record.status();
    contents.entries.push_back(std::move(record->entry));
  }
  return contents;
}

int64_t RedisJournal::Append(std::string entry, DoneCallback done) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok() && !stopping_) {
      const int64_t sequence = next_sequence_++;
      queue_.push_back(
          Item{Kind::kEntry, sequence, std::move(entry), std::move(done)});
      ++enqueued_;
      ++appended_entries_;
      return sequence;
    }
    failed = failure_.ok() ? absl::UnavailableError("journal is stopping")
                           : failure_;
  }
  if (done) done(failed);
  return 0;
}

void RedisJournal::AppendSnapshot(std::string snapshot) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok() || stopping_) return;
  queue_.push_back(Item{Kind::kSnapshot, 0, std::move(snapshot), nullptr});
  ++enqueued_;
}

SnapshotPoint RedisJournal::snapshot_point() const {
  absl::MutexLock lock(&mu_);
  return SnapshotPoint{next_sequence_ - 1, generation_};
}

absl::Status RedisJournal::WriteSnapshot(
    std::string_view snapshot, SnapshotPoint point,
    absl::Duration staging_ttl_for_testing) {
  const absl::Duration staging_ttl =
      staging_ttl_for_testing > absl::ZeroDuration()
          ? staging_ttl_for_testing
          : options_.snapshot_staging_ttl;
  std::string staging_key;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok() || stopping_ || generation_ != point.generation) {
      return absl::AbortedError(
          "snapshot dropped: the journal failed or reconnected since it was "
          "taken");
    }
  }
  {
    absl::MutexLock io_lock(&io_mu_);
    staging_key =
        absl::StrCat(options_.key_prefix, ":snapshot_staging:", owner_token_);
  }
  {
    absl::MutexLock lock(&snapshot_io_mu_);
    if (snapshot_context_ == nullptr) {
      absl::StatusOr<redisContext*> context = ConnectRedis(options_);
      if (!context.ok()) return context.status();
      snapshot_context_ = *context;
    }
    const std::string ttl_ms = absl::StrCat(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(staging_ttl)));
    redisAppendCommand(snapshot_context_, "SET %b %b PX %b", staging_key.data(),
                       staging_key.size(), snapshot.data(), snapshot.size(),
                       ttl_ms.data(), ttl_ms.size());
    absl::StatusOr<ReplyPtr> reply = ReadReply(snapshot_context_);
    if (!reply.ok()) {
      redisFree(snapshot_context_);
      snapshot_context_ = nullptr;
      return reply.status();
    }
  }
  if (staging_ttl_for_testing > absl::ZeroDuration()) {
    absl::SleepFor(2 * staging_ttl_for_testing);
  }
  absl::Notification committed;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok() || stopping_) {
      return absl::AbortedError("snapshot dropped: the journal failed");
    }
    Item item{Kind::kSnapshotCommit, point.covered_sequence,
              std::move(staging_key),
              [&result, &committed](const absl::Status& status) {
                result = status;
                committed.Notify();
              }};
    item.generation = point.generation;
    queue_.push_back(std::move(item));
    ++enqueued_;
  }
  committed.WaitForNotification();
  return result;
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

int64_t RedisJournal::removed_unacknowledged_entries() const {
  absl::MutexLock lock(&mu_);
  return removed_unacknowledged_;
}

std::vector<std::string> RedisJournal::unacknowledged_ids() const {
  absl::MutexLock lock(&mu_);
  return unacknowledged_ids_;
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
  std::vector<std::string> ids = unacknowledged_ids();
  absl::MutexLock io_lock(&io_mu_);
  absl::Status connected = ConnectLocked();
  if (!connected.ok()) return connected;
  absl::Status reclaimed = ReclaimLocked(ids);
  if (!reclaimed.ok()) return reclaimed;
  absl::MutexLock lock(&mu_);
  // The writer thread only appends to the list: drop exactly the ids that
  // the script removed.
  unacknowledged_ids_.erase(unacknowledged_ids_.begin(),
                            unacknowledged_ids_.begin() + ids.size());
  failure_ = absl::OkStatus();
  ++generation_;
  return absl::OkStatus();
}

absl::Status RedisJournal::ReclaimLocked(const std::vector<std::string>& ids) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  auto add = [&](std::string_view s) {
    argv.push_back(s.data());
    lens.push_back(s.size());
  };
  add(kEval);
  add(kReclaimScript);
  add(kTwo);
  add(owner_key_);
  add(journal_key_);
  add(owner_token_);
  for (const std::string& id : ids) add(id);
  AppendArgv(context_, argv, lens);
  absl::StatusOr<ReplyPtr> reply = ReadReply(context_);
  if (!reply.ok()) {
    redisFree(context_);
    context_ = nullptr;
    if (reply.status().message().find("FENCED") != absl::string_view::npos) {
      absl::MutexLock lock(&mu_);
      fenced_ = true;
      return absl::FailedPreconditionError(
          absl::StrCat("fenced: ", reply.status().message()));
    }
    return reply.status();
  }
  const redisReply* r = reply->get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    redisFree(context_);
    context_ = nullptr;
    return absl::UnavailableError(
        "redis: unexpected reply of the reclaim script");
  }
  owner_token_value_ = r->element[0]->integer;
  owner_token_ = absl::StrCat(owner_token_value_);
  const int64_t removed = r->element[1]->integer;
  {
    absl::MutexLock lock(&mu_);
    removed_unacknowledged_ += removed;
  }
  spdlog::warn(
      "redis journal reconnected: {} of {} unacknowledged entries were stored "
      "in redis and are removed; new owner token {}",
      removed, ids.size(), owner_token_);
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

absl::Status RedisJournal::WriteBatchLocked(
    std::vector<Item>& batch, std::vector<std::string>* attempted_ids) {
  if (context_ == nullptr) return absl::UnavailableError("redis not connected");
  for (Item& item : batch) {
    if (item.kind != Kind::kEntry) continue;
    item.payload =
        EncodeJournalRecord(owner_token_value_, item.sequence, item.payload);
    attempted_ids->push_back(item.payload.substr(0, kJournalRecordIdBytes));
  }
  // One pipeline: each run of entries is one append script, each snapshot one
  // snapshot script, each background snapshot one commit script. All check
  // the owner token first (fencing) and run atomically in Redis.
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = generation_;
  }
  // Index in `batch` of each pipelined command's first item.
  std::vector<size_t> command_items;
  size_t i = 0;
  while (i < batch.size()) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    auto add = [&](std::string_view s) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    };
    const size_t first = i;
    if (batch[i].kind == Kind::kSnapshotCommit &&
        batch[i].generation != generation) {
      // Taken before a Reconnect(): it may hold unacknowledged entries.
      batch[i].result = absl::AbortedError(
          "snapshot dropped: the journal reconnected since it was taken");
      ++i;
      continue;
    }
    const std::string covered = absl::StrCat(batch[i].sequence);
    if (batch[i].kind == Kind::kSnapshotCommit) {
      add(kEval);
      add(kCommitSnapshotScript);
      add(kFour);
      add(owner_key_);
      add(batch[i].payload);
      add(snapshot_key_);
      add(journal_key_);
      add(owner_token_);
      add(covered);
      ++i;
    } else if (batch[i].kind == Kind::kSnapshot) {
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
      while (i < batch.size() && batch[i].kind == Kind::kEntry) {
        add(batch[i].payload);
        ++i;
      }
    }
    command_items.push_back(first);
    AppendArgv(context_, argv, lens);
  }
  absl::Status first_error;
  for (size_t first : command_items) {
    absl::StatusOr<ReplyPtr> reply = ReadReply(context_);
    if (reply.ok() && batch[first].kind == Kind::kSnapshotCommit) {
      if ((*reply)->type != REDIS_REPLY_INTEGER) {
        batch[first].result =
            absl::InternalError("redis: unexpected reply of the commit script");
      } else if ((*reply)->integer < 0) {
        batch[first].result = absl::NotFoundError(
            "snapshot staging key expired before its commit");
      }
    }
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
      // A snapshot only starts a batch: then every entry it covers was
      // written (and acknowledged) by an earlier, successful batch, so a
      // snapshot never contains the effect of an unacknowledged entry.
      while (!queue_.empty() &&
             static_cast<int>(batch.size()) < options_.max_batch_entries &&
             (batch.empty() || queue_.front().kind == Kind::kEntry)) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      failed = failure_;
    }
    int entries = 0;
    for (const Item& item : batch) entries += item.kind == Kind::kEntry ? 1 : 0;
    absl::Status status = failed;
    std::vector<std::string> attempted_ids;
    if (status.ok()) {
      absl::Time start = absl::Now();
      {
        absl::MutexLock io_lock(&io_mu_);
        status = WriteBatchLocked(batch, &attempted_ids);
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
      // Recorded before any callback answers UNAVAILABLE, so a Reconnect()
      // that follows the answer always removes these entries.
      if (!status.ok()) {
        unacknowledged_ids_.insert(unacknowledged_ids_.end(),
                                   attempted_ids.begin(), attempted_ids.end());
      }
    }
    for (Item& item : batch) {
      if (item.done) item.done(status.ok() ? item.result : status);
    }
    absl::MutexLock lock(&mu_);
    written_ += static_cast<int64_t>(batch.size());
  }
}

}  // namespace radixkv::cache_service
