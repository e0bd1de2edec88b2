#include "cache_service/cache_service_impl.h"

#include <cstring>
#include <deque>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/generate_request_checks.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

// Snapshot blob = kSnapshotMagic, int64 last_now_ms (little endian), then
// CacheState::Serialize().
constexpr std::string_view kSnapshotMagic = "RKVSNAP1";
// Journal entry = uint8 JournalOp, int64 now_ms (little endian), then the
// serialized request proto (empty for kSweep).
constexpr size_t kEntryHeaderBytes = 1 + 8;
// Dump replies above this are refused (the proto's 64 MiB bound, with room
// for framing).
constexpr size_t kMaxDumpBytes = (64u << 20) - 4096;

void PutInt64(std::string* out, int64_t value) {
  uint64_t v = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// The Redis snapshot blob of `state` (see kSnapshotMagic).
std::string SnapshotBlob(const CacheState& state, int64_t last_now_ms) {
  std::string blob(kSnapshotMagic);
  PutInt64(&blob, last_now_ms);
  blob += state.Serialize();
  return blob;
}

int64_t GetInt64(std::string_view in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return static_cast<int64_t>(v);
}

// Longest status message sent, bytes. Messages echo client input (e.g.
// "unknown worker <worker_id>"); gRPC carries them in trailing metadata,
// whose default limit on the client is 8 KiB: a longer one reaches the client
// as RESOURCE_EXHAUSTED "received initial metadata size exceeds limit"
// instead of the real status.
constexpr size_t kMaxStatusMessageBytes = 1024;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    size_t cut = kMaxStatusMessageBytes;
    // Not inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
    while (cut > 0 &&
           (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) {
      --cut;
    }
    message = absl::StrCat(message.substr(0, cut), "... (truncated from ",
                           status.message().size(), " bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::move(message));
}

int64_t UnixMillis() { return absl::ToUnixMillis(absl::Now()); }

std::vector<int32_t> ToVector(
    const google::protobuf::RepeatedField<int32_t>& tokens) {
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

WorkerLoad FromProto(const pb::WorkerLoad& load) {
  WorkerLoad out;
  out.running_requests = load.running_requests();
  out.waiting_requests = load.waiting_requests();
  out.outstanding_tokens = load.outstanding_tokens();
  out.available_slots = load.available_slots();
  return out;
}

void ToProto(const WorkerLoad& load, pb::WorkerLoad* out) {
  out->set_running_requests(load.running_requests);
  out->set_waiting_requests(load.waiting_requests);
  out->set_outstanding_tokens(load.outstanding_tokens);
  out->set_available_slots(load.available_slots);
}

void ToProto(const std::vector<CopyOp>& ops,
             google::protobuf::RepeatedPtrField<pb::CopyOp>* out) {
  out->Reserve(static_cast<int>(ops.size()));
  for (const CopyOp& op : ops) {
    pb::CopyOp* o = out->Add();
    o->set_src_page(op.src_page);
    o->set_dst_page(op.dst_page);
    o->set_num_tokens(op.num_tokens);
  }
}

void ToProto(const std::vector<int64_t>& v,
             google::protobuf::RepeatedField<int64_t>* out) {
  out->Assign(v.begin(), v.end());
}

// ---- One function per state-changing RPC: proto in, core call, proto out.
// Used both live and for journal replay, so both take the same path (a live
// Register adds a read-only admission check first: AdmitAndApplyRegister).

RegisterWorkerRequest FromProto(const pb::RegisterRequest& req) {
  RegisterWorkerRequest r;
  r.worker_id = req.worker_id();
  r.address = req.address();
  r.capacity_slots = req.capacity_slots();
  r.page_size = req.page_size();
  r.model = req.model();
  r.epoch = req.epoch();
  r.vocab_size = req.vocab_size();
  r.metrics_address = req.metrics_address();
  return r;
}

absl::Status ApplyRegister(CacheState& state, const pb::RegisterRequest& req,
                           int64_t now_ms, pb::RegisterResponse* resp) {
  absl::StatusOr<RegisterWorkerResult> result =
      state.RegisterWorker(FromProto(req), now_ms);
  if (!result.ok()) return result.status();
  resp->set_epoch(result->epoch);
  resp->set_lease_ttl_ms(result->lease_ttl_ms);
  resp->set_heartbeat_timeout_ms(result->heartbeat_timeout_ms);
  resp->set_heartbeat_interval_ms(result->heartbeat_interval_ms);
  return absl::OkStatus();
}

// The live Register: ApplyRegister behind the admission checks of the
// metadata bounds and the vocabulary (CacheState::CheckRegisterWithinBounds,
// CheckVocabAgreesWithLiveWorkers). A rejected call is not journaled;
// replay uses ApplyRegister alone, so journals written before a check
// existed, or under other bounds, replay as they did.
absl::Status AdmitAndApplyRegister(CacheState& state,
                                   const pb::RegisterRequest& req,
                                   int64_t now_ms, pb::RegisterResponse* resp) {
  const RegisterWorkerRequest r = FromProto(req);
  absl::Status s = state.CheckRegisterWithinBounds(r);
  if (s.ok()) s = state.CheckVocabAgreesWithLiveWorkers(r, now_ms);
  if (!s.ok()) return s;
  return ApplyRegister(state, req, now_ms, resp);
}

absl::Status ApplyHeartbeat(CacheState& state, const pb::HeartbeatRequest& req,
                            int64_t now_ms, pb::HeartbeatResponse* resp) {
  HeartbeatRequest r;
  r.worker_id = req.worker_id();
  r.epoch = req.epoch();
  r.load = FromProto(req.load());
  r.lease_ids.assign(req.lease_ids().begin(), req.lease_ids().end());
  absl::StatusOr<HeartbeatResult> result = state.Heartbeat(r, now_ms);
  if (!result.ok()) return result.status();
  resp->mutable_lost_lease_ids()->Assign(result->lost_lease_ids.begin(),
                                         result->lost_lease_ids.end());
  return absl::OkStatus();
}

absl::Status ApplyDeregister(CacheState& state,
                             const pb::DeregisterRequest& req, int64_t now_ms,
                             pb::DeregisterResponse* resp) {
  absl::StatusOr<DeregisterResult> result =
      state.DeregisterWorker(req.worker_id(), req.epoch(), now_ms);
  if (!result.ok()) return result.status();
  resp->set_released_leases(result->released_leases);
  return absl::OkStatus();
}

absl::Status ApplyAcquire(CacheState& state, const pb::AcquireRequest& req,
                          int64_t now_ms, pb::AcquireResponse* resp) {
  AcquireRequest r;
  r.worker_id = req.worker_id();
  r.epoch = req.epoch();
  r.model = req.model();
  r.cache_salt = req.cache_salt();
  r.tokens = ToVector(req.tokens());
  r.priority = req.priority();
  r.reserve_tokens = req.reserve_tokens();
  r.request_id = req.request_id();
  r.disable_match = req.disable_match();
  absl::StatusOr<AcquireResult> result = state.Acquire(r, now_ms);
  if (!result.ok()) return result.status();
  resp->set_lease_id(result->lease_id);
  resp->set_prefix_len(result->prefix_len);
  ToProto(result->kv_indices, resp->mutable_kv_indices());
  ToProto(result->copy_ops, resp->mutable_copy_ops());
  resp->set_lease_ttl_ms(result->lease_ttl_ms);
  resp->set_page_aligned_prefix_len(result->page_aligned_prefix_len);
  return absl::OkStatus();
}

absl::Status ApplyGrow(CacheState& state, const pb::GrowRequest& req,
                       int64_t now_ms, pb::GrowResponse* resp) {
  GrowRequest r;
  r.lease_id = req.lease_id();
  r.num_tokens = req.num_tokens();
  absl::StatusOr<GrowResult> result = state.Grow(r, now_ms);
  if (!result.ok()) return result.status();
  ToProto(result->kv_indices, resp->mutable_kv_indices());
  ToProto(result->copy_ops, resp->mutable_copy_ops());
  resp->set_first_remapped_position(result->first_remapped_position);
  ToProto(result->remapped_kv_indices, resp->mutable_remapped_kv_indices());
  return absl::OkStatus();
}

absl::Status ApplyFork(CacheState& state, const pb::ForkRequest& req,
                       int64_t now_ms, pb::ForkResponse* resp) {
  ForkRequest r;
  r.lease_id = req.lease_id();
  r.num_children = req.num_children();
  r.num_tokens = req.num_tokens();
  absl::StatusOr<ForkResult> result = state.Fork(r, now_ms);
  if (!result.ok()) return result.status();
  for (const ForkedLease& child : result->children) {
    pb::ForkResponse::Child* c = resp->add_children();
    c->set_lease_id(child.lease_id);
    ToProto(child.kv_indices, c->mutable_kv_indices());
  }
  return absl::OkStatus();
}

CommitRequest FromProto(const pb::CommitRequest& req) {
  CommitRequest r;
  r.lease_id = req.lease_id();
  r.tokens = ToVector(req.tokens());
  r.keep_lease = req.keep_lease();
  return r;
}

absl::Status ApplyCommit(CacheState& state, const pb::CommitRequest& req,
                         int64_t now_ms, pb::CommitResponse* resp) {
  absl::StatusOr<CommitResult> result = state.Commit(FromProto(req), now_ms);
  if (!result.ok()) return result.status();
  resp->set_inserted_tokens(result->inserted_tokens);
  resp->set_freed_slots(result->freed_slots);
  ToProto(result->kv_indices, resp->mutable_kv_indices());
  return absl::OkStatus();
}

// The live Commit: ApplyCommit behind the tree-count bound
// (CacheState::CheckCommitWithinBounds); replay uses ApplyCommit alone.
absl::Status AdmitAndApplyCommit(CacheState& state,
                                 const pb::CommitRequest& req, int64_t now_ms,
                                 pb::CommitResponse* resp) {
  if (absl::Status s = state.CheckCommitWithinBounds(FromProto(req), now_ms);
      !s.ok()) {
    return s;
  }
  return ApplyCommit(state, req, now_ms, resp);
}

absl::Status ApplyRelease(CacheState& state, const pb::ReleaseRequest& req,
                          int64_t now_ms, pb::ReleaseResponse* resp) {
  absl::StatusOr<ReleaseResult> result = state.Release(req.lease_id(), now_ms);
  if (!result.ok()) return result.status();
  resp->set_freed_slots(result->freed_slots);
  return absl::OkStatus();
}

absl::Status ApplyEvict(CacheState& state, const pb::EvictRequest& req,
                        int64_t now_ms, pb::EvictResponse* resp) {
  absl::StatusOr<EvictResult> result =
      state.Evict(req.worker_id(), req.num_tokens(), now_ms);
  if (!result.ok()) return result.status();
  resp->set_evicted_tokens(result->evicted_tokens);
  return absl::OkStatus();
}

absl::Status ApplyFlush(CacheState& state, const pb::FlushRequest& req,
                        int64_t now_ms, pb::FlushResponse* resp) {
  absl::StatusOr<FlushResult> result = state.Flush(req.worker_id(), now_ms);
  if (!result.ok()) return result.status();
  resp->set_evicted_tokens(result->evicted_tokens);
  return absl::OkStatus();
}

// The journal payload of a sweep: empty, or the pause it credited (8 bytes,
// little endian; journals written before pauses were credited have none).
std::string SweepPayload(int64_t paused_ms) {
  std::string payload;
  if (paused_ms > 0) PutInt64(&payload, paused_ms);
  return payload;
}

// Credit of a pause (CacheState::CreditServicePause), then expiry +
// dead-worker sweep at now_ms; returns {expired, dropped}.
std::pair<int, int> ApplySweep(CacheState& state, int64_t now_ms,
                               int64_t paused_ms) {
  state.CreditServicePause(paused_ms, now_ms);
  ExpireResult expired = state.ExpireLeases(now_ms);
  DropResult dropped = state.DropDeadWorkers(now_ms);
  return {static_cast<int>(expired.expired.size()),
          static_cast<int>(dropped.dropped_worker_ids.size())};
}

template <typename Request, typename Response>
absl::Status ReplayWith(CacheState& state, std::string_view payload,
                        int64_t now_ms,
                        absl::Status (*apply)(CacheState&, const Request&,
                                              int64_t, Response*)) {
  Request request;
  if (!request.ParseFromArray(payload.data(),
                              static_cast<int>(payload.size()))) {
    return absl::DataLossError("undecodable journal entry");
  }
  Response response;
  return apply(state, request, now_ms, &response);
}

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
    std::string_view blob = *contents->snapshot;
    if (blob.size() < kSnapshotMagic.size() + 8 ||
        blob.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
      return absl::DataLossError("redis snapshot has an unknown format");
    }
    last_now = GetInt64(blob.substr(kSnapshotMagic.size(), 8));
    absl::Status restored =
        fresh.Restore(blob.substr(kSnapshotMagic.size() + 8));
    if (!restored.ok()) {
      return absl::DataLossError(absl::StrCat(
          "cannot restore the redis snapshot: ", restored.ToString()));
    }
    report.had_snapshot = true;
  }
  state_ = std::move(fresh);
  for (const std::string& entry : contents->entries) {
    if (entry.size() < kEntryHeaderBytes) {
      return absl::DataLossError("truncated journal entry");
    }
    JournalOp op = static_cast<JournalOp>(static_cast<uint8_t>(entry[0]));
    int64_t now_ms = GetInt64(std::string_view(entry).substr(1, 8));
    absl::Status replayed = ReplayLocked(
        op, now_ms, std::string_view(entry).substr(kEntryHeaderBytes));
    if (replayed.code() == absl::StatusCode::kDataLoss) return replayed;
    if (!replayed.ok()) {
      ++report.replay_errors;
      spdlog::error("journal replay of op {} at {} ms failed: {}",
                    static_cast<int>(op), now_ms, replayed.ToString());
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

absl::Status CacheServiceImpl::ReplayLocked(JournalOp op, int64_t now_ms,
                                            std::string_view payload) {
  switch (op) {
    case JournalOp::kRegister:
      return ReplayWith(state_, payload, now_ms, &ApplyRegister);
    case JournalOp::kHeartbeat:
      return ReplayWith(state_, payload, now_ms, &ApplyHeartbeat);
    case JournalOp::kDeregister:
      return ReplayWith(state_, payload, now_ms, &ApplyDeregister);
    case JournalOp::kAcquire:
      return ReplayWith(state_, payload, now_ms, &ApplyAcquire);
    case JournalOp::kGrow:
      return ReplayWith(state_, payload, now_ms, &ApplyGrow);
    case JournalOp::kFork:
      return ReplayWith(state_, payload, now_ms, &ApplyFork);
    case JournalOp::kCommit:
      return ReplayWith(state_, payload, now_ms, &ApplyCommit);
    case JournalOp::kRelease:
      return ReplayWith(state_, payload, now_ms, &ApplyRelease);
    case JournalOp::kEvict:
      return ReplayWith(state_, payload, now_ms, &ApplyEvict);
    case JournalOp::kFlush:
      return ReplayWith(state_, payload, now_ms, &ApplyFlush);
    case JournalOp::kSweep:
      if (!payload.empty() && payload.size() != 8) {
        return absl::DataLossError("sweep journal entry of a bad size");
      }
      ApplySweep(state_, now_ms, payload.empty() ? 0 : GetInt64(payload));
      return absl::OkStatus();
  }
  return absl::DataLossError(
      absl::StrCat("unknown journal op ", static_cast<int>(op)));
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
  reactor->Finish(ToGrpc(status));
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
  std::string blob = SnapshotBlob(state_, last_now_ms_);
  last_snapshot_bytes_ = static_cast<int64_t>(blob.size());
  journal_->AppendSnapshot(std::move(blob));
  ops_since_snapshot_ = 0;
  bytes_since_snapshot_ = 0;
}

void CacheServiceImpl::JournalLocked(JournalOp op, int64_t now_ms,
                                     std::string payload,
                                     RedisJournal::DoneCallback done) {
  std::string entry;
  entry.reserve(kEntryHeaderBytes + payload.size());
  entry.push_back(static_cast<char>(op));
  PutInt64(&entry, now_ms);
  entry += payload;
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
    return SnapshotBlob(*state, last_now);
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

template <typename Request, typename Response>
void CacheServiceImpl::RunMutation(
    CacheRpc rpc, JournalOp op, const Request& request, Response* response,
    absl::Status (*apply)(CacheState&, const Request&, int64_t, Response*),
    absl::Status validation, MutationDone done) {
  const absl::Time start = absl::Now();
  absl::Status status = std::move(validation);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    const absl::Time locked = absl::Now();
    // How long this mutation holds mu_ (Match waits for it), us.
    auto log_hold = [&] {
      if (!spdlog::should_log(spdlog::level::debug)) return;
      spdlog::debug("{} held mu_ from {} us for {} us (waited {} us)",
                    CacheRpcName(rpc), absl::ToUnixMicros(locked),
                    absl::ToInt64Microseconds(absl::Now() - locked),
                    absl::ToInt64Microseconds(locked - start));
    };
    status = Available();
    if (status.ok()) {
      const int64_t now_ms = NowLocked();
      try {
        status = apply(state_, request, now_ms, response);
      } catch (const std::bad_alloc&) {
        status = OutOfMemoryLocked(rpc);
      }
      if (status.ok() && journal_ != nullptr) {
        // Acknowledged by the journal's callback once durable.
        JournalThenDoneLocked(rpc, start, op, now_ms, request, std::move(done));
        log_hold();
        return;
      }
    }
    log_hold();
  }
  if (!status.ok()) response->Clear();
  Observe(rpc, start, status);
  done(status);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* CacheServiceImpl::HandleMutation(
    grpc::CallbackServerContext* context, CacheRpc rpc, JournalOp op,
    const Request* request, Response* response,
    absl::Status (*apply)(CacheState&, const Request&, int64_t, Response*),
    absl::Status validation) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RunMutation(rpc, op, *request, response, apply, std::move(validation),
              [reactor](const absl::Status& status) {
                reactor->Finish(ToGrpc(status));
              });
  return reactor;
}

absl::Status CacheServiceImpl::ValidateTokens(
    const google::protobuf::RepeatedField<int32_t>& tokens) const {
  if (tokens.empty()) return absl::InvalidArgumentError("tokens is empty");
  if (tokens.size() > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens has ", tokens.size(), " ids; at most ",
                     options_.max_prompt_tokens, " (--max_prompt_tokens)"));
  }
  return absl::OkStatus();
}

namespace {

// Strings the service stores (in the state, its dumps and the journal) are
// bounded so that no request can make them grow without limit.
constexpr size_t kMaxAddressBytes = 256;
constexpr size_t kMaxModelBytes = 256;

absl::Status CheckLength(const char* field, const std::string& value,
                         size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " has ", value.size(), " bytes; at most ", max_bytes));
}

absl::Status ValidateRegister(const pb::RegisterRequest& request) {
  absl::Status s = CheckLength("address", request.address(), kMaxAddressBytes);
  if (s.ok()) {
    s = CheckLength("metrics_address", request.metrics_address(),
                    kMaxAddressBytes);
  }
  if (s.ok()) s = CheckLength("model", request.model(), kMaxModelBytes);
  return s;
}

}  // namespace

absl::Status CacheServiceImpl::ValidateAcquire(
    const pb::AcquireRequest& request) const {
  absl::Status status = ValidateTokens(request.tokens());
  if (!status.ok()) return status;
  return CheckLength("request_id", request.request_id(),
                     radixkv::v1::kMaxRequestIdBytes);
}

absl::Status CacheServiceImpl::ValidateCommit(
    const pb::CommitRequest& request) const {
  if (request.tokens().empty()) {
    return absl::InvalidArgumentError("tokens is empty");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CacheServiceImpl::Register(
    grpc::CallbackServerContext* context, const pb::RegisterRequest* request,
    pb::RegisterResponse* response) {
  return HandleMutation(context, CacheRpc::kRegister, JournalOp::kRegister,
                        request, response, &AdmitAndApplyRegister,
                        ValidateRegister(*request));
}

grpc::ServerUnaryReactor* CacheServiceImpl::Heartbeat(
    grpc::CallbackServerContext* context, const pb::HeartbeatRequest* request,
    pb::HeartbeatResponse* response) {
  return HandleMutation(context, CacheRpc::kHeartbeat, JournalOp::kHeartbeat,
                        request, response, &ApplyHeartbeat, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Deregister(
    grpc::CallbackServerContext* context, const pb::DeregisterRequest* request,
    pb::DeregisterResponse* response) {
  return HandleMutation(context, CacheRpc::kDeregister, JournalOp::kDeregister,
                        request, response, &ApplyDeregister, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Acquire(
    grpc::CallbackServerContext* context, const pb::AcquireRequest* request,
    pb::AcquireResponse* response) {
  return HandleMutation(context, CacheRpc::kAcquire, JournalOp::kAcquire,
                        request, response, &ApplyAcquire,
                        ValidateAcquire(*request));
}

grpc::ServerUnaryReactor* CacheServiceImpl::Grow(
    grpc::CallbackServerContext* context, const pb::GrowRequest* request,
    pb::GrowResponse* response) {
  return HandleMutation(context, CacheRpc::kGrow, JournalOp::kGrow, request,
                        response, &ApplyGrow, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Fork(
    grpc::CallbackServerContext* context, const pb::ForkRequest* request,
    pb::ForkResponse* response) {
  return HandleMutation(context, CacheRpc::kFork, JournalOp::kFork, request,
                        response, &ApplyFork, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Commit(
    grpc::CallbackServerContext* context, const pb::CommitRequest* request,
    pb::CommitResponse* response) {
  return HandleMutation(context, CacheRpc::kCommit, JournalOp::kCommit, request,
                        response, &AdmitAndApplyCommit,
                        ValidateCommit(*request));
}

grpc::ServerUnaryReactor* CacheServiceImpl::Release(
    grpc::CallbackServerContext* context, const pb::ReleaseRequest* request,
    pb::ReleaseResponse* response) {
  return HandleMutation(context, CacheRpc::kRelease, JournalOp::kRelease,
                        request, response, &ApplyRelease, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Evict(
    grpc::CallbackServerContext* context, const pb::EvictRequest* request,
    pb::EvictResponse* response) {
  return HandleMutation(context, CacheRpc::kEvict, JournalOp::kEvict, request,
                        response, &ApplyEvict, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Flush(
    grpc::CallbackServerContext* context, const pb::FlushRequest* request,
    pb::FlushResponse* response) {
  return HandleMutation(context, CacheRpc::kFlush, JournalOp::kFlush, request,
                        response, &ApplyFlush, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheServiceImpl::Match(
    grpc::CallbackServerContext* context, const pb::MatchRequest* request,
    pb::MatchResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status status = ValidateTokens(request->tokens());
  if (status.ok()) status = Available();
  if (status.ok()) {
    MatchRequest r;
    r.model = request->model();
    r.cache_salt = request->cache_salt();
    r.tokens = ToVector(request->tokens());
    absl::StatusOr<MatchResult> result;
    const absl::Time waiting = absl::Now();
    absl::Time locked;
    {
      absl::ReaderMutexLock lock(&mu_);
      locked = absl::Now();
      try {
        result = state_.Match(r, NowForRead());
      } catch (const std::bad_alloc&) {
        result = absl::ResourceExhaustedError(
            "the cache service ran out of memory answering Match");
      }
    }
    if (spdlog::should_log(spdlog::level::debug)) {
      const auto& md = context->client_metadata();
      auto id = md.find(kRequestIdMetadataKey);
      // Phases, us: before the lock, waiting for mu_, matching under it.
      spdlog::debug(
          "match {} at {} us: prepare {} + lock_wait {} + match {}",
          id == md.end() ? std::string("-")
                         : std::string(id->second.data(), id->second.size()),
          absl::ToUnixMicros(start), absl::ToInt64Microseconds(waiting - start),
          absl::ToInt64Microseconds(locked - waiting),
          absl::ToInt64Microseconds(absl::Now() - locked));
    }
    status = result.status();
    if (result.ok()) {
      response->mutable_workers()->Reserve(
          static_cast<int>(result->workers.size()));
      for (const WorkerMatch& w : result->workers) {
        pb::WorkerMatch* m = response->add_workers();
        m->set_worker_id(w.worker_id);
        m->set_address(w.address);
        m->set_epoch(w.epoch);
        m->set_matched_tokens(w.matched_tokens);
        m->set_page_aligned_tokens(w.page_aligned_tokens);
        ToProto(w.load, m->mutable_load());
        m->set_heartbeat_age_ms(w.heartbeat_age_ms);
        m->set_capacity_slots(w.capacity_slots);
        m->set_free_slots(w.free_slots);
        m->set_evictable_slots(w.evictable_slots);
        m->set_protected_slots(w.protected_slots);
        m->set_cached_tokens(w.cached_tokens);
        m->set_page_size(w.page_size);
        m->set_unconfirmed(w.unconfirmed);
      }
    }
  }
  Finish(reactor, CacheRpc::kMatch, start, status);
  return reactor;
}

void CacheServiceImpl::FillStats(const StatsResult& stats,
                                 pb::StatsResponse* out) const {
  out->set_persistence(persistence());
  out->set_active_leases(stats.active_leases);
  out->set_expired_leases_total(stats.expired_leases_total);
  out->set_tree_nodes(stats.tree_nodes);
  for (const WorkerStats& w : stats.workers) {
    pb::WorkerCacheStats* s = out->add_workers();
    s->set_worker_id(w.worker_id);
    s->set_address(w.address);
    s->set_epoch(w.epoch);
    s->set_model(w.model);
    s->set_page_size(w.page_size);
    s->set_capacity_slots(w.capacity_slots);
    s->set_free_slots(w.free_slots);
    s->set_evictable_slots(w.evictable_slots);
    s->set_protected_slots(w.protected_slots);
    s->set_cached_tokens(w.cached_tokens);
    s->set_active_leases(w.active_leases);
    ToProto(w.load, s->mutable_load());
    s->set_heartbeat_age_ms(w.heartbeat_age_ms);
    s->set_prefix_query_tokens(w.prefix_query_tokens);
    s->set_prefix_hit_tokens(w.prefix_hit_tokens);
    s->set_evicted_tokens(w.evicted_tokens);
    s->set_expired_leases(w.expired_leases);
    s->set_unconfirmed(w.unconfirmed);
  }
}

grpc::ServerUnaryReactor* CacheServiceImpl::Stats(
    grpc::CallbackServerContext* context, const pb::StatsRequest* request,
    pb::StatsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status status = Available();
  if (status.ok()) {
    absl::StatusOr<StatsResult> result;
    {
      absl::ReaderMutexLock lock(&mu_);
      try {
        result = state_.Stats(request->worker_id(), NowForRead());
      } catch (const std::bad_alloc&) {
        result = absl::ResourceExhaustedError(
            "the cache service ran out of memory answering Stats");
      }
    }
    status = result.status();
    if (result.ok()) FillStats(*result, response);
  }
  Finish(reactor, CacheRpc::kStats, start, status);
  return reactor;
}

grpc::ServerUnaryReactor* CacheServiceImpl::Dump(
    grpc::CallbackServerContext* context, const pb::DumpRequest* request,
    pb::DumpResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = absl::Now();
  absl::Status status = Available();
  if (status.ok()) {
    std::string dump;
    {
      absl::ReaderMutexLock lock(&mu_);
      try {
        dump = state_.CanonicalDump();
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError(
            "the cache service ran out of memory writing the dump");
      }
    }
    if (dump.size() > kMaxDumpBytes) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "canonical dump is ", dump.size(), " bytes, above the 64 MiB bound"));
    } else {
      *response->mutable_canonical() = std::move(dump);
    }
  }
  Finish(reactor, CacheRpc::kDump, start, status);
  return reactor;
}

// ---- LeaseStream ----
//
// One reactor per stream. One read is outstanding at a time; each request is
// run by RunMutation (the unary RPCs' code) as soon as it is read, so the
// operations of a stream are applied in arrival order. Its response gets a
// slot at the back of `pending_`; the slot becomes ready when RunMutation's
// `done` runs (inline in memory mode, on the journal's writer thread once
// durable in Redis mode). Responses are written from the front of
// `pending_`, one write at a time, so they go out in request order. Reading
// pauses while kMaxPendingPerStream responses are unsent (bounded memory
// per stream). Lifetime: the reactor deletes itself when gRPC has called
// OnDone and no operation's `done` is still outstanding (`refs_`).
class CacheServiceImpl::LeaseStreamReactor final
    : public grpc::ServerBidiReactor<pb::LeaseStreamRequest,
                                     pb::LeaseStreamResponse> {
 public:
  static constexpr size_t kMaxPendingPerStream = 1024;

  static grpc::Status ShuttingDown() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the cache service is shutting down; operations of "
                        "this stream without a response were not applied");
  }

  explicit LeaseStreamReactor(CacheServiceImpl* service) : service_(service) {
    bool draining;
    {
      absl::MutexLock lock(&service_->streams_mu_);
      service_->streams_.insert(this);
      draining = service_->draining_streams_;
    }
    if (draining) {
      {
        absl::MutexLock lock(&mu_);
        draining_ = true;
        finished_ = true;
      }
      Finish(ShuttingDown());
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      reading_ = true;
    }
    StartRead(&request_);
  }

  ~LeaseStreamReactor() override {
    absl::MutexLock lock(&service_->streams_mu_);
    service_->streams_.erase(this);
  }

  // Keeps the reactor alive for a DrainAndUnref() (called under the
  // service's streams_mu_); false when it is already being destroyed.
  bool TryRef() {
    absl::MutexLock lock(&mu_);
    if (refs_ == 0) return false;
    ++refs_;
    return true;
  }

  // See CacheServiceImpl::DrainLeaseStreams; drops TryRef's reference.
  void DrainAndUnref() {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
    Unref();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // half-close by the client, or the stream broke
      Actions actions;
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        read_closed_ = true;
        actions = NextActionsLocked();
      }
      Run(actions);
      return;
    }
    // reading_ stays true until Dispatch is done with request_, so no other
    // thread starts the next read into it meanwhile.
    Pending* pending = nullptr;
    Actions stop_actions;
    {
      absl::MutexLock lock(&mu_);
      if (broken_ || draining_) {  // apply nothing more
        reading_ = false;
        stop_actions = NextActionsLocked();
      } else {
        pending_.push_back(std::make_unique<Pending>());
        pending = pending_.back().get();
        ++refs_;
      }
    }
    if (pending == nullptr) {
      Run(stop_actions);
      return;
    }
    pending->response.set_request_id(request_.request_id());
    Dispatch(pending);
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_.reset();
      write_in_flight_ = false;
      if (!ok) broken_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnCancel() override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnDone() override { Unref(); }

 private:
  struct Pending {
    pb::LeaseStreamResponse response;
    bool ready = false;
  };
  // What to do after releasing mu_ (gRPC calls are made without it).
  struct Actions {
    pb::LeaseStreamResponse* write = nullptr;
    bool buffer_hint = false;
    bool read = false;
    bool finish = false;
    grpc::Status finish_status;
  };

  void Dispatch(Pending* pending) {
    pb::LeaseStreamResponse& r = pending->response;
    CacheServiceImpl& s = *service_;
    MutationDone done = [this, pending](const absl::Status& status) {
      Complete(pending, status);
    };
    switch (request_.op_case()) {
      case pb::LeaseStreamRequest::kAcquire:
        s.RunMutation(CacheRpc::kAcquire, JournalOp::kAcquire,
                      request_.acquire(), r.mutable_acquire(), &ApplyAcquire,
                      s.ValidateAcquire(request_.acquire()), std::move(done));
        return;
      case pb::LeaseStreamRequest::kGrow:
        s.RunMutation(CacheRpc::kGrow, JournalOp::kGrow, request_.grow(),
                      r.mutable_grow(), &ApplyGrow, absl::OkStatus(),
                      std::move(done));
        return;
      case pb::LeaseStreamRequest::kFork:
        s.RunMutation(CacheRpc::kFork, JournalOp::kFork, request_.fork(),
                      r.mutable_fork(), &ApplyFork, absl::OkStatus(),
                      std::move(done));
        return;
      case pb::LeaseStreamRequest::kCommit:
        s.RunMutation(CacheRpc::kCommit, JournalOp::kCommit, request_.commit(),
                      r.mutable_commit(), &AdmitAndApplyCommit,
                      s.ValidateCommit(request_.commit()), std::move(done));
        return;
      case pb::LeaseStreamRequest::kRelease:
        s.RunMutation(CacheRpc::kRelease, JournalOp::kRelease,
                      request_.release(), r.mutable_release(), &ApplyRelease,
                      absl::OkStatus(), std::move(done));
        return;
      case pb::LeaseStreamRequest::OP_NOT_SET:
        break;
    }
    done(absl::InvalidArgumentError(
        "LeaseStreamRequest has no operation set (one of acquire, grow, "
        "fork, commit, release)"));
  }

  // RunMutation's verdict for `pending` (any thread).
  void Complete(Pending* pending, const absl::Status& status) {
    if (!status.ok()) {
      pending->response.clear_result();
      pending->response.set_status_code(static_cast<int32_t>(status.code()));
      pending->response.set_status_message(std::string(status.message()));
    }
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      pending->ready = true;
      actions = NextActionsLocked();
    }
    Run(actions);
    Unref();
  }

  // Decides the next write, read and finish from the current state.
  Actions NextActionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions a;
    if (finished_) return a;
    if (broken_) {
      // Cancelled or a write failed: finish once no write is in flight
      // (operations still journaling complete later and are dropped).
      if (!write_in_flight_) {
        finished_ = true;
        a.finish = true;
        a.finish_status =
            grpc::Status(grpc::StatusCode::CANCELLED, "lease stream cancelled");
      }
      return a;
    }
    if (!write_in_flight_ && !pending_.empty() && pending_.front()->ready) {
      writing_ = std::move(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
      a.write = &writing_->response;
      // More responses ready behind it: let gRPC coalesce them into one
      // flush (the next write follows as soon as this one is queued).
      a.buffer_hint = !pending_.empty() && pending_.front()->ready;
    }
    if (!reading_ && !read_closed_ && !draining_ &&
        pending_.size() < kMaxPendingPerStream) {
      reading_ = true;
      a.read = true;
    }
    if ((read_closed_ || draining_) && pending_.empty() && !write_in_flight_) {
      // A read still pending when draining completes with ok=false after
      // Finish; a message it got is not applied.
      finished_ = true;
      a.finish = true;
      a.finish_status = read_closed_ ? grpc::Status::OK : ShuttingDown();
    }
    return a;
  }

  void Run(const Actions& a) {
    if (a.write != nullptr) {
      grpc::WriteOptions options;
      if (a.buffer_hint) options.set_buffer_hint();
      StartWrite(a.write, options);
    }
    if (a.read) StartRead(&request_);
    if (a.finish) Finish(a.finish_status);
  }

  void Unref() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  CacheServiceImpl* const service_;
  // Written by gRPC's read; used by Dispatch until the next StartRead.
  pb::LeaseStreamRequest request_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Pending> writing_ ABSL_GUARDED_BY(mu_);
  // 1 for gRPC (until OnDone) + 1 per operation whose done has not run.
  int refs_ ABSL_GUARDED_BY(mu_) = 1;
  // A read is in flight, or its message is being dispatched.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void CacheServiceImpl::DrainLeaseStreams() {
  std::vector<LeaseStreamReactor*> live;
  {
    absl::MutexLock lock(&streams_mu_);
    draining_streams_ = true;
    for (LeaseStreamReactor* stream : streams_) {
      if (stream->TryRef()) live.push_back(stream);
    }
  }
  // Without streams_mu_: a last Unref deletes the reactor, whose destructor
  // takes it.
  for (LeaseStreamReactor* stream : live) stream->DrainAndUnref();
}

grpc::ServerBidiReactor<pb::LeaseStreamRequest, pb::LeaseStreamResponse>*
CacheServiceImpl::LeaseStream(grpc::CallbackServerContext* /*context*/) {
  return new LeaseStreamReactor(this);
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
          JournalLocked(JournalOp::kSweep, now_ms, SweepPayload(paused_ms),
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
