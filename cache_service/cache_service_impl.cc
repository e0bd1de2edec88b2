#include "cache_service/cache_service_impl.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/journal_entry.h"
#include "cache_service/rpc_apply.h"
#include "process/grpc_status.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

int64_t UnixMillis() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

CacheServiceImpl::CacheServiceImpl(CacheServiceOptions options,
                                   std::unique_ptr<RedisJournal> journal,
                                   std::shared_ptr<CacheMetrics> metrics)
    : options_(std::move(options)),
      journal_(std::move(journal)),
      metrics_(std::move(metrics)),
      state_(options_.cache) {}

absl::StatusOr<std::unique_ptr<CacheServiceImpl>> CacheServiceImpl::Create(
    CacheServiceOptions options, std::unique_ptr<RedisJournal> journal,
    std::shared_ptr<CacheMetrics> metrics) {
  if (!options.clock_ms) options.clock_ms = UnixMillis;
  if (options.max_prompt_tokens < 1 ||
      options.max_prompt_tokens > kMaxPromptTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_prompt_tokens must be in [1, ", kMaxPromptTokens, "]"));
  }
  if (options.snapshot_every_ops < 1) {
    return absl::InvalidArgumentError("snapshot_every_ops must be >= 1");
  }
  if (!(options.snapshot_journal_ratio > 0)) {
    return absl::InvalidArgumentError("snapshot_journal_ratio must be > 0");
  }
  std::unique_ptr<CacheServiceImpl> service(new CacheServiceImpl(
      std::move(options), std::move(journal), std::move(metrics)));
  if (service->journal_ != nullptr && service->options_.background_snapshots) {
    service->snapshotter_ = std::make_unique<ForkedSnapshotter>(
        service->journal_.get(), service->options_.forked_snapshot);
  }
  {
    absl::MutexLock lock(&service->mu_);
    if (service->journal_ != nullptr) {
      absl::Status recovered = service->RecoverLocked();
      if (!recovered.ok()) return recovered;
    }
    // A pause before the first sweep counts from here (or from the last
    // journaled operation, which RecoverLocked took).
    if (service->last_sweep_ms_ == 0) {
      service->last_sweep_ms_ = service->NowLocked();
    }
  }
  service->RefreshMetrics();
  return service;
}

CacheServiceImpl::~CacheServiceImpl() {
  stop_sweep_.Notify();
  if (sweep_thread_.joinable()) sweep_thread_.join();
  snapshotter_.reset();  // drops a snapshot in flight: nothing is trimmed
  if (journal_ != nullptr) {
    absl::Status flushed = journal_->Flush();
    if (!flushed.ok()) {
      spdlog::error("journal flush at shutdown: {}", flushed.ToString());
    }
  }
}

absl::Status CacheServiceImpl::RecoverLocked() {
  absl::StatusOr<RedisJournal::Contents> contents = journal_->Load();
  if (!contents.ok()) return contents.status();
  CacheState fresh(options_.cache);
  int64_t last_now = 0;
  RecoveryReport report;
  if (contents->snapshot.has_value()) {
    absl::StatusOr<SnapshotBlob> blob = DecodeSnapshotBlob(*contents->snapshot);
    if (!blob.ok()) return blob.status();
    last_now = blob->last_now_ms;
    absl::Status restored = fresh.Restore(blob->state);
    if (!restored.ok()) {
      return absl::DataLossError(absl::StrCat(
          "cannot restore the redis snapshot: ", restored.ToString()));
    }
    report.had_snapshot = true;
  }
  state_ = std::move(fresh);
  for (const std::string& entry : contents->entries) {
    absl::StatusOr<JournalEntry> decoded = DecodeJournalEntry(entry);
    if (!decoded.ok()) return decoded.status();
    const int64_t now_ms = decoded->now_ms;
    absl::Status replayed = ReplayJournalEntry(state_, *decoded);
    if (replayed.code() == absl::StatusCode::kDataLoss) return replayed;
    if (!replayed.ok()) {
      ++report.replay_errors;
      spdlog::error("journal replay of op {} at {} ms failed: {}",
                    static_cast<int>(decoded->op), now_ms, replayed.ToString());
    }
    ++report.replayed_entries;
    last_now = std::max(last_now, now_ms);
  }
  last_now_ms_ = std::max(last_now_ms_, last_now);
  last_now_ms_for_read_.store(last_now_ms_);
  // The process at a worker's address may have restarted while this
  // service was down: its residency must not attract placements until the
  // worker confirms its epoch. And the time since the last journaled
  // operation, when nobody could be heard, is credited by the next sweep.
  state_.MarkWorkersUnconfirmed();
  last_sweep_ms_ = last_now;
  absl::Status invariants = state_.CheckInvariants();
  if (!invariants.ok()) {
    return absl::InternalError(
        absl::StrCat("state recovered from redis violates invariants: ",
                     invariants.ToString()));
  }
  recovery_ = report;
  spdlog::info(
      "recovered state from redis: snapshot={}, replayed {} journal entries "
      "({} errors)",
      report.had_snapshot, report.replayed_entries, report.replay_errors);
  // Compact: the recovered state becomes the snapshot.
  SnapshotLocked();
  return journal_->Flush();
}

int64_t CacheServiceImpl::NowLocked() {
  last_now_ms_ = std::max(last_now_ms_, options_.clock_ms());
  last_now_ms_for_read_.store(last_now_ms_, std::memory_order_relaxed);
  return last_now_ms_;
}

int64_t CacheServiceImpl::NowForRead() const {
  return std::max(options_.clock_ms(),
                  last_now_ms_for_read_.load(std::memory_order_relaxed));
}

absl::Status CacheServiceImpl::OutOfMemoryLocked(CacheRpc rpc) {
  const std::string what = absl::StrCat(
      "the cache service ran out of memory applying ", CacheRpcName(rpc));
  if (journal_ != nullptr) {
    // The call may be half applied; Redis holds the state without it.
    spdlog::error("{}; rebuilding the state from redis", what);
    if (!journal_broken_.exchange(true) && options_.availability_observer) {
      options_.availability_observer(false);
    }
    return absl::ResourceExhaustedError(
        what + "; it is not applied (the state is rebuilt from redis)");
  }
  absl::Status invariants;
  try {
    invariants = state_.CheckInvariants();
  } catch (const std::bad_alloc&) {
    invariants = absl::ResourceExhaustedError("out of memory");
  }
  if (invariants.ok()) return absl::ResourceExhaustedError(what);
  spdlog::critical("{}; the in-memory state may be inconsistent ({})", what,
                   invariants.ToString());
  return absl::InternalError(absl::StrCat(
      what, "; the in-memory state may be inconsistent: restart the service"));
}

absl::Status CacheServiceImpl::Available() const {
  if (journal_broken_.load()) {
    return absl::UnavailableError(
        "the redis journal cannot be written; the service is rebuilding its "
        "state from redis");
  }
  return absl::OkStatus();
}

void CacheServiceImpl::Finish(grpc::ServerUnaryReactor* reactor, CacheRpc rpc,
                              absl::Time start, const absl::Status& status) {
  Observe(rpc, start, status);
  reactor->Finish(process::ToGrpcStatus(status));
}

ForkedSnapshotStats CacheServiceImpl::snapshot_stats() const {
  if (snapshotter_ != nullptr) return snapshotter_->stats();
  absl::ReaderMutexLock lock(&mu_);
  return inline_snapshot_stats_;
}

absl::Status CacheServiceImpl::WaitForSnapshot() const {
  return snapshotter_ != nullptr ? snapshotter_->WaitIdle() : absl::OkStatus();
}

void CacheServiceImpl::SnapshotLocked() {
  std::string blob = EncodeSnapshotBlob(last_now_ms_, state_.Serialize());
  last_snapshot_bytes_ = static_cast<int64_t>(blob.size());
  journal_->AppendSnapshot(std::move(blob));
  ops_since_snapshot_ = 0;
  bytes_since_snapshot_ = 0;
}

void CacheServiceImpl::JournalLocked(JournalOp op, int64_t now_ms,
                                     std::string payload,
                                     RedisJournal::DoneCallback done) {
  std::string entry = EncodeJournalEntry(op, now_ms, payload);
  bytes_since_snapshot_ += static_cast<int64_t>(entry.size());
  const int64_t sequence = journal_->Append(std::move(entry), std::move(done));
  if (++ops_since_snapshot_ < options_.snapshot_every_ops ||
      static_cast<double>(bytes_since_snapshot_) <
          options_.snapshot_journal_ratio *
              static_cast<double>(last_snapshot_bytes_)) {
    return;
  }
  if (snapshotter_ == nullptr) {
    const absl::Time start = absl::Now();
    SnapshotLocked();
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    ForkedSnapshotStats& stats = inline_snapshot_stats_;
    ++stats.started;
    ++stats.succeeded;
    stats.last_fork_ms = ms;
    stats.max_fork_ms = std::max(stats.max_fork_ms, ms);
    stats.total_fork_ms += ms;
    stats.last_bytes = last_snapshot_bytes_;
    return;
  }
  // sequence 0: the journal failed (the repair takes a fresh snapshot).
  if (sequence == 0 || snapshotter_->busy()) return;
  const ForkedSnapshotStats stats = snapshotter_->stats();
  if (stats.last_bytes > 0) last_snapshot_bytes_ = stats.last_bytes;
  // The child reads its copy-on-write view of state_ (see forked_snapshot.h).
  const CacheState* state = &state_;
  absl::Status started = snapshotter_->Start([state, last_now = last_now_ms_] {
    return EncodeSnapshotBlob(last_now, state->Serialize());
  });
  if (!started.ok()) {
    spdlog::error("background snapshot not started ({}); snapshotting inline",
                  started.ToString());
    SnapshotLocked();
    return;
  }
  ops_since_snapshot_ = 0;
  bytes_since_snapshot_ = 0;
}

void CacheServiceImpl::Observe(CacheRpc rpc, absl::Time start,
                               const absl::Status& status) {
  if (metrics_ != nullptr) {
    metrics_->ObserveRpc(rpc, status.code(),
                         absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void CacheServiceImpl::JournalThenDoneLocked(
    CacheRpc rpc, absl::Time start, JournalOp op, int64_t now_ms,
    const google::protobuf::Message& request, MutationDone done) {
  JournalLocked(
      op, now_ms, request.SerializeAsString(),
      [this, rpc, start, done = std::move(done)](const absl::Status& status) {
        absl::Status result = absl::OkStatus();
        if (!status.ok()) {
          MarkJournalBroken();
          result = absl::UnavailableError(
              absl::StrCat("journal write failed: ", status.message()));
        }
        Observe(rpc, start, result);
        done(result);
      });
}

void CacheServiceImpl::StartBackgroundSweep() {
  if (sweep_thread_.joinable()) return;
  sweep_thread_ = std::thread([this] {
    while (
        !stop_sweep_.WaitForNotificationWithTimeout(options_.sweep_interval)) {
      SweepOnce();
    }
  });
}

int CacheServiceImpl::SweepOnce() {
  if (journal_broken_.load()) RepairJournal();
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!journal_broken_.load()) {
      const int64_t now_ms = NowLocked();
      const int64_t paused_ms = PauseBeforeSweepLocked(now_ms);
      auto [num_expired, num_dropped] = ApplySweep(state_, now_ms, paused_ms);
      expired = num_expired;
      if (paused_ms > 0 || num_expired > 0 || num_dropped > 0) {
        spdlog::info(
            "sweep at {} ms: {} leases expired, {} workers dropped{}", now_ms,
            num_expired, num_dropped,
            paused_ms > 0
                ? absl::StrCat(", after a pause of the service of ", paused_ms,
                               " ms credited to every worker and lease")
                : "");
        if (journal_ != nullptr) {
          JournalLocked(JournalOp::kSweep, now_ms,
                        EncodeSweepPayload(paused_ms),
                        [this](const absl::Status& status) {
                          if (!status.ok()) MarkJournalBroken();
                        });
        }
      }
    }
  }
  RefreshMetrics();
  return expired;
}

int64_t CacheServiceImpl::PauseBeforeSweepLocked(int64_t now_ms) {
  const int64_t interval_ms =
      absl::ToInt64Milliseconds(options_.sweep_interval);
  const int64_t gap_ms = now_ms - last_sweep_ms_;
  last_sweep_ms_ = now_ms;
  // Scheduling jitter is not a pause; one interval is the sweep's own.
  return gap_ms > 2 * interval_ms ? gap_ms - interval_ms : 0;
}

void CacheServiceImpl::MarkJournalBroken() {
  if (metrics_ != nullptr) {
    metrics_->AddJournalWriteError();
    metrics_->SetRedisUp(false);
  }
  if (!journal_broken_.exchange(true) && options_.availability_observer) {
    options_.availability_observer(false);
  }
}

void CacheServiceImpl::RepairJournal() {
  if (journal_->fenced()) {
    if (!fenced_reported_.exchange(true)) {
      spdlog::critical(
          "another cache_service opened the redis journal (its owner token "
          "changed); this process stays UNAVAILABLE (health NOT_SERVING) "
          "until it is restarted");
    }
    return;
  }
  absl::Status reconnected = journal_->Reconnect();
  if (!reconnected.ok()) {
    spdlog::warn("redis journal still unavailable: {}", reconnected.ToString());
    return;
  }
  absl::MutexLock lock(&mu_);
  absl::Status recovered = RecoverLocked();
  if (!recovered.ok()) {
    spdlog::error("rebuilding state from redis failed: {}",
                  recovered.ToString());
    return;
  }
  journal_broken_.store(false);
  if (metrics_ != nullptr) metrics_->SetRedisUp(true);
  if (options_.availability_observer) options_.availability_observer(true);
  spdlog::info("redis journal repaired; state rebuilt from redis");
}

void CacheServiceImpl::RefreshMetrics() {
  if (metrics_ == nullptr || journal_broken_.load()) return;
  absl::StatusOr<StatsResult> result;
  {
    absl::ReaderMutexLock lock(&mu_);
    result = state_.Stats("", NowForRead());
  }
  if (!result.ok()) return;
  pb::StatsResponse stats;
  FillStats(*result, &stats);
  metrics_->UpdateFromStats(stats);
}

std::string CacheServiceImpl::CanonicalDumpForTest() {
  absl::ReaderMutexLock lock(&mu_);
  return state_.CanonicalDump();
}

absl::Status CacheServiceImpl::CheckInvariantsForTest() {
  absl::ReaderMutexLock lock(&mu_);
  return state_.CheckInvariants();
}

}  // namespace radixkv::cache_service
