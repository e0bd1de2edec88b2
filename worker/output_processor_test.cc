#include "worker/output_processor.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/load_tokenizer.h"

namespace radixkv::worker {
namespace {

std::unique_ptr<Sequence> Seq(int max_new_tokens) {
  auto seq = std::make_unique<Sequence>();
  seq->tokens = {1, 7, 8};
  seq->prompt_len = 3;
  seq->cached_tokens = 2;
  seq->sampling.max_new_tokens = max_new_tokens;
  seq->arrival = absl::FromUnixSeconds(100);
  return seq;
}

TEST(OutputProcessorTest, EventOfATokenAndTheLengthLimit) {
  const OutputProcessor output({2});
  auto seq = Seq(2);
  GenerateEvent first =
      output.AppendToken(seq.get(), 9, absl::FromUnixSeconds(101));
  EXPECT_EQ(seq->tokens, (std::vector<int32_t>{1, 7, 8, 9}));
  EXPECT_EQ(seq->num_generated, 1);
  EXPECT_EQ(first.token_ids, std::vector<int32_t>{9});
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.finish_reason, v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_EQ(first.text, "");
  EXPECT_EQ(first.usage.prompt_tokens(), 3);
  EXPECT_EQ(first.usage.cached_tokens(), 2);
  EXPECT_EQ(first.usage.completion_tokens(), 1);
  EXPECT_DOUBLE_EQ(first.elapsed_s, 1.0);
  EXPECT_TRUE(first.status.ok());
  GenerateEvent second =
      output.AppendToken(seq.get(), 10, absl::FromUnixSeconds(102));
  EXPECT_TRUE(second.finished);
  EXPECT_EQ(second.finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(second.usage.completion_tokens(), 2);
}

TEST(OutputProcessorTest, StopIdsEosAndIgnoreEos) {
  const absl::Time now = absl::FromUnixSeconds(100);
  const OutputProcessor output({2, 3});
  auto stop = Seq(10);
  stop->sampling.stop_token_ids = {5};
  stop->sampling.ignore_eos = true;
  EXPECT_EQ(output.AppendToken(stop.get(), 5, now).finish_reason,
            v1::FINISH_REASON_STOP);
  auto eos = Seq(10);
  EXPECT_EQ(output.AppendToken(eos.get(), 3, now).finish_reason,
            v1::FINISH_REASON_EOS);
  auto ignored = Seq(10);
  ignored->sampling.ignore_eos = true;
  EXPECT_FALSE(output.AppendToken(ignored.get(), 3, now).finished);
  // A stop id that is also EOS is a stop.
  auto both = Seq(10);
  both->sampling.stop_token_ids = {2};
  EXPECT_EQ(output.AppendToken(both.get(), 2, now).finish_reason,
            v1::FINISH_REASON_STOP);
  // EOS on the last allowed token is EOS, not LENGTH.
  auto last = Seq(1);
  EXPECT_EQ(output.AppendToken(last.get(), 2, now).finish_reason,
            v1::FINISH_REASON_EOS);
}

class OutputProcessorTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = model::LoadTokenizer("models/radixkv-demo-llama");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = *std::move(loaded);
    tokenizer_ = loaded_.tokenizer.get();
  }

  // A text-returning sequence after the prompt "The".
  std::unique_ptr<Sequence> TextSeq(std::vector<std::string> stops) {
    auto seq = std::make_unique<Sequence>();
    seq->tokens = *tokenizer_->Encode("The", /*add_bos=*/true);
    seq->prompt_len = static_cast<int32_t>(seq->tokens.size());
    seq->return_text = true;
    seq->sampling.max_new_tokens = 100;
    seq->detokenizer = std::make_unique<model::IncrementalDetokenizer>(
        *model::IncrementalDetokenizer::Create(tokenizer_, seq->tokens,
                                               /*skip_special_tokens=*/true));
    if (!stops.empty()) {
      seq->sampling.stop_strings = stops;
      seq->stop_checker = std::make_unique<StopChecker>(stops);
    }
    return seq;
  }

  // Feeds the tokens of `text` (sentencepiece adds the word's leading
  // space) until the request finishes; returns the streamed
  // text and sets *reason.
  std::string Feed(Sequence* seq, const std::string& text,
                   v1::FinishReason* reason, int* tokens_sent) {
    const OutputProcessor output(loaded_.files.eos_token_ids);
    std::string streamed;
    *tokens_sent = 0;
    const std::vector<int32_t> ids =
        *tokenizer_->Encode(text, /*add_bos=*/false);
    for (int32_t id : ids) {
      GenerateEvent event = output.AppendToken(seq, id, absl::Now());
      streamed += event.text;
      ++*tokens_sent;
      *reason = event.finish_reason;
      if (event.finished) break;
    }
    return streamed;
  }

  model::LoadedTokenizer loaded_;
  const model::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(OutputProcessorTextTest, DeltasConcatenateToTheText) {
  auto seq = TextSeq({});
  seq->sampling.max_new_tokens = static_cast<int32_t>(
      tokenizer_->Encode("license grants you", false)->size());
  v1::FinishReason reason;
  int sent = 0;
  EXPECT_EQ(Feed(seq.get(), "license grants you", &reason, &sent),
            " license grants you");
  EXPECT_EQ(reason, v1::FINISH_REASON_LENGTH);
}

TEST_F(OutputProcessorTextTest, StopStringCutsTheTextAndFinishes) {
  auto seq = TextSeq({"grants"});
  v1::FinishReason reason;
  int sent = 0;
  EXPECT_EQ(Feed(seq.get(), "license grants you the freedom", &reason, &sent),
            " license ");
  EXPECT_EQ(reason, v1::FINISH_REASON_STOP);
  EXPECT_EQ(seq->num_generated, sent);
  // Text without a stop string is held back only while it may start one,
  // and flushed at the end.
  auto held = TextSeq({"you the end"});
  held->sampling.max_new_tokens = static_cast<int32_t>(
      tokenizer_->Encode("license grants you the", false)->size());
  EXPECT_EQ(Feed(held.get(), "license grants you the", &reason, &sent),
            " license grants you the");
  EXPECT_EQ(reason, v1::FINISH_REASON_LENGTH);
}

// Llama 3.1 Instruct: config.json lists 128001, 128008, 128009;
// tokenizer_config.json's eos_token <|eot_id|> (128009) is already there.
TEST(OutputProcessorTest, EosIdsAreTheUnionOfConfigAndTokenizerFiles) {
  EXPECT_EQ(MergeEosTokenIds({128001, 128008, 128009}, {128009}),
            (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(MergeEosTokenIds({2}, {7, 2, 9}), (std::vector<int32_t>{2, 7, 9}));
  EXPECT_EQ(MergeEosTokenIds({}, {5}), std::vector<int32_t>{5});
  EXPECT_TRUE(MergeEosTokenIds({}, {}).empty());
  // Each id of the union ends a request with EOS.
  const OutputProcessor output(MergeEosTokenIds({2}, {5}));
  for (int32_t id : {2, 5}) {
    auto seq = Seq(10);
    EXPECT_EQ(output.AppendToken(seq.get(), id, absl::Now()).finish_reason,
              v1::FINISH_REASON_EOS);
  }
}

TEST(OutputProcessorTest, EndEventCarriesStatusAndUsage) {
  auto seq = Seq(10);
  seq->num_generated = 4;
  GenerateEvent event =
      EndEvent(*seq, absl::CancelledError("aborted"), v1::FINISH_REASON_ABORT,
               absl::FromUnixSeconds(103));
  EXPECT_TRUE(event.finished);
  EXPECT_EQ(event.finish_reason, v1::FINISH_REASON_ABORT);
  EXPECT_EQ(event.status, absl::CancelledError("aborted"));
  EXPECT_TRUE(event.token_ids.empty());
  EXPECT_EQ(event.usage.prompt_tokens(), 3);
  EXPECT_EQ(event.usage.cached_tokens(), 2);
  EXPECT_EQ(event.usage.completion_tokens(), 4);
  EXPECT_DOUBLE_EQ(event.elapsed_s, 3.0);
}

TEST(OutputProcessorTest, SampledTokensAreChecked) {
  std::vector<SequenceSampling> sampling(3);
  sampling[1].needs_token = false;
  EXPECT_TRUE(
      CheckSampledTokens({5, -1, kSamplingFailedToken}, sampling, 64).ok());
  EXPECT_EQ(CheckSampledTokens({5, -1}, sampling, 64),
            absl::InternalError("executor returned 2 tokens for 3 sequences"));
  EXPECT_EQ(CheckSampledTokens({5, -1, 64}, sampling, 64),
            absl::InternalError(
                "executor sampled token 64 outside the vocabulary of 64"));
  EXPECT_EQ(CheckSampledTokens({-1, 0, 0}, sampling, 64),
            absl::InternalError(
                "executor sampled token -1 outside the vocabulary of 64"));
}

}  // namespace
}  // namespace radixkv::worker
