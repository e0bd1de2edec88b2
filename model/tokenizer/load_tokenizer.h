// LoadTokenizer: the tokenizer of a checkpoint (or tokenizer) folder, as
// transformers' AutoTokenizer picks it: tokenizer.json (the Hugging Face
// "fast" file) when present, else a sentencepiece tokenizer.model; plus
// what tokenizer_config.json, chat_template.jinja, generation_config.json
// and config.json say about special tokens, stop ids and chat templates.
#ifndef RADIXKV_MODEL_TOKENIZER_LOAD_TOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_LOAD_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_files.h"

namespace radixkv::model {

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  TokenizerFiles files;
  // The file the tokenizer was read from.
  std::string path;
};

// NOT_FOUND when `dir` holds neither tokenizer.json nor tokenizer.model;
// the errors of HfTokenizer::LoadFile, SentencePieceTokenizer::Load and
// LoadTokenizerFiles otherwise (a component we do not implement is
// INVALID_ARGUMENT naming it).
absl::StatusOr<LoadedTokenizer> LoadTokenizer(const std::string& dir);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_LOAD_TOKENIZER_H_
