// Host-side tests of the GPU kernel API that need no GPU: every check here
// returns before anything is enqueued. The kernels themselves are validated
// on the GPU machine by gpu_attention_device_test.hip (docs/gpu-validation.md).
#include "worker/kernels/hip/gpu_attention.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker::gpu {
namespace {

constexpr int kH200Sms = 132;

GpuKvCache ValidCache() {
  GpuKvCache c;
  c.geometry.num_pages = 1024;
  c.geometry.page_size = 16;
  c.geometry.num_kv_heads = 8;
  c.geometry.head_dim = 128;
  c.geometry.elem_bytes = 2;
  c.geometry.layout = KvLayout::kBSHD;
  c.dtype = DType::kBF16;
  // Never dereferenced: validation fails (or returns) before any launch.
  c.k = reinterpret_cast<void*>(0x1000);
  c.v = reinterpret_cast<void*>(0x2000);
  return c;
}

GpuDecodeArgs ValidDecodeArgs() {
  GpuDecodeArgs a;
  a.q = reinterpret_cast<void*>(0x3000);
  a.kv_indptr = reinterpret_cast<const int32_t*>(0x4000);
  a.kv_indices = reinterpret_cast<const int64_t*>(0x5000);
  a.batch_size = 4;
  a.max_seq_len = 4096;
  a.num_q_heads = 32;
  a.sm_scale = 0.088f;
  a.out = reinterpret_cast<void*>(0x6000);
  return a;
}

class EnvGuard {
 public:
  explicit EnvGuard(const char* value) {
    if (value == nullptr) {
      unsetenv(kDecodePartitionSizeEnv);
    } else {
      setenv(kDecodePartitionSizeEnv, value, 1);
    }
  }
  ~EnvGuard() { unsetenv(kDecodePartitionSizeEnv); }
};

TEST(ChooseDecodePartitionSizeTest, MatchesTheH200Sweep) {
  EnvGuard env(nullptr);
  // docs/kernel-notes.md "Partition size": the measured best per shape.
  EXPECT_EQ(ChooseDecodePartitionSize(64, 8, 32, 4096, kH200Sms), 2048);
  EXPECT_EQ(ChooseDecodePartitionSize(256, 8, 32, 1024, kH200Sms), 0);
  EXPECT_EQ(ChooseDecodePartitionSize(1, 8, 32, 32768, kH200Sms), 1024);
}

TEST(ChooseDecodePartitionSizeTest, ShortOrEmptyContextsUseV1) {
  EnvGuard env(nullptr);
  EXPECT_EQ(ChooseDecodePartitionSize(1, 8, 32, 200, kH200Sms), 0);
  EXPECT_EQ(ChooseDecodePartitionSize(4, 8, 32, 0, kH200Sms), 0);
  EXPECT_EQ(ChooseDecodePartitionSize(0, 8, 32, 1000, kH200Sms), 0);
}

TEST(ChooseDecodePartitionSizeTest, LargeGroupsCountHeadChunks) {
  EnvGuard env(nullptr);
  // Group 32 = two 16-head chunks per kv head: twice the v1 blocks.
  EXPECT_EQ(ChooseDecodePartitionSize(33, 8, 256, 4096, kH200Sms), 0);
  EXPECT_EQ(ChooseDecodePartitionSize(33, 8, 128, 4096, kH200Sms), 2048);
}

TEST(ChooseDecodePartitionSizeTest, EnvironmentOverridesAndRoundsUpTo64) {
  {
    EnvGuard env("100");
    EXPECT_EQ(ChooseDecodePartitionSize(64, 8, 32, 4096, kH200Sms), 128);
  }
  {
    EnvGuard env("0");
    EXPECT_EQ(ChooseDecodePartitionSize(1, 8, 32, 32768, kH200Sms), 0);
  }
  {
    EnvGuard env("garbage");  // ignored
    EXPECT_EQ(ChooseDecodePartitionSize(1, 8, 32, 32768, kH200Sms), 1024);
  }
}

TEST(DecodeWorkspaceBytesTest, CountsPartialsPerPartition) {
  EXPECT_EQ(DecodeWorkspaceBytes(4, 32, 128, 4096, 0), 0u);
  // Counters, then 4 * 32 * 4 partitions = 512 rows: 2 * 512 floats +
  // 512 * 128 floats.
  EXPECT_EQ(DecodeWorkspaceBytes(4, 32, 128, 4096, 1024),
            kDecodeCounterBytes + 2u * 512 * 4 + 512u * 128 * 4);
  // 3 rows -> 12 bytes, padded to 16 each.
  EXPECT_EQ(DecodeWorkspaceBytes(1, 3, 64, 10, 64),
            kDecodeCounterBytes + 2u * 16 + 3u * 64 * 4);
}

TEST(DecodeTest, RejectsUnsupportedShapesBeforeLaunching) {
  GpuKvCache cache = ValidCache();
  GpuDecodeArgs args = ValidDecodeArgs();
  args.partition_size = 0;

  GpuKvCache f32 = cache;
  f32.dtype = DType::kF32;
  EXPECT_EQ(Decode(f32, args, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GpuKvCache d96 = cache;
  d96.geometry.head_dim = 96;
  EXPECT_EQ(Decode(d96, args, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GpuDecodeArgs heads = args;
  heads.num_q_heads = 12;  // not a multiple of 8 kv heads
  EXPECT_EQ(Decode(cache, heads, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GpuDecodeArgs part = args;
  part.partition_size = 100;  // not a multiple of 64
  EXPECT_EQ(Decode(cache, part, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GpuDecodeArgs ws = args;
  ws.partition_size = 512;
  ws.workspace = reinterpret_cast<void*>(0x7000);
  ws.workspace_bytes = DecodeWorkspaceBytes(4, 32, 128, 4096, 512) - 1;
  absl::Status s = Decode(cache, ws, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s;

  GpuDecodeArgs null_out = args;
  null_out.out = nullptr;
  EXPECT_EQ(Decode(cache, null_out, nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  GpuDecodeArgs empty = args;
  empty.batch_size = 0;
  EXPECT_TRUE(Decode(cache, empty, nullptr).ok());
}

TEST(ExtendTest, RejectsUnsupportedShapesBeforeLaunching) {
  GpuKvCache cache = ValidCache();
  GpuExtendArgs a;
  a.q = a.k_extend = a.v_extend = reinterpret_cast<void*>(0x3000);
  a.qo_indptr = a.kv_indptr = reinterpret_cast<const int32_t*>(0x4000);
  a.kv_indices = reinterpret_cast<const int64_t*>(0x5000);
  a.batch_size = 2;
  a.max_extend_len = 100;
  a.num_q_heads = 20;  // not a multiple of 8
  a.out = reinterpret_cast<void*>(0x6000);
  EXPECT_EQ(Extend(cache, a, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  a.num_q_heads = 32;
  a.k_extend = nullptr;
  EXPECT_EQ(Extend(cache, a, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  a.max_extend_len = 0;  // nothing to do
  a.k_extend = reinterpret_cast<void*>(0x3000);
  EXPECT_TRUE(Extend(cache, a, nullptr).ok());
}

TEST(ReshapeAndCacheTest, RejectsBadArguments) {
  GpuKvCache cache = ValidCache();
  EXPECT_EQ(
      ReshapeAndCache(cache, nullptr, nullptr, nullptr, 5, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReshapeAndCache(cache, nullptr, nullptr, nullptr, -1, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      ReshapeAndCache(cache, nullptr, nullptr, nullptr, 0, nullptr).ok());
}

TEST(CopyBlocksTest, ValidatesEveryOpBeforeCopying) {
  std::vector<GpuKvCache> layers = {ValidCache(), ValidCache()};
  const size_t scratch = CopyBlocksScratchBytes(3, 2);
  EXPECT_EQ(scratch, 32u + 80u);  // 2 layers x 16 B, 3 ops x 24 B -> 80
  void* fake_scratch = reinterpret_cast<void*>(0x8000);
  const std::vector<PageCopy> bad_page = {{1, 2, 16}, {0, 1024, 4}};
  absl::Status s = CopyBlocks(layers, bad_page, fake_scratch, scratch, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op 1"), std::string::npos) << s;
  const std::vector<PageCopy> bad_tokens = {{1, 2, 17}};
  EXPECT_EQ(
      CopyBlocks(layers, bad_tokens, fake_scratch, scratch, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  const std::vector<PageCopy> ok_ops = {{1, 2, 16}};
  EXPECT_EQ(CopyBlocks(layers, ok_ops, fake_scratch, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // scratch too small
  layers[1].geometry.page_size = 32;
  EXPECT_EQ(CopyBlocks(layers, ok_ops, fake_scratch, scratch, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // layers differ
  // No-op lists never touch the device.
  const std::vector<PageCopy> noop = {{3, 3, 16}, {4, 5, 0}};
  layers[1].geometry.page_size = 16;
  EXPECT_TRUE(CopyBlocks(layers, noop, fake_scratch, scratch, nullptr).ok());
}

TEST(GpuAttentionTest, NvccBuildHasTensorCoreKernels) {
  EXPECT_TRUE(HasMatrixCoreKernels());
}

}  // namespace
}  // namespace radixkv::worker::gpu
