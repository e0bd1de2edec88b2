#include "router/api_keys.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ApiKeysTest, ChecksBearerKeysAndReloads) {
  const std::string path =
      WriteFile("keys", "# team keys\n\nsk-alpha\n  sk-beta  \n");
  auto keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_TRUE((*keys)->Check("Bearer sk-alpha").ok());
  EXPECT_TRUE((*keys)->Check("Bearer sk-beta").ok());
  for (const char* bad : {"", "sk-alpha", "Bearer sk-alph", "Bearer sk-alphaX",
                          "Basic c2stYWxwaGE=", "Bearer "}) {
    absl::Status s = (*keys)->Check(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(std::string(s.message()).find("sk-"), std::string::npos)
        << "a key never appears in a message: " << s;
  }
  WriteFile("keys", "sk-gamma\n");
  ASSERT_TRUE((*keys)->Reload().ok());
  EXPECT_FALSE((*keys)->Check("Bearer sk-alpha").ok());
  EXPECT_TRUE((*keys)->Check("Bearer sk-gamma").ok());
  // A bad file keeps the keys that were there.
  WriteFile("keys", "# nothing\n");
  EXPECT_EQ((*keys)->Reload().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*keys)->Check("Bearer sk-gamma").ok());
}

TEST(ApiKeysTest, MalformedFilesAreRefusedWithoutEchoingKeys) {
  EXPECT_EQ(ApiKeys::Load("/nonexistent/keys").status().code(),
            absl::StatusCode::kNotFound);
  auto s = ApiKeys::Load(WriteFile("bad", "sk-one\nsk two\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("line 2"), std::string::npos) << s;
  EXPECT_EQ(std::string(s.message()).find("sk"), std::string::npos) << s;
  s = ApiKeys::Load(WriteFile("long", std::string(kMaxApiKeyBytes + 1, 'k')))
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace radixkv::router
