#include "cache_service/proto_adapters.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "radixkv/v1/cache_service.pb.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

TEST(ProtoAdaptersTest, AcquireRequestFieldByField) {
  pb::AcquireRequest req;
  req.set_worker_id("w0");
  req.set_epoch(3);
  req.set_model("m");
  req.set_cache_salt("s");
  req.add_tokens(5);
  req.add_tokens(-1);
  req.set_priority(-2);
  req.set_reserve_tokens(16);
  req.set_request_id("r1");
  req.set_disable_match(true);
  const AcquireRequest r = FromProto(req);
  EXPECT_EQ(r.worker_id, "w0");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{5, -1}));
  EXPECT_EQ(r.priority, -2);
  EXPECT_EQ(r.reserve_tokens, 16);
  EXPECT_EQ(r.request_id, "r1");
  EXPECT_TRUE(r.disable_match);
}

TEST(ProtoAdaptersTest, RegisterHeartbeatCommitMatch) {
  pb::RegisterRequest reg;
  reg.set_worker_id("w1");
  reg.set_address("h:1");
  reg.set_capacity_slots(4096);
  reg.set_page_size(16);
  reg.set_model("m");
  reg.set_epoch(7);
  reg.set_vocab_size(32000);
  reg.set_metrics_address("h:2");
  const RegisterWorkerRequest r = FromProto(reg);
  EXPECT_EQ(r.worker_id, "w1");
  EXPECT_EQ(r.address, "h:1");
  EXPECT_EQ(r.capacity_slots, 4096);
  EXPECT_EQ(r.page_size, 16);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.epoch, 7);
  EXPECT_EQ(r.vocab_size, 32000);
  EXPECT_EQ(r.metrics_address, "h:2");

  pb::HeartbeatRequest hb;
  hb.set_worker_id("w1");
  hb.set_epoch(7);
  hb.mutable_load()->set_running_requests(1);
  hb.mutable_load()->set_waiting_requests(2);
  hb.mutable_load()->set_outstanding_tokens(3);
  hb.mutable_load()->set_available_slots(4);
  hb.add_lease_ids(9);
  hb.add_lease_ids(11);
  const HeartbeatRequest h = FromProto(hb);
  EXPECT_EQ(h.worker_id, "w1");
  EXPECT_EQ(h.epoch, 7);
  EXPECT_EQ(h.load, (WorkerLoad{1, 2, 3, 4}));
  EXPECT_EQ(h.lease_ids, (std::vector<uint64_t>{9, 11}));

  pb::CommitRequest commit;
  commit.set_lease_id(42);
  commit.add_tokens(1);
  commit.set_keep_lease(true);
  const CommitRequest c = FromProto(commit);
  EXPECT_EQ(c.lease_id, 42u);
  EXPECT_EQ(c.tokens, std::vector<int32_t>{1});
  EXPECT_TRUE(c.keep_lease);

  pb::MatchRequest match;
  match.set_model("m");
  match.set_cache_salt("salt");
  match.add_tokens(8);
  const MatchRequest m = FromProto(match);
  EXPECT_EQ(m.model, "m");
  EXPECT_EQ(m.cache_salt, "salt");
  EXPECT_EQ(m.tokens, std::vector<int32_t>{8});
}

TEST(ProtoAdaptersTest, CopyOpsAppendAndIndicesReplace) {
  google::protobuf::RepeatedPtrField<pb::CopyOp> ops;
  ToProto(std::vector<CopyOp>{{1, 2, 3}, {4, 5, 6}}, &ops);
  ASSERT_EQ(ops.size(), 2);
  EXPECT_EQ(ops[1].src_page(), 4);
  EXPECT_EQ(ops[1].dst_page(), 5);
  EXPECT_EQ(ops[1].num_tokens(), 6);
  google::protobuf::RepeatedField<int64_t> indices;
  indices.Add(99);
  ToProto(std::vector<int64_t>{7, 8}, &indices);
  EXPECT_EQ(std::vector<int64_t>(indices.begin(), indices.end()),
            (std::vector<int64_t>{7, 8}));
}

TEST(ProtoAdaptersTest, WorkerMatchAndStats) {
  WorkerMatch w;
  w.worker_id = "w0";
  w.address = "a";
  w.epoch = 2;
  w.matched_tokens = 10;
  w.page_aligned_tokens = 8;
  w.load = WorkerLoad{1, 2, 3, 4};
  w.heartbeat_age_ms = 5;
  w.capacity_slots = 64;
  w.free_slots = 32;
  w.evictable_slots = 16;
  w.protected_slots = 16;
  w.cached_tokens = 20;
  w.page_size = 8;
  w.unconfirmed = true;
  pb::WorkerMatch m;
  ToProto(w, &m);
  EXPECT_EQ(m.worker_id(), "w0");
  EXPECT_EQ(m.address(), "a");
  EXPECT_EQ(m.epoch(), 2);
  EXPECT_EQ(m.matched_tokens(), 10);
  EXPECT_EQ(m.page_aligned_tokens(), 8);
  EXPECT_EQ(m.load().available_slots(), 4);
  EXPECT_EQ(m.heartbeat_age_ms(), 5);
  EXPECT_EQ(m.capacity_slots(), 64);
  EXPECT_EQ(m.free_slots(), 32);
  EXPECT_EQ(m.evictable_slots(), 16);
  EXPECT_EQ(m.protected_slots(), 16);
  EXPECT_EQ(m.cached_tokens(), 20);
  EXPECT_EQ(m.page_size(), 8);
  EXPECT_TRUE(m.unconfirmed());

  WorkerStats s;
  s.worker_id = "w0";
  s.model = "m";
  s.page_size = 8;
  s.active_leases = 3;
  s.load = WorkerLoad{0, 1, 0, 0};
  s.prefix_query_tokens = 100;
  s.prefix_hit_tokens = 40;
  s.evicted_tokens = 7;
  s.expired_leases = 1;
  pb::WorkerCacheStats out;
  ToProto(s, &out);
  EXPECT_EQ(out.worker_id(), "w0");
  EXPECT_EQ(out.model(), "m");
  EXPECT_EQ(out.page_size(), 8);
  EXPECT_EQ(out.active_leases(), 3);
  EXPECT_EQ(out.load().waiting_requests(), 1);
  EXPECT_EQ(out.prefix_query_tokens(), 100);
  EXPECT_EQ(out.prefix_hit_tokens(), 40);
  EXPECT_EQ(out.evicted_tokens(), 7);
  EXPECT_EQ(out.expired_leases(), 1);
  EXPECT_FALSE(out.unconfirmed());
}

}  // namespace
}  // namespace radixkv::cache_service
