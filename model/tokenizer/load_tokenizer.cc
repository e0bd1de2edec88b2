#include "model/tokenizer/load_tokenizer.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"

namespace radixkv::model {

absl::StatusOr<LoadedTokenizer> LoadTokenizer(const std::string& dir) {
  LoadedTokenizer out;
  const std::string json = dir + "/tokenizer.json";
  const std::string sp = dir + "/tokenizer.model";
  std::error_code ec;
  if (std::filesystem::is_regular_file(json, ec)) {
    absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
        HfTokenizer::LoadFile(json);
    if (!t.ok()) return t.status();
    out.tokenizer = *std::move(t);
    out.path = json;
  } else if (std::filesystem::is_regular_file(sp, ec)) {
    // The config says what add_special_tokens adds; read it first.
    absl::StatusOr<TokenizerFiles> files = LoadTokenizerFiles(dir, nullptr);
    if (!files.ok()) return files.status();
    SentencePieceTokenizer::Options options;
    options.add_bos = files->add_bos_token.value_or(true);
    options.add_eos = files->add_eos_token.value_or(false);
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
        SentencePieceTokenizer::Load(sp, options);
    if (!t.ok()) return t.status();
    out.tokenizer = *std::move(t);
    out.path = sp;
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, " holds neither tokenizer.json nor tokenizer.model"));
  }
  absl::StatusOr<TokenizerFiles> files =
      LoadTokenizerFiles(dir, out.tokenizer.get());
  if (!files.ok()) return files.status();
  out.files = *std::move(files);
  return out;
}

}  // namespace radixkv::model
