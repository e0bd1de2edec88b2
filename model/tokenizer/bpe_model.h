// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocabulary,
// ranked merges and the merge loop, with tokenizers' semantics
// (tokenizers/src/models/bpe/{model,word,serialization}.rs): ignore_merges,
// byte_fallback (<0xXX> tokens), unk_token with fuse_unk,
// continuing_subword_prefix and end_of_word_suffix. Merge results of short
// words are kept in a bounded, thread-safe cache.
#ifndef RADIXKV_MODEL_TOKENIZER_BPE_MODEL_H_
#define RADIXKV_MODEL_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/json_fields.h"

namespace radixkv::model {

// Largest token id accepted in a vocabulary (bounds the id -> token table).
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

// Word -> ids cache with a bounded number of entries (tokenizers keeps
// 10,000 words shorter than 256 bytes). Sharded; like tokenizers' cache
// (RwLock::try_read / try_write) a shard that another thread holds is
// skipped rather than waited for, so the cache never blocks. A full shard is
// cleared, so memory stays bounded whatever the input.
class BpeCache {
 public:
  static constexpr size_t kCapacity = 10000;
  static constexpr size_t kMaxWordBytes = 256;

  // Appends the cached ids of `word` to *out; false if absent (or busy).
  bool Lookup(absl::string_view word, std::vector<int32_t>* out) const;
  void Insert(absl::string_view word, absl::Span<const int32_t> ids) const;

 private:
  static constexpr size_t kShards = 16;
  using Map = absl::flat_hash_map<std::string, std::vector<int32_t>>;
  struct Shard {
    std::mutex mu;
    Map map;  // guarded by mu
  };
  mutable std::array<Shard, kShards> shards_;
};

// Immutable after construction (except the cache); thread-safe.
class BpeModel {
 public:
  // Builds the model from the "model" object at `path`. INVALID_ARGUMENT for
  // a malformed vocabulary or merge, a merge whose tokens are not in the
  // vocabulary, ids outside [0, kMaxTokenId], duplicate ids, or dropout > 0
  // (random merges are not implemented).
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(
      const json_fields::Json& json, absl::string_view path);

  // Appends the ids of one pre-token `word` (valid UTF-8). INVALID_ARGUMENT
  // if the word needs the unknown token and unk_token is not in the
  // vocabulary (tokenizers fails the same way).
  absl::Status Tokenize(absl::string_view word,
                        std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(absl::string_view token) const;

  // The token of `id`, or nullptr if the vocabulary has none.
  const std::string* IdToToken(int32_t id) const;

  // Number of vocabulary entries (tokenizers' get_vocab_size()).
  int32_t size() const { return static_cast<int32_t>(vocab_.size()); }

  // One past the largest id in the vocabulary.
  int32_t id_bound() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged away
  };

  BpeModel() = default;
  absl::Status LoadVocab(const json_fields::Json& vocab,
                         absl::string_view path);
  absl::Status LoadMerges(const json_fields::Json& merges,
                          absl::string_view path);
  absl::Status AddMerge(const std::string& a, const std::string& b,
                        int32_t rank, absl::string_view path);
  std::optional<int32_t> SymbolId(absl::string_view ch, bool first,
                                  bool last) const;
  absl::Status InitialSymbols(absl::string_view word,
                              std::vector<Symbol>* symbols) const;
  void MergeAll(std::vector<Symbol>* symbols) const;
  // Appends the merge result of `word` (no cache).
  absl::Status Merge(absl::string_view word, std::vector<int32_t>* ids) const;
  void FindSelfMergingTokens();
  const MergeInfo* FindMerge(int32_t left, int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<bool> has_token_;
  // Tokens whose own characters merge back into them, by id.
  std::vector<bool> self_merging_;
  absl::flat_hash_map<uint64_t, MergeInfo> merges_;
  // Single-character tokens by code point below kDirectChars (-1: none).
  static constexpr char32_t kDirectChars = 0x800;
  std::vector<int32_t> char_ids_;
  std::array<int32_t, 256> byte_fallback_ids_{};
  std::optional<std::string> unk_token_;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  BpeCache cache_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_BPE_MODEL_H_
