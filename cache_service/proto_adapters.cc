#include "cache_service/proto_adapters.h"

namespace radixkv::cache_service {

namespace pb = ::radixkv::v1;

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

HeartbeatRequest FromProto(const pb::HeartbeatRequest& req) {
  HeartbeatRequest r;
  r.worker_id = req.worker_id();
  r.epoch = req.epoch();
  r.load = FromProto(req.load());
  r.lease_ids.assign(req.lease_ids().begin(), req.lease_ids().end());
  return r;
}

MatchRequest FromProto(const pb::MatchRequest& req) {
  MatchRequest r;
  r.model = req.model();
  r.cache_salt = req.cache_salt();
  r.tokens = ToVector(req.tokens());
  return r;
}

AcquireRequest FromProto(const pb::AcquireRequest& req) {
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
  return r;
}

CommitRequest FromProto(const pb::CommitRequest& req) {
  CommitRequest r;
  r.lease_id = req.lease_id();
  r.tokens = ToVector(req.tokens());
  r.keep_lease = req.keep_lease();
  return r;
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

void ToProto(const WorkerMatch& w, pb::WorkerMatch* m) {
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

void ToProto(const WorkerStats& w, pb::WorkerCacheStats* s) {
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

}  // namespace radixkv::cache_service
