// KvCacheClient: the worker's view of the cache service (proto
// radixkv/v1/cache_service.proto), the single authority on which pool slot
// holds which token (docs/architecture.md "One request", steps 3 and 5).
//
// The scheduler talks only to this interface, so it can be unit-tested with a
// fake or an in-process service; GrpcKvCacheClient is the production
// implementation over a gRPC channel.
#ifndef RADIXKV_WORKER_CACHE_CLIENT_H_
#define RADIXKV_WORKER_CACHE_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "process/grpc_status.h"
#include "radixkv/v1/cache_service.grpc.pb.h"

namespace radixkv::worker {

// The subset of CacheService RPCs a worker uses. Semantics, ranges and error
// codes are those documented in cache_service.proto; implementations return
// the service's status unchanged (UNAVAILABLE / DEADLINE_EXCEEDED when the
// service cannot be reached in time). Thread-safe: the scheduler thread and
// the heartbeat thread call it concurrently.
class KvCacheClient {
 public:
  virtual ~KvCacheClient() = default;

  virtual absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) = 0;
  // `timeout` bounds the call (the scheduler passes its heartbeat interval:
  // a lost heartbeat then delays the next by at most one interval, so
  // interval + timeout + interval fits the service's heartbeat timeout).
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::DeregisterResponse> Deregister(
      const v1::DeregisterRequest& request) = 0;
  // Locks the cached prefix of request.tokens and allocates slots for the
  // rest plus reserve_tokens: a lease.
  virtual absl::StatusOr<v1::AcquireResponse> Acquire(
      const v1::AcquireRequest& request) = 0;
  // Appends >= num_tokens slots to a lease.
  virtual absl::StatusOr<v1::GrowResponse> Grow(
      const v1::GrowRequest& request) = 0;
  // Makes num_children leases sharing the parent's first num_tokens
  // positions (ref-counted pages; the next Grow of a child copies a shared
  // partial last page: copy-on-write).
  virtual absl::StatusOr<v1::ForkResponse> Fork(
      const v1::ForkRequest& request) = 0;
  // Inserts the written tokens into the tree and unlocks (ends the lease
  // unless keep_lease).
  virtual absl::StatusOr<v1::CommitResponse> Commit(
      const v1::CommitRequest& request) = 0;
  // Ends a lease without inserting anything; frees its private slots.
  virtual absl::StatusOr<v1::ReleaseResponse> Release(
      const v1::ReleaseRequest& request) = 0;
};

// KvCacheClient over a gRPC channel to a cache service process.
class GrpcKvCacheClient : public KvCacheClient {
 public:
  // `address` is host:port. Each RPC gets `rpc_timeout` as its deadline.
  // The channel connects lazily; an unreachable service surfaces as
  // UNAVAILABLE / DEADLINE_EXCEEDED on each call.
  // Errors: INVALID_ARGUMENT for an empty address or non-positive timeout.
  static absl::StatusOr<std::unique_ptr<GrpcKvCacheClient>> Create(
      const std::string& address, absl::Duration rpc_timeout);

  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) override;
  // Deadline: the smaller of `timeout` and the client's rpc_timeout.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override;
  absl::StatusOr<v1::DeregisterResponse> Deregister(
      const v1::DeregisterRequest& request) override;
  absl::StatusOr<v1::AcquireResponse> Acquire(
      const v1::AcquireRequest& request) override;
  absl::StatusOr<v1::GrowResponse> Grow(
      const v1::GrowRequest& request) override;
  absl::StatusOr<v1::ForkResponse> Fork(
      const v1::ForkRequest& request) override;
  absl::StatusOr<v1::CommitResponse> Commit(
      const v1::CommitRequest& request) override;
  absl::StatusOr<v1::ReleaseResponse> Release(
      const v1::ReleaseRequest& request) override;

 private:
  GrpcKvCacheClient(std::unique_ptr<v1::CacheService::Stub> stub,
                    absl::Duration rpc_timeout)
      : stub_(std::move(stub)), rpc_timeout_(rpc_timeout) {}

  std::unique_ptr<v1::CacheService::Stub> stub_;
  absl::Duration rpc_timeout_;
};

// The worker's status conversions are the process layer's.
using process::FromGrpcStatus;
using process::ToGrpcStatus;

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_CACHE_CLIENT_H_
