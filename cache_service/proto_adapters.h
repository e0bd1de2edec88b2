// Conversions between radixkv.v1 messages (proto/radixkv/v1/
// cache_service.proto) and the CacheState structs (cache_state.h). Field by
// field, no validation: CacheState checks values, the service checks sizes.
#ifndef RADIXKV_CACHE_SERVICE_PROTO_ADAPTERS_H_
#define RADIXKV_CACHE_SERVICE_PROTO_ADAPTERS_H_

#include <cstdint>
#include <vector>

#include "cache_service/cache_state.h"
#include "radixkv/v1/cache_service.pb.h"

namespace radixkv::cache_service {

std::vector<int32_t> ToVector(
    const google::protobuf::RepeatedField<int32_t>& tokens);

WorkerLoad FromProto(const radixkv::v1::WorkerLoad& load);
RegisterWorkerRequest FromProto(const radixkv::v1::RegisterRequest& req);
HeartbeatRequest FromProto(const radixkv::v1::HeartbeatRequest& req);
MatchRequest FromProto(const radixkv::v1::MatchRequest& req);
AcquireRequest FromProto(const radixkv::v1::AcquireRequest& req);
CommitRequest FromProto(const radixkv::v1::CommitRequest& req);

void ToProto(const WorkerLoad& load, radixkv::v1::WorkerLoad* out);
// Appends the ops.
void ToProto(const std::vector<CopyOp>& ops,
             google::protobuf::RepeatedPtrField<radixkv::v1::CopyOp>* out);
// Replaces out's contents.
void ToProto(const std::vector<int64_t>& v,
             google::protobuf::RepeatedField<int64_t>* out);
void ToProto(const WorkerMatch& w, radixkv::v1::WorkerMatch* out);
void ToProto(const WorkerStats& w, radixkv::v1::WorkerCacheStats* out);

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_PROTO_ADAPTERS_H_
