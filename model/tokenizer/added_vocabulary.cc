#include "model/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/pipeline.h"
#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

absl::StatusOr<AddedToken> ParseToken(const Json& json,
                                      absl::string_view path) {
  AddedToken t;
  absl::StatusOr<std::string> content =
      json_fields::String(json, "content", path);
  if (!content.ok()) return content.status();
  t.content = std::move(*content);
  absl::StatusOr<int64_t> id =
      json_fields::Count(json, "id", path, -1, kMaxTokenId);
  if (!id.ok()) return id.status();
  if (*id < 0) return json_fields::Invalid(path, "missing id");
  t.id = static_cast<int32_t>(*id);
  absl::StatusOr<bool> special =
      json_fields::Bool(json, "special", path, false);
  if (!special.ok()) return special.status();
  t.special = *special;
  for (auto [key, field, fallback] :
       {std::tuple{"single_word", &t.single_word, false},
        std::tuple{"lstrip", &t.lstrip, false},
        std::tuple{"rstrip", &t.rstrip, false},
        std::tuple{"normalized", &t.normalized, !t.special}}) {
    absl::StatusOr<bool> v = json_fields::Bool(json, key, path, fallback);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  return t;
}

bool EndsWithWordChar(absl::string_view s) {
  return !s.empty() && unicode::IsRegexWordChar(utf8::LastCodePoint(s));
}

bool StartsWithWordChar(absl::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  return unicode::IsRegexWordChar(utf8::DecodeValid(s, &pos));
}

// Start of the whitespace run that ends `s` (s.size() if none).
size_t TrailingSpaceStart(absl::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    size_t last = start - 1;
    while (last > 0 && (static_cast<unsigned char>(s[last]) & 0xC0) == 0x80) {
      --last;
    }
    size_t pos = last;
    if (!unicode::IsWhitespace(utf8::DecodeValid(s, &pos))) break;
    start = last;
  }
  return start;
}

// Length of the whitespace run that starts `s`.
size_t LeadingSpaceLength(absl::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!unicode::IsWhitespace(utf8::DecodeValid(s, &next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

int32_t TokenTrie::Child(int32_t node, unsigned char b) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), b,
                             [](const std::pair<unsigned char, int32_t>& c,
                                unsigned char v) { return c.first < v; });
  return it != children.end() && it->first == b ? it->second : -1;
}

void TokenTrie::Add(absl::string_view key, int32_t value) {
  int32_t node = root_[static_cast<unsigned char>(key[0])];
  if (node < 0) {
    node = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
    root_[static_cast<unsigned char>(key[0])] = node;
  }
  for (size_t i = 1; i < key.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(key[i]);
    int32_t next = Child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[node].children;
      children.insert(
          std::lower_bound(children.begin(), children.end(),
                           std::pair<unsigned char, int32_t>{b, -1}),
          {b, next});
    }
    node = next;
  }
  if (nodes_[node].value < 0) nodes_[node].value = value;
}

size_t TokenTrie::LongestPrefix(absl::string_view text, int32_t* value) const {
  if (text.empty()) return 0;
  int32_t node = root_[static_cast<unsigned char>(text[0])];
  size_t best = 0;
  for (size_t i = 1; node >= 0; ++i) {
    if (nodes_[node].value >= 0) {
      best = i;
      *value = nodes_[node].value;
    }
    if (i >= text.size()) break;
    node = Child(node, static_cast<unsigned char>(text[i]));
  }
  return best;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::Build(
    const Json* tokens, absl::string_view path, const BpeModel& model,
    const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (tokens == nullptr) return vocab;
  if (!tokens->is_array())
    return json_fields::Invalid(path, "expected an array");
  std::vector<AddedToken> parsed;
  int32_t max_added = -1;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string where = json_fields::Element(path, i);
    absl::StatusOr<AddedToken> t = ParseToken((*tokens)[i], where);
    if (!t.ok()) return t.status();
    if (t->content.empty()) return json_fields::Invalid(where, "empty content");
    if (vocab.by_content_.contains(t->content)) {
      return json_fields::Invalid(
          where, absl::StrCat("duplicate added token '", t->content, "'"));
    }
    // tokenizers' AddedVocabulary::add_tokens id rule.
    int32_t id;
    if (std::optional<int32_t> in_model = model.TokenToId(t->content)) {
      id = *in_model;
    } else if (max_added < 0) {
      id = model.size();
    } else {
      id = max_added >= model.size() || model.size() == 0 ? max_added + 1
                                                          : model.size();
    }
    if (id != t->id) {
      return json_fields::Invalid(
          where,
          absl::StrCat("added token '", t->content, "' has id ", t->id,
                       " but Hugging Face tokenizers would give it ", id));
    }
    max_added = std::max(max_added, id);
    vocab.by_content_.emplace(t->content, id);
    parsed.push_back(std::move(*t));
  }
  // Specials first, then the others, each in file order (the order
  // tokenizers builds its matchers in).
  std::stable_partition(parsed.begin(), parsed.end(),
                        [](const AddedToken& t) { return t.special; });
  vocab.tokens_ = std::move(parsed);
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    const AddedToken& t = vocab.tokens_[i];
    vocab.by_id_.emplace(t.id, i);
    vocab.id_bound_ = std::max(vocab.id_bound_, t.id + 1);
    if (!t.normalized) {
      vocab.raw_trie_.Add(t.content, static_cast<int32_t>(i));
      continue;
    }
    std::string key = t.content;
    bool head_moved = false;
    if (normalizer != nullptr) {
      absl::Status s = normalizer->Normalize(&key, &head_moved);
      if (!s.ok()) return s;
    }
    if (key.empty()) {
      return json_fields::Invalid(
          path, absl::StrCat("added token '", t.content,
                             "' normalizes to the empty string"));
    }
    vocab.normalized_trie_.Add(key, static_cast<int32_t>(i));
  }
  return vocab;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::TokenToId(
    absl::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

// tokenizers' AddedVocabulary::find_matches.
absl::Status AddedVocabulary::Split(const TokenTrie& trie,
                                    absl::string_view text,
                                    PartSink sink) const {
  const size_t n = text.size();
  size_t start_offset = 0;
  size_t i = 0;
  while (i < n) {
    if (!trie.MayStartWith(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    int32_t index = -1;
    const size_t len = trie.LongestPrefix(text.substr(i), &index);
    if (len == 0) {
      ++i;
      continue;
    }
    // The matcher moves past every match, even one discarded below.
    size_t start = i;
    size_t stop = i + len;
    i = stop;
    const AddedToken& token = tokens_[index];
    if (token.single_word &&
        ((start > 0 && EndsWithWordChar(text.substr(0, start))) ||
         (stop < n && StartsWithWordChar(text.substr(stop))))) {
      continue;
    }
    if (token.lstrip) {
      start = std::max(TrailingSpaceStart(text.substr(0, start)), start_offset);
    }
    if (token.rstrip) stop += LeadingSpaceLength(text.substr(stop));
    absl::Status s;
    if (start_offset < start) {
      s = sink(static_cast<uint32_t>(start_offset),
               static_cast<uint32_t>(start), -1);
    }
    if (s.ok()) s = sink(0, 0, token.id);
    if (!s.ok()) return s;
    start_offset = stop;
  }
  if (start_offset < n) {
    return sink(static_cast<uint32_t>(start_offset), static_cast<uint32_t>(n),
                -1);
  }
  return absl::OkStatus();
}

absl::Status AddedVocabulary::ExtractAndNormalize(absl::string_view text,
                                                  const Normalizer* normalizer,
                                                  Sink sink) const {
  if (text.empty()) return absl::OkStatus();
  // Stage 2 for one raw piece: normalize it, then split on the normalized
  // tokens. A slice keeps the origin if it starts a piece that starts the
  // input and normalization dropped nothing in front.
  auto normalize_and_split = [&](absl::string_view piece,
                                 bool at_origin) -> absl::Status {
    if (normalizer == nullptr && normalized_trie_.empty()) {
      return sink(piece, at_origin, -1);
    }
    ScratchString normalized;
    normalized.get().assign(piece.data(), piece.size());
    bool head_moved = false;
    if (normalizer != nullptr) {
      absl::Status s = normalizer->Normalize(&normalized.get(), &head_moved);
      if (!s.ok()) return s;
    }
    const absl::string_view n = normalized.get();
    if (n.empty()) return absl::OkStatus();
    const bool origin = at_origin && !head_moved;
    if (normalized_trie_.empty()) return sink(n, origin, -1);
    return Split(
        normalized_trie_, n, [&](uint32_t begin, uint32_t end, int32_t id) {
          if (id >= 0) return sink({}, false, id);
          return sink(n.substr(begin, end - begin), origin && begin == 0, -1);
        });
  };
  if (raw_trie_.empty()) return normalize_and_split(text, true);
  return Split(raw_trie_, text, [&](uint32_t begin, uint32_t end, int32_t id) {
    if (id >= 0) return sink({}, false, id);
    return normalize_and_split(text.substr(begin, end - begin), begin == 0);
  });
}

}  // namespace radixkv::model
