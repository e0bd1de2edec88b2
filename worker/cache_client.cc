#include "worker/cache_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace radixkv::worker {
namespace {

// Issues one unary RPC with a deadline and converts the status.
template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> Call(v1::CacheService::Stub* stub, Method method,
                              const Request& request, absl::Duration timeout,
                              const char* name) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(timeout));
  Response response;
  grpc::Status status = (stub->*method)(&context, request, &response);
  if (!status.ok()) {
    absl::Status converted = FromGrpcStatus(status);
    return absl::Status(
        converted.code(),
        absl::StrCat("CacheService.", name, ": ", converted.message()));
  }
  return response;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcKvCacheClient>> GrpcKvCacheClient::Create(
    const std::string& address, absl::Duration rpc_timeout) {
  if (address.empty()) {
    return absl::InvalidArgumentError("cache service address is empty");
  }
  if (rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("rpc_timeout must be positive");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  return std::unique_ptr<GrpcKvCacheClient>(
      new GrpcKvCacheClient(v1::CacheService::NewStub(channel), rpc_timeout));
}

absl::StatusOr<v1::RegisterResponse> GrpcKvCacheClient::Register(
    const v1::RegisterRequest& request) {
  return Call<v1::RegisterResponse>(stub_.get(),
                                    &v1::CacheService::Stub::Register, request,
                                    rpc_timeout_, "Register");
}

absl::StatusOr<v1::HeartbeatResponse> GrpcKvCacheClient::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration timeout) {
  return Call<v1::HeartbeatResponse>(
      stub_.get(), &v1::CacheService::Stub::Heartbeat, request,
      std::min(timeout, rpc_timeout_), "Heartbeat");
}

absl::StatusOr<v1::DeregisterResponse> GrpcKvCacheClient::Deregister(
    const v1::DeregisterRequest& request) {
  return Call<v1::DeregisterResponse>(stub_.get(),
                                      &v1::CacheService::Stub::Deregister,
                                      request, rpc_timeout_, "Deregister");
}

absl::StatusOr<v1::AcquireResponse> GrpcKvCacheClient::Acquire(
    const v1::AcquireRequest& request) {
  return Call<v1::AcquireResponse>(stub_.get(),
                                   &v1::CacheService::Stub::Acquire, request,
                                   rpc_timeout_, "Acquire");
}

absl::StatusOr<v1::GrowResponse> GrpcKvCacheClient::Grow(
    const v1::GrowRequest& request) {
  return Call<v1::GrowResponse>(stub_.get(), &v1::CacheService::Stub::Grow,
                                request, rpc_timeout_, "Grow");
}

absl::StatusOr<v1::ForkResponse> GrpcKvCacheClient::Fork(
    const v1::ForkRequest& request) {
  return Call<v1::ForkResponse>(stub_.get(), &v1::CacheService::Stub::Fork,
                                request, rpc_timeout_, "Fork");
}

absl::StatusOr<v1::CommitResponse> GrpcKvCacheClient::Commit(
    const v1::CommitRequest& request) {
  return Call<v1::CommitResponse>(stub_.get(), &v1::CacheService::Stub::Commit,
                                  request, rpc_timeout_, "Commit");
}

absl::StatusOr<v1::ReleaseResponse> GrpcKvCacheClient::Release(
    const v1::ReleaseRequest& request) {
  return Call<v1::ReleaseResponse>(stub_.get(),
                                   &v1::CacheService::Stub::Release, request,
                                   rpc_timeout_, "Release");
}

}  // namespace radixkv::worker
