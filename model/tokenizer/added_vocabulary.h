// tokenizer.json "added_tokens": tokens matched in the text before the
// model runs, as tokenizers' AddedVocabulary
// (tokenizers/src/tokenizer/added_vocabulary.rs). Tokens with
// `normalized: false` are found in the raw text, the others in each
// normalized piece (their content normalized the same way); matching is
// leftmost-longest, then `single_word`, `lstrip` and `rstrip` apply.
#ifndef RADIXKV_MODEL_TOKENIZER_ADDED_VOCABULARY_H_
#define RADIXKV_MODEL_TOKENIZER_ADDED_VOCABULARY_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/normalizer.h"

namespace radixkv::model {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// Byte trie over token contents; finds the longest content that prefixes a
// text.
class TokenTrie {
 public:
  // Adds `key` (non-empty) with `value`; an existing key keeps its value.
  void Add(absl::string_view key, int32_t value);

  // True if some key starts with byte `b`.
  bool MayStartWith(unsigned char b) const { return root_[b] >= 0; }

  // Length of the longest key that prefixes `text` (0 if none) and its value.
  size_t LongestPrefix(absl::string_view text, int32_t* value) const;

  bool empty() const { return nodes_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted
    int32_t value = -1;
  };
  int32_t Child(int32_t node, unsigned char b) const;

  std::array<int32_t, 256> root_ = MakeEmptyRoot();
  std::vector<Node> nodes_;  // all nodes below the root
  static std::array<int32_t, 256> MakeEmptyRoot() {
    std::array<int32_t, 256> r;
    r.fill(-1);
    return r;
  }
};

// Immutable after Build; thread-safe.
class AddedVocabulary {
 public:
  // Reads the "added_tokens" array at `path` (null or absent: none). Ids are
  // assigned as tokenizers assigns them (the model's id when the content is
  // in its vocabulary, else the next free id after the model's) and must
  // agree with the file's "id"; INVALID_ARGUMENT otherwise, or for an empty
  // or duplicate content or one that normalizes to nothing.
  static absl::StatusOr<AddedVocabulary> Build(const json_fields::Json* tokens,
                                               absl::string_view path,
                                               const BpeModel& model,
                                               const Normalizer* normalizer);

  // Receives, in order, the pieces ExtractAndNormalize makes: an added
  // token (token_id >= 0, text empty) or a normalized text piece
  // (token_id == -1; `at_origin` as in TextSink).
  using Sink = absl::FunctionRef<absl::Status(
      absl::string_view text, bool at_origin, int32_t token_id)>;

  // tokenizers' extract_and_normalize: splits `text` on the non-normalized
  // tokens, normalizes every other piece (tokenizers normalizes each piece
  // on its own), and splits those on the normalized tokens. Returns the
  // first error of `sink` or of the normalizer.
  absl::Status ExtractAndNormalize(absl::string_view text,
                                   const Normalizer* normalizer,
                                   Sink sink) const;

  // The added token with `id`, or nullptr.
  const AddedToken* Find(int32_t id) const;

  std::optional<int32_t> TokenToId(absl::string_view content) const;

  // One past the largest added token id (0 if none).
  int32_t id_bound() const { return id_bound_; }

 private:
  // Receives the parts of a piece split on a trie: a byte range of it
  // (token_id -1) or an added token.
  using PartSink = absl::FunctionRef<absl::Status(uint32_t begin, uint32_t end,
                                                  int32_t token_id)>;

  // Splits `text` on the tokens of `trie` (tokenizers' find_matches).
  absl::Status Split(const TokenTrie& trie, absl::string_view text,
                     PartSink sink) const;

  std::vector<AddedToken> tokens_;  // specials first, then the others
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, int32_t> by_content_;
  TokenTrie raw_trie_;         // normalized == false; values index tokens_
  TokenTrie normalized_trie_;  // normalized == true, normalized contents
  int32_t id_bound_ = 0;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_ADDED_VOCABULARY_H_
