// Two models behind one router (real processes): worker-0 serves the
// embedded demo model (sentencepiece), worker-1 a random checkpoint with
// the golden Llama-3-style tokenizer.json. Each request is tokenized with
// its own model's tokenizer and placed only on that model's workers;
// ListModels and the OpenAI /v1/models list both; a model nobody serves is
// NOT_FOUND naming the served ones.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "model/tokenizer/load_tokenizer.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

namespace fs = std::filesystem;

constexpr char kDemo[] = "radixkv-demo-llama";
constexpr char kSecond[] = "llama3-random";

// A random 2,048-vocabulary checkpoint with the golden llama3-bpe tokenizer
// files, as folder <tmp>/llama3-random.
std::string MakeSecondModel() {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/", kSecond);
  const std::string cmd = absl::StrCat(
      Runfile("worker/gpu/make_random_checkpoint"), " --out=", dir,
      " --layers=1 --hidden=64 --heads=2 --kv_heads=1 --head_dim=32 "
      "--intermediate=128 --vocab=2048 --max_positions=1024 --dtype=f32 "
      ">/dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  EXPECT_TRUE(shared.ok()) << shared.status();
  const std::string tok = *shared + "/golden/tokenizers/llama3-bpe";
  for (const char* f :
       {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    fs::copy_file(absl::StrCat(tok, "/", f), absl::StrCat(dir, "/", f),
                  fs::copy_options::overwrite_existing);
  }
  return dir;
}

int64_t TokenCount(const std::string& dir, const std::string& text) {
  auto t = model::LoadTokenizer(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  auto ids = t->tokenizer->Encode(text, /*add_special_tokens=*/true);
  EXPECT_TRUE(ids.ok());
  return static_cast<int64_t>(ids->size());
}

TEST(MultiModelTest, EachModelHasItsTokenizerAndItsWorkers) {
  const std::string second = MakeSecondModel();
  router::LocalClusterOptions options = TestClusterOptions("multi_model");
  options.worker_model_dirs = {"", second};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  auto& cluster = *started;
  auto router = RouterStub(cluster->router_address());
  const std::string text = "Permission is hereby granted, free of charge";
  for (const auto& [model, dir, worker] :
       {std::tuple{std::string(kDemo), options.model_dir,
                   std::string("worker-0")},
        std::tuple{std::string(kSecond), second, std::string("worker-1")}}) {
    for (int i = 0; i < 3; ++i) {
      Completion r = GenerateText(router.get(), text,
                                  {.max_new_tokens = 4, .model = model});
      ASSERT_TRUE(r.status.ok()) << model << ": " << r.status.error_message();
      EXPECT_EQ(r.worker_id, cluster->worker_id(worker == "worker-0" ? 0 : 1))
          << model;
      EXPECT_EQ(r.usage.prompt_tokens(), TokenCount(dir, text)) << model;
    }
  }
  EXPECT_NE(TokenCount(options.model_dir, text), TokenCount(second, text))
      << "the two tokenizers must differ for the check to mean something";

  grpc::ClientContext ctx;
  v1::ListModelsResponse models;
  ASSERT_TRUE(router->ListModels(&ctx, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(0).name(), kSecond);  // sorted
  EXPECT_EQ(models.models(1).name(), kDemo);
  for (const auto& m : models.models()) {
    EXPECT_EQ(m.workers(), 1) << m.name();
    EXPECT_TRUE(m.tokenizer()) << m.name();
    EXPECT_TRUE(m.chat_template()) << m.name();
  }

  Completion unknown =
      GenerateText(router.get(), text, {.max_new_tokens = 4, .model = "other"});
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.status.error_message(),
            absl::StrCat("model 'other' is not served here (served: ", kSecond,
                         ", ", kDemo, ")"));
}

}  // namespace
}  // namespace radixkv::tests
