#include "cache_service/rpc_apply.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cache_service/proto_adapters.h"

namespace radixkv::cache_service {

namespace pb = ::radixkv::v1;

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
  absl::StatusOr<HeartbeatResult> result =
      state.Heartbeat(FromProto(req), now_ms);
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
  absl::StatusOr<AcquireResult> result = state.Acquire(FromProto(req), now_ms);
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

absl::Status ApplyCommit(CacheState& state, const pb::CommitRequest& req,
                         int64_t now_ms, pb::CommitResponse* resp) {
  absl::StatusOr<CommitResult> result = state.Commit(FromProto(req), now_ms);
  if (!result.ok()) return result.status();
  resp->set_inserted_tokens(result->inserted_tokens);
  resp->set_freed_slots(result->freed_slots);
  ToProto(result->kv_indices, resp->mutable_kv_indices());
  return absl::OkStatus();
}

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

std::pair<int, int> ApplySweep(CacheState& state, int64_t now_ms,
                               int64_t paused_ms) {
  state.CreditServicePause(paused_ms, now_ms);
  ExpireResult expired = state.ExpireLeases(now_ms);
  DropResult dropped = state.DropDeadWorkers(now_ms);
  return {static_cast<int>(expired.expired.size()),
          static_cast<int>(dropped.dropped_worker_ids.size())};
}

namespace {

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

absl::Status ReplayJournalEntry(CacheState& state, const JournalEntry& entry) {
  const std::string_view payload = entry.payload;
  const int64_t now_ms = entry.now_ms;
  switch (entry.op) {
    case JournalOp::kRegister:
      return ReplayWith(state, payload, now_ms, &ApplyRegister);
    case JournalOp::kHeartbeat:
      return ReplayWith(state, payload, now_ms, &ApplyHeartbeat);
    case JournalOp::kDeregister:
      return ReplayWith(state, payload, now_ms, &ApplyDeregister);
    case JournalOp::kAcquire:
      return ReplayWith(state, payload, now_ms, &ApplyAcquire);
    case JournalOp::kGrow:
      return ReplayWith(state, payload, now_ms, &ApplyGrow);
    case JournalOp::kFork:
      return ReplayWith(state, payload, now_ms, &ApplyFork);
    case JournalOp::kCommit:
      return ReplayWith(state, payload, now_ms, &ApplyCommit);
    case JournalOp::kRelease:
      return ReplayWith(state, payload, now_ms, &ApplyRelease);
    case JournalOp::kEvict:
      return ReplayWith(state, payload, now_ms, &ApplyEvict);
    case JournalOp::kFlush:
      return ReplayWith(state, payload, now_ms, &ApplyFlush);
    case JournalOp::kSweep: {
      absl::StatusOr<int64_t> paused_ms = DecodeSweepPayload(payload);
      if (!paused_ms.ok()) return paused_ms.status();
      ApplySweep(state, now_ms, *paused_ms);
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(
      absl::StrCat("unknown journal op ", static_cast<int>(entry.op)));
}

}  // namespace radixkv::cache_service
