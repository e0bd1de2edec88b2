#include "model/safetensors_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/safetensors_test_writer.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"

namespace radixkv::model {
namespace {

using Json = nlohmann::json;

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string base = t != nullptr ? t : "/tmp";
  std::string dir = absl::StrCat(
      base, "/st_", ::getpid(), "_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

using testing::RawTensor;

void WriteFileOrFail(const std::string& path,
                     const std::vector<RawTensor>& tensors,
                     void (*corrupt)(Json&) = nullptr) {
  std::function<void(Json&)> edit;
  if (corrupt != nullptr) edit = corrupt;
  absl::Status s = testing::WriteSafetensors(path, tensors, edit);
  ASSERT_TRUE(s.ok()) << s;
}

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

std::vector<RawTensor> MixedTensors() {
  const float f32[6] = {1.5f, -2.25f, 3.0e-20f, 0.0f, -0.0f, 65504.0f};
  // bf16: 1.0, -3.5, 0.01171875 (0x3C40), 2^-129 subnormal (0x0010)
  const uint16_t bf16[4] = {0x3F80, 0xC060, 0x3C40, 0x0010};
  // f16: 1.0, -2.0, 65504, smallest subnormal 2^-24, 2^-15 subnormal, 0.5
  const uint16_t f16[6] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0200, 0x3800};
  return {{"a.f32", "F32", {2, 3}, Bytes(f32, sizeof(f32))},
          {"b.bf16", "BF16", {4}, Bytes(bf16, sizeof(bf16))},
          {"c.f16", "F16", {3, 2}, Bytes(f16, sizeof(f16))},
          {"d.i64", "I64", {1}, std::string(8, '\0')}};
}

void ExpectMixedValues(const SafetensorsReader& r) {
  absl::StatusOr<std::vector<float>> a = r.ReadFloat32("a.f32", {2, 3});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(
      *a, std::vector<float>({1.5f, -2.25f, 3.0e-20f, 0.0f, -0.0f, 65504.0f}));
  absl::StatusOr<std::vector<float>> b = r.ReadFloat32("b.bf16", {4});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, std::vector<float>(
                    {1.0f, -3.5f, 0.01171875f, std::ldexp(1.0f, -129)}));
  absl::StatusOr<std::vector<float>> c = r.ReadFloat32("c.f16", {3, 2});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c,
            std::vector<float>({1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24),
                                std::ldexp(1.0f, -15), 0.5f}));
}

TEST(SafetensorsReaderTest, ReadsSingleFileAllFloatDtypes) {
  const std::string dir = TempDir();
  WriteFileOrFail(dir + "/model.safetensors", MixedTensors());
  // Open by directory and by file path.
  for (const std::string& p : {dir, dir + "/model.safetensors"}) {
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> r =
        SafetensorsReader::Open(p);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMixedValues(**r);
    EXPECT_EQ((*r)->TensorNames(),
              std::vector<std::string>({"a.f32", "b.bf16", "c.f16", "d.i64"}));
    absl::StatusOr<const SafetensorsTensor*> t = (*r)->Find("b.bf16");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ((*t)->dtype, SafetensorsDType::kBF16);
    EXPECT_EQ((*t)->num_bytes, 8u);
  }
}

TEST(SafetensorsReaderTest, ReadsShardedCheckpointThroughIndex) {
  const std::string dir = TempDir();
  std::vector<RawTensor> all = MixedTensors();
  WriteFileOrFail(dir + "/model-00001-of-00002.safetensors", {all[0], all[1]});
  WriteFileOrFail(dir + "/model-00002-of-00002.safetensors", {all[2], all[3]});
  Json index = {{"metadata", {{"total_size", 0}}},
                {"weight_map",
                 {{"a.f32", "model-00001-of-00002.safetensors"},
                  {"b.bf16", "model-00001-of-00002.safetensors"},
                  {"c.f16", "model-00002-of-00002.safetensors"},
                  {"d.i64", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> r =
      SafetensorsReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectMixedValues(**r);
  EXPECT_TRUE((*r)->Contains("d.i64"));
}

TEST(SafetensorsReaderTest, ClearErrors) {
  const std::string dir = TempDir();
  WriteFileOrFail(dir + "/model.safetensors", MixedTensors());
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> r =
      SafetensorsReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  // Missing tensor names the tensor.
  absl::StatusOr<std::vector<float>> missing =
      (*r)->ReadFloat32("lm_head.weight", {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("lm_head.weight"),
            std::string::npos);
  // Shape mismatch gives both shapes.
  absl::StatusOr<std::vector<float>> shape = (*r)->ReadFloat32("a.f32", {3, 2});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("[2, 3]"), std::string::npos);
  EXPECT_NE(shape.status().message().find("[3, 2]"), std::string::npos);
  // Integer tensors cannot be read as float.
  EXPECT_EQ((*r)->ReadFloat32("d.i64", {}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // No checkpoint in an empty directory.
  const std::string empty = dir + "/empty";
  ::mkdir(empty.c_str(), 0755);
  EXPECT_EQ(SafetensorsReader::Open(empty).status().code(),
            absl::StatusCode::kNotFound);
  // Offsets past the end of the data.
  WriteFileOrFail(dir + "/bad_offsets.safetensors", MixedTensors(),
                  [](Json& h) {
                    h["a.f32"]["data_offsets"] = {0, 4096};
                  });
  EXPECT_EQ(
      SafetensorsReader::Open(dir + "/bad_offsets.safetensors").status().code(),
      absl::StatusCode::kInvalidArgument);
  // Byte size that does not match dtype x shape.
  WriteFileOrFail(dir + "/bad_size.safetensors", MixedTensors(),
                  [](Json& h) { h["a.f32"]["shape"] = {7}; });
  absl::Status bad_size =
      SafetensorsReader::Open(dir + "/bad_size.safetensors").status();
  EXPECT_EQ(bad_size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_size.message().find("a.f32"), std::string::npos);
  // Header length larger than the file.
  {
    std::ofstream out(dir + "/truncated.safetensors", std::ios::binary);
    const char len[8] = {static_cast<char>(0xFF), 0x10, 0, 0, 0, 0, 0, 0};
    out.write(len, 8);
    out << "{}";
  }
  EXPECT_EQ(
      SafetensorsReader::Open(dir + "/truncated.safetensors").status().code(),
      absl::StatusCode::kInvalidArgument);
}

// The golden bf16 checkpoint written by transformers' save_pretrained: every
// tensor of meta.json with its dtype and shape, and bf16 values that widen to
// floats whose low 16 bits are zero.
TEST(SafetensorsReaderTest, GoldenCheckpointMatchesMetaJson) {
  absl::StatusOr<std::string> shared = testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  absl::StatusOr<Json> meta =
      testing::ReadJsonFile(*shared + "/golden/meta.json");
  ASSERT_TRUE(meta.ok()) << meta.status();
  for (const char* name :
       {"llama-tiny-fp32", "llama3-gqa-bf16", "qwen2-tiny-fp32"}) {
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> r =
        SafetensorsReader::Open(*shared + "/golden/models/" + name);
    ASSERT_TRUE(r.ok()) << r.status();
    const Json& tensors = (*meta)["checkpoints"][name]["safetensors_tensors"];
    ASSERT_EQ((*r)->TensorNames().size(), tensors.size()) << name;
    for (auto it = tensors.begin(); it != tensors.end(); ++it) {
      absl::StatusOr<const SafetensorsTensor*> t = (*r)->Find(it.key());
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ((*t)->dtype_name, it.value()[0].get<std::string>());
      EXPECT_EQ((*t)->shape, it.value()[1].get<std::vector<int64_t>>());
    }
  }
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> r =
      SafetensorsReader::Open(*shared + "/golden/models/llama3-gqa-bf16");
  ASSERT_TRUE(r.ok());
  absl::StatusOr<std::vector<float>> emb =
      (*r)->ReadFloat32("model.embed_tokens.weight", {512, 256});
  ASSERT_TRUE(emb.ok()) << emb.status();
  double sum_sq = 0;
  for (float x : *emb) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    ASSERT_EQ(bits & 0xFFFFu, 0u);
    sum_sq += static_cast<double>(x) * x;
  }
  // Re-initialized N(0, 0.05): RMS near 0.05.
  EXPECT_NEAR(std::sqrt(sum_sq / emb->size()), 0.05, 0.005);
}

}  // namespace
}  // namespace radixkv::model
