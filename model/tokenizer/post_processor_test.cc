#include "model/tokenizer/post_processor.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/refusal_testing.h"

namespace radixkv::model {
namespace {

using ::testing::ElementsAre;

using Json = json_fields::Json;

std::vector<int32_t> Apply(const char* json, std::vector<int32_t> ids) {
  absl::StatusOr<std::unique_ptr<PostProcessor>> p =
      PostProcessor::FromJson(Json::parse(json), "post_processor", 100);
  EXPECT_TRUE(p.ok()) << p.status();
  (*p)->Process(&ids);
  return ids;
}

constexpr char kTemplate[] = R"({"type": "TemplateProcessing",
  "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
             {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
  "pair": [],
  "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                     "[SEP]": {"id": "[SEP]", "ids": [2, 3],
                               "tokens": ["[SEP]", "x"]}}})";

TEST(PostProcessorTest, TemplateSingle) {
  EXPECT_THAT(Apply(kTemplate, {7, 8}), ElementsAre(1, 7, 8, 2, 3));
  EXPECT_THAT(Apply(R"({"type": "TemplateProcessing", "single": "<s>:0 $0",
                      "special_tokens": {"<s>": {"ids": [5]}}})",
                    {7}),
              ElementsAre(5, 7));
}

TEST(PostProcessorTest, BertRobertaByteLevelSequence) {
  EXPECT_THAT(Apply(R"({"type": "BertProcessing", "sep": ["[SEP]", 98],
                      "cls": ["[CLS]", 99]})",
                    {7}),
              ElementsAre(99, 7, 98));
  EXPECT_THAT(Apply(R"({"type": "RobertaProcessing", "sep": ["</s>", 2],
                      "cls": ["<s>", 0], "trim_offsets": true,
                      "add_prefix_space": true})",
                    {7}),
              ElementsAre(0, 7, 2));
  EXPECT_THAT(Apply(R"({"type": "ByteLevel", "trim_offsets": true})", {7}),
              ElementsAre(7));
  EXPECT_THAT(Apply(R"({"type": "Sequence", "processors": [
                      {"type": "ByteLevel"},
                      {"type": "TemplateProcessing", "single": "<s> $A </s>",
                       "special_tokens": {"<s>": {"ids": [5]},
                                          "</s>": {"ids": [6]}}},
                      {"type": "TemplateProcessing", "single": "[X] $A",
                       "special_tokens": {"[X]": {"ids": [9]}}}]})",
                    {7}),
              ElementsAre(9, 5, 7, 6));
}

TEST(PostProcessorTest, RefusesUnsupportedOrInconsistent) {
  testing::ExpectRefusals(
      {
          {R"({"type": "Unknown"})",
           "post_processor 'Unknown' at post_processor is not supported"},
          {R"({"type": "TemplateProcessing", "single": "$A $B"})",
           "sequence B"},
          {R"({"type": "TemplateProcessing", "single": "<s>",
                   "special_tokens": {"<s>": {"ids": [1]}}})",
           "exactly one $A"},
          {R"({"type": "TemplateProcessing", "single": "<s> $A"})",
           "'<s>' has no ids"},
          {R"({"type": "TemplateProcessing", "single": "<s> $A",
                   "special_tokens": {"<s>": {"ids": [100]}}})",
           "outside the vocabulary"},
          {R"({"type": "BertProcessing", "sep": ["[SEP]", 102],
                   "cls": ["[CLS]", 101]})",
           "post_processor.cls"},
      },
      [](const std::string& j) {
        return PostProcessor::FromJson(Json::parse(j), "post_processor", 100);
      });
}

}  // namespace
}  // namespace radixkv::model
