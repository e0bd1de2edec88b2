#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_service_impl.h"
#include "cache_service/cache_service_mutation.h"
#include "cache_service/proto_adapters.h"
#include "cache_service/rpc_apply.h"
#include "process/grpc_status.h"
#include "proto/generate_request_checks.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

// Dump replies above this are refused (the proto's 64 MiB bound, with room
// for framing).
constexpr size_t kMaxDumpBytes = (64u << 20) - 4096;

}  // namespace

template <typename Request, typename Response>
grpc::ServerUnaryReactor* CacheServiceImpl::HandleMutation(
    grpc::CallbackServerContext* context, CacheRpc rpc, JournalOp op,
    const Request* request, Response* response,
    absl::Status (*apply)(CacheState&, const Request&, int64_t, Response*),
    absl::Status validation) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RunMutation(rpc, op, *request, response, apply, std::move(validation),
              [reactor](const absl::Status& status) {
                reactor->Finish(process::ToGrpcStatus(status));
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
    const MatchRequest r = FromProto(*request);
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
        ToProto(w, response->add_workers());
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
    ToProto(w, out->add_workers());
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

}  // namespace radixkv::cache_service
