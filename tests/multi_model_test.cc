// Two models behind one router (real processes): worker-0 serves the
// embedded demo model (sentencepiece), worker-1 a random checkpoint with
// the golden Llama-3-style tokenizer.json. Each request is tokenized with
// its own model's tokenizer and placed only on that model's workers;
// ListModels and the OpenAI /v1/models list both; a model nobody serves is
// NOT_FOUND naming the served ones. The worker of the tokenizer.json-only
// checkpoint streams text (UTF-8 safe deltas that concatenate to the
// tokenizer's decode) and the router renders its chat template.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "model/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"
#include "radixkv/v1/router.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"
#include "tools/workload/workload_runner.h"
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

// True if `s` is well-formed UTF-8 (no character split at either end).
bool IsWholeUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const int n = c < 0x80           ? 1
                  : (c >> 5) == 0x6  ? 2
                  : (c >> 4) == 0xE  ? 3
                  : (c >> 3) == 0x1E ? 4
                                     : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

// Concatenated deltas; each must be whole UTF-8.
std::string Streamed(const Completion& r) {
  std::string text;
  for (const std::string& delta : r.text_deltas) {
    EXPECT_TRUE(IsWholeUtf8(delta)) << "a delta splits a character";
    text += delta;
  }
  return text;
}

TEST(MultiModelTest, TokenizerJsonOnlyWorkerStreamsTextAndChats) {
  const std::string second = MakeSecondModel();
  ASSERT_FALSE(fs::exists(second + "/tokenizer.model"));
  absl::StatusOr<model::LoadedTokenizer> tok = model::LoadTokenizer(second);
  ASSERT_TRUE(tok.ok()) << tok.status();
  router::LocalClusterOptions options = TestClusterOptions("tokenizer_json");
  options.worker_model_dirs = {"", second};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  auto& cluster = *started;
  auto router = RouterStub(cluster->router_address());

  // A text prompt, tokenized by the router, streamed back as text by the
  // worker, which has only tokenizer.json.
  const std::string text = "Permission is hereby granted, 東京 😀";
  Completion r = GenerateText(router.get(), text,
                              {.max_new_tokens = 32,
                               .disable_prefix_cache = true,
                               .model = kSecond,
                               .return_text = true});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.worker_id, cluster->worker_id(1));
  ASSERT_EQ(r.tokens.size(), 32u);
  EXPECT_EQ(r.usage.prompt_tokens(), TokenCount(second, text));
  absl::StatusOr<std::string> decoded =
      tok->tokenizer->Decode(r.tokens, /*skip_special_tokens=*/true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(Streamed(r), *decoded);
  std::printf("streamed from %s: %s\n", kSecond, decoded->c_str());

  // A chat through the OpenAI API: the router renders the Llama 3.1
  // template as transformers does (the golden render) ...
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  absl::StatusOr<nlohmann::json> chats = model::testing::ReadJsonFile(
      *shared + "/golden/tokenizers/llama3-bpe/chat.json");
  ASSERT_TRUE(chats.ok()) << chats.status();
  const nlohmann::json& chat = (*chats)[2];  // multi-turn, generation prompt
  ASSERT_TRUE(chat["add_generation_prompt"].get<bool>());
  absl::StatusOr<std::vector<int32_t>> prompt = tok->tokenizer->Encode(
      chat["text"].get<std::string>(), /*add_special_tokens=*/false);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  const std::string http = cluster->router_http_address();
  absl::StatusOr<std::string> tokenized =
      router::HttpPostJson(http, "/tokenize",
                           nlohmann::json{{"model", kSecond},
                                          {"messages", chat["messages"]},
                                          {"add_generation_prompt", true}}
                               .dump());
  ASSERT_TRUE(tokenized.ok()) << tokenized.status();
  EXPECT_EQ(
      nlohmann::json::parse(*tokenized)["tokens"].get<std::vector<int32_t>>(),
      *prompt)
      << *tokenized;
  // ... and the completion is the model's greedy continuation of exactly
  // those ids, as text.
  absl::StatusOr<std::string> reply =
      router::HttpPostJson(http, "/v1/chat/completions",
                           nlohmann::json{{"model", kSecond},
                                          {"messages", chat["messages"]},
                                          {"max_tokens", 16},
                                          {"temperature", 0},
                                          {"ignore_eos", true},
                                          {"cache_salt", "chat-test"}}
                               .dump());
  ASSERT_TRUE(reply.ok()) << reply.status();
  const nlohmann::json j = nlohmann::json::parse(*reply, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("choices")) << *reply;
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<int64_t>(),
            static_cast<int64_t>(prompt->size()));
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int64_t>(), 16);
  Completion same = Generate(router.get(), *prompt,
                             {.max_new_tokens = 16,
                              .disable_prefix_cache = true,
                              .model = kSecond,
                              .return_text = true});
  ASSERT_TRUE(same.status.ok()) << same.status.error_message();
  absl::StatusOr<std::string> same_text =
      tok->tokenizer->Decode(same.tokens, /*skip_special_tokens=*/true);
  ASSERT_TRUE(same_text.ok());
  EXPECT_EQ(Streamed(same), *same_text);
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>(),
            *same_text);
}

}  // namespace
}  // namespace radixkv::tests
