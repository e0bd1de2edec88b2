#include "worker/lease_maintenance.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace radixkv::worker {

namespace {

constexpr int64_t kMaxSlotsPerRequest = 65536;  // cache_service.proto

template <typename Ops>
void AppendCopies(const Ops& ops, Sequence* seq) {
  for (const v1::CopyOp& op : ops) {
    seq->pending_copies.push_back(
        PageCopy{op.src_page(), op.dst_page(), op.num_tokens()});
  }
}

}  // namespace

int64_t AdmissionReserve(const Sequence& seq, int64_t num_running,
                         int32_t reserve_tokens) {
  const int64_t len = static_cast<int64_t>(seq.tokens.size());
  const int64_t room = std::min<int64_t>(
      kMaxSlotsPerRequest,
      std::max<int64_t>(reserve_tokens, 2 * (num_running + 1)));
  const bool alone_again = seq.admitted_once && num_running == 0;
  return std::clamp<int64_t>(seq.max_slots_needed() - len, 0,
                             alone_again ? kMaxSlotsPerRequest : room);
}

v1::AcquireRequest AcquireRequestFor(const Sequence& seq,
                                     const std::string& worker_id,
                                     int64_t epoch, const std::string& model,
                                     int64_t reserve) {
  v1::AcquireRequest request;
  request.set_worker_id(worker_id);
  request.set_epoch(epoch);
  request.set_model(model);
  request.set_cache_salt(seq.cache_salt);
  request.mutable_tokens()->Assign(seq.tokens.begin(), seq.tokens.end());
  request.set_priority(seq.priority);
  request.set_reserve_tokens(static_cast<int32_t>(reserve));
  request.set_request_id(seq.request_id);
  request.set_disable_match(!seq.reuses_prefix());
  return request;
}

absl::Status ApplyAcquire(const v1::AcquireResponse& lease, int64_t epoch,
                          int64_t reserve, Sequence* seq) {
  const int64_t len = static_cast<int64_t>(seq->tokens.size());
  seq->has_lease = true;
  seq->lease_id = lease.lease_id();
  if (lease.kv_indices_size() != len + reserve || lease.prefix_len() < 0 ||
      lease.prefix_len() >= len) {
    return absl::InternalError(
        absl::StrCat("cache service returned an inconsistent lease: ",
                     lease.kv_indices_size(), " slots for ", len, " + ",
                     reserve, " tokens, prefix_len ", lease.prefix_len()));
  }
  seq->lease_epoch = epoch;
  seq->acquired_len = len;
  seq->kv_indices.assign(lease.kv_indices().begin(), lease.kv_indices().end());
  seq->pending_copies.clear();
  AppendCopies(lease.copy_ops(), seq);
  seq->num_computed = lease.prefix_len();
  return absl::OkStatus();
}

GrowPlan PlanGrow(absl::Span<const std::unique_ptr<Sequence>> running,
                  int32_t grow_tokens, int32_t grow_low_watermark) {
  // One Grow per step must keep up with every generating sequence taking one
  // slot per step: grow by at least 2x their number (and start growing at
  // half that headroom), so that in steady state no sequence waits.
  int64_t generating = 0;
  for (const auto& seq : running) generating += seq->in_prefill() ? 0 : 1;
  const int64_t chunk = std::min<int64_t>(
      kMaxSlotsPerRequest, std::max<int64_t>(grow_tokens, 2 * generating));
  const int64_t watermark = std::max<int64_t>(grow_low_watermark, chunk / 2);
  GrowPlan plan;
  int64_t best_headroom = 0;
  for (const auto& seq : running) {
    if (seq->in_prefill()) continue;
    const int64_t slots = static_cast<int64_t>(seq->kv_indices.size());
    if (slots >= seq->max_slots_needed()) continue;
    const int64_t headroom = slots - static_cast<int64_t>(seq->tokens.size());
    if (headroom < 0) {
      if (!plan.urgent || seq->admission_order < plan.target->admission_order) {
        plan.target = seq.get();
        plan.urgent = true;
      }
    } else if (!plan.urgent && headroom < watermark &&
               (plan.target == nullptr || headroom < best_headroom)) {
      plan.target = seq.get();
      best_headroom = headroom;
    }
  }
  if (plan.target != nullptr) {
    plan.num_tokens = std::min<int64_t>(
        chunk, plan.target->max_slots_needed() -
                   static_cast<int64_t>(plan.target->kv_indices.size()));
  }
  return plan;
}

void ApplyGrow(const v1::GrowResponse& grown, Sequence* seq) {
  if (grown.first_remapped_position() >= 0) {
    const int64_t first = grown.first_remapped_position();
    for (int i = 0; i < grown.remapped_kv_indices_size(); ++i) {
      if (first + i < static_cast<int64_t>(seq->kv_indices.size())) {
        seq->kv_indices[first + i] = grown.remapped_kv_indices(i);
      }
    }
  }
  seq->kv_indices.insert(seq->kv_indices.end(), grown.kv_indices().begin(),
                         grown.kv_indices().end());
  AppendCopies(grown.copy_ops(), seq);
}

Sequence* PickPreemptionVictim(
    absl::Span<const std::unique_ptr<Sequence>> running) {
  Sequence* victim = running.front().get();
  for (const auto& seq : running) {
    if (seq->priority < victim->priority ||
        (seq->priority == victim->priority &&
         seq->admission_order > victim->admission_order)) {
      victim = seq.get();
    }
  }
  return victim;
}

Sequence* PickPrefillCommit(
    absl::Span<const std::unique_ptr<Sequence>> running) {
  // After the last prompt chunk, because a Commit covers at least the
  // lease's prompt.
  Sequence* target = nullptr;
  for (const auto& seq : running) {
    if (!seq->has_lease || seq->prefill_committed ||
        seq->disable_prefix_cache || seq->in_prefill() ||
        seq->acquired_len <= 0 || !seq->pending_copies.empty()) {
      continue;
    }
    if (target == nullptr || seq->admission_order < target->admission_order) {
      target = seq.get();
    }
  }
  return target;
}

v1::CommitRequest CommitRequestFor(const Sequence& seq, bool keep_lease) {
  v1::CommitRequest request;
  request.set_lease_id(seq.lease_id);
  request.set_keep_lease(keep_lease);
  request.mutable_tokens()->Assign(seq.tokens.begin(),
                                   seq.tokens.begin() + seq.num_computed);
  return request;
}

absl::StatusOr<int64_t> ApplyPrefillCommit(const v1::CommitResponse& committed,
                                           Sequence* seq) {
  if (committed.kv_indices_size() !=
      static_cast<int64_t>(seq->kv_indices.size())) {
    return absl::InternalError(
        absl::StrCat("cache service returned a remapped table of ",
                     committed.kv_indices_size(), " slots for a lease of ",
                     seq->kv_indices.size()));
  }
  // Duplicated pages now point at the tree's copy of the same tokens (the
  // lease's own copies were freed): read them from there from now on.
  int64_t remapped = 0;
  for (int i = 0; i < committed.kv_indices_size(); ++i) {
    if (seq->kv_indices[i] != committed.kv_indices(i)) {
      seq->kv_indices[i] = committed.kv_indices(i);
      ++remapped;
    }
  }
  return remapped;
}

}  // namespace radixkv::worker
