// The public API: inputs as transformers passes them, errors, the limits
// that bound hostile templates, concurrent renders, and robustness against
// mutated real templates.
#include "model/chat/chat_template.h"

#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/chat/chat_template_testing.h"

namespace radixkv::model::chat {
namespace {

using testing::DefaultInputs;
using testing::FixedClockOptions;
using testing::RenderSource;

TEST(ChatTemplateTest, InputsFollowTransformers) {
  ChatTemplateInputs in = DefaultInputs();
  in.bos_token.reset();
  in.extra = nlohmann::ordered_json::parse(
      R"({"eos_token": "<|end|>", "enable_thinking": false, "z": [1, {"b": 2, "a": 1}]})");
  absl::StatusOr<std::string> out = RenderSource(
      "{{ tools is none }} {{ documents is none }} {{ bos_token is defined }} "
      "{{ eos_token }} {{ enable_thinking }} {{ z }} {{ z[1]|tojson }}",
      in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "True True False <|end|> False [1, {'b': 2, 'a': 1}] "
            "{\"b\": 2, \"a\": 1}");
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(RenderSource("{{ tools|length }}", in).value(), "1");
}

TEST(ChatTemplateTest, BadInputsAreInvalidArgument) {
  ChatTemplateInputs in = DefaultInputs();
  in.messages = nlohmann::ordered_json::object();
  EXPECT_EQ(RenderSource("x", in).status().message(),
            "messages must be a JSON array");
  in = DefaultInputs();
  in.extra = nlohmann::ordered_json::parse(R"({"messages": []})");
  EXPECT_EQ(RenderSource("x", in).status().message(),
            "extra template argument 'messages' duplicates a fixed input");
  in = DefaultInputs();
  in.bos_token = "\xff";
  EXPECT_EQ(RenderSource("x", in).status().message(),
            "bos_token is not valid UTF-8");
  in = DefaultInputs();
  in.extra = nlohmann::ordered_json::parse(R"({"n": 18446744073709551615})");
  EXPECT_EQ(RenderSource("{{ n }}", in).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, ParseRejectsBadSources) {
  EXPECT_EQ(ChatTemplate::Parse("{{ '\xff' }}").status().message(),
            "chat template is not valid UTF-8");
  EXPECT_EQ(
      ChatTemplate::Parse(std::string(ChatTemplate::kMaxSourceBytes + 1, 'x'))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, RaiseExceptionCarriesTheMessageAndPosition) {
  absl::StatusOr<std::string> out =
      RenderSource("ok\n  {{ raise_exception('roles must alternate') }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(),
            "line 2, column 6: raise_exception: roles must alternate");
}

TEST(ChatTemplateTest, ClockIsInjectable) {
  RenderOptions options;
  options.clock = [] {
    LocalDateTime t;
    t.time = absl::CivilSecond(2024, 7, 26, 23, 5, 9);
    return t;
  };
  EXPECT_EQ(RenderSource("{{ strftime_now('%d %b %Y, %H:%M:%S %A') }}",
                         DefaultInputs(), options)
                .value(),
            "26 Jul 2024, 23:05:09 Friday");
}

// Runs `source` under `limits` and returns the status code.
absl::StatusCode CodeUnder(const std::string& source, RenderLimits limits) {
  RenderOptions options = FixedClockOptions();
  options.limits = limits;
  return RenderSource(source, DefaultInputs(), options).status().code();
}

TEST(ChatTemplateTest, LimitsBoundHostileTemplates) {
  RenderLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1000;
  small.max_string_bytes = 1 << 20;
  small.max_work_bytes = 8 << 20;
  small.max_call_depth = 50;
  const absl::StatusCode kExhausted = absl::StatusCode::kResourceExhausted;
  EXPECT_EQ(CodeUnder("{% for i in range(100000) %}{% for j in range(100000) %}"
                      "{% endfor %}{% endfor %}",
                      small),
            kExhausted);
  EXPECT_EQ(
      CodeUnder("{% for i in range(1000) %}0123456789{% endfor %}", small),
      kExhausted);
  EXPECT_EQ(CodeUnder("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                      small),
            kExhausted);
  EXPECT_EQ(CodeUnder("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
                      small),
            kExhausted);
  EXPECT_EQ(CodeUnder("{% for i in range(10000) %}{% set x = 'y' * 1000 %}"
                      "{% endfor %}",
                      small),
            kExhausted);
  EXPECT_EQ(CodeUnder("{{ 'x' * 1000000000000 }}", small), kExhausted);
  EXPECT_EQ(CodeUnder("{{ ([1] * 100000) * 100000 }}", small), kExhausted);
  EXPECT_EQ(CodeUnder("{{ range(1000000)|length }}", small),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, DeepOrCyclicValuesFailWithoutCrashing) {
  EXPECT_FALSE(
      RenderSource("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}")
          .ok());
  const std::string nest =
      "{% set ns = namespace(l=[]) %}{% for i in range(2000) %}"
      "{% set ns.l = [ns.l] %}{% endfor %}";
  EXPECT_FALSE(RenderSource(nest + "{{ ns.l }}").ok());
  EXPECT_FALSE(RenderSource(nest + "{{ ns.l|tojson }}").ok());
  EXPECT_FALSE(RenderSource(nest + "{{ ns.l == ns.l }}").ok());
  std::string deep_json = "[";
  for (int i = 0; i < 1000; ++i) deep_json += "[";
  deep_json += std::string(1001, ']');
  ChatTemplateInputs in = DefaultInputs();
  in.extra = nlohmann::ordered_json::object();
  in.extra["deep"] = nlohmann::ordered_json::parse(deep_json);
  EXPECT_EQ(RenderSource("{{ deep }}", in).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ChatTemplateTest, ConcurrentRendersShareOneParsedTemplate) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content|upper }};"
      "{% endfor %}{% set ns = namespace(n=0) %}{% for i in range(200) %}"
      "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string expected = "system:BE KIND.;user:HI;assistant:HELLO!;19900";
  std::vector<std::thread> threads;
  std::vector<int> matches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<std::string> out =
            t->Render(DefaultInputs(), FixedClockOptions());
        matches[k] += out.ok() && *out == expected;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(matches, std::vector<int>(4, 200));
}

std::vector<std::string> CorpusTemplates() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  const std::string dir = std::string(srcdir != nullptr ? srcdir : ".") + "/" +
                          (ws != nullptr ? ws : "") +
                          "/model/chat/testdata/templates";
  std::vector<std::string> sources;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return sources;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 6 || name.substr(name.size() - 6) != ".jinja") continue;
    std::ifstream in(dir + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    sources.push_back(ss.str());
  }
  closedir(d);
  return sources;
}

// Random edits of real templates must parse or fail cleanly, and render or
// fail cleanly, within the limits.
TEST(ChatTemplateTest, MutatedTemplatesNeverCrash) {
  const std::vector<std::string> corpus = CorpusTemplates();
  ASSERT_GE(corpus.size(), 40u);
  const uint32_t seed = 20261201;
  std::printf("mutation seed %u\n", seed);
  std::mt19937 rng(seed);
  const std::string alphabet = "{}%#-+()[]|~'\"\\:.,=!<>*/ \n_aZ09";
  RenderOptions options = FixedClockOptions();
  options.limits.max_steps = 200000;
  ChatTemplateInputs in = DefaultInputs();
  in.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "description": "d",
          "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}])");
  int parsed = 0, rendered = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string s = corpus[rng() % corpus.size()];
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s.erase(at, 1 + rng() % 8);
          break;
        case 1:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s[at] = alphabet[rng() % alphabet.size()];
          break;
      }
    }
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(s);
    if (!t.ok()) continue;
    ++parsed;
    rendered += t->Render(in, options).ok();
  }
  std::printf("parsed %d, rendered %d of 1500 mutants\n", parsed, rendered);
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace radixkv::model::chat
