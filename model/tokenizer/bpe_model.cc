#include "model/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

// A pending merge: tokenizers' `Merge`, popped lowest rank first, then
// leftmost position.
struct QueueEntry {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
struct QueueAfter {
  bool operator()(const QueueEntry& a, const QueueEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

static_assert(BpeCache::kCapacity / 16 > 0);

bool BpeCache::Lookup(absl::string_view word, std::vector<int32_t>* out) const {
  const size_t hash = Map::hasher()(word);
  // High bits pick the shard; the table itself uses the low ones.
  Shard& shard = shards_[hash >> (8 * sizeof(size_t) - 4)];
  std::unique_lock<std::mutex> lock(shard.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto it = shard.map.find(word, hash);
  if (it == shard.map.end()) return false;
  out->insert(out->end(), it->second.begin(), it->second.end());
  return true;
}

void BpeCache::Insert(absl::string_view word,
                      absl::Span<const int32_t> ids) const {
  const size_t hash = Map::hasher()(word);
  Shard& shard = shards_[hash >> (8 * sizeof(size_t) - 4)];
  std::unique_lock<std::mutex> lock(shard.mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (shard.map.size() >= kCapacity / kShards) shard.map.clear();
  shard.map.emplace(word, std::vector<int32_t>(ids.begin(), ids.end()));
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(
    const Json& json, absl::string_view path) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  const Json* dropout = json_fields::Find(json, "dropout");
  if (dropout != nullptr &&
      (!dropout->is_number() || dropout->get<double>() != 0.0)) {
    return json_fields::Unsupported("BPE dropout", dropout->dump(),
                                    json_fields::Child(path, "dropout"));
  }
  absl::StatusOr<std::optional<std::string>> unk =
      json_fields::OptionalString(json, "unk_token", path);
  if (!unk.ok()) return unk.status();
  model->unk_token_ = *unk;
  for (auto [key, field] :
       {std::pair{"continuing_subword_prefix", &model->prefix_},
        std::pair{"end_of_word_suffix", &model->suffix_}}) {
    absl::StatusOr<std::optional<std::string>> v =
        json_fields::OptionalString(json, key, path);
    if (!v.ok()) return v.status();
    *field = v->value_or("");
  }
  for (auto [key, field] :
       {std::pair{"fuse_unk", &model->fuse_unk_},
        std::pair{"byte_fallback", &model->byte_fallback_},
        std::pair{"ignore_merges", &model->ignore_merges_}}) {
    absl::StatusOr<bool> v = json_fields::Bool(json, key, path, false);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  const Json* vocab = json_fields::Find(json, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return json_fields::Invalid(json_fields::Child(path, "vocab"),
                                "expected an object {token: id}");
  }
  absl::Status s = model->LoadVocab(*vocab, json_fields::Child(path, "vocab"));
  if (!s.ok()) return s;
  const Json* merges = json_fields::Find(json, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return json_fields::Invalid(json_fields::Child(path, "merges"),
                                "expected an array");
  }
  s = model->LoadMerges(*merges, json_fields::Child(path, "merges"));
  if (!s.ok()) return s;
  model->FindSelfMergingTokens();
  return model;
}

void BpeModel::FindSelfMergingTokens() {
  self_merging_.assign(tokens_.size(), false);
  std::vector<int32_t> ids;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!has_token_[id] || tokens_[id].empty()) continue;
    ids.clear();
    self_merging_[id] = Merge(tokens_[id], &ids).ok() && ids.size() == 1 &&
                        ids[0] == static_cast<int32_t>(id);
  }
}

absl::Status BpeModel::LoadVocab(const Json& vocab, absl::string_view path) {
  int32_t max_id = -1;
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxTokenId) {
      return json_fields::Invalid(
          json_fields::Child(path, it.key()),
          absl::StrCat("expected an id in [0, ", kMaxTokenId, "]"));
    }
    const int32_t id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  tokens_.resize(max_id + 1);
  has_token_.assign(max_id + 1, false);
  char_ids_.assign(kDirectChars, -1);
  for (const auto& [token, id] : vocab_) {
    if (has_token_[id]) {
      return json_fields::Invalid(
          path, absl::StrCat("id ", id, " is given to both '", tokens_[id],
                             "' and '", token, "'"));
    }
    has_token_[id] = true;
    tokens_[id] = token;
    size_t pos = 0;
    if (!token.empty() &&
        static_cast<size_t>(utf8::SequenceLength(token[0])) == token.size()) {
      const char32_t cp = utf8::DecodeValid(token, &pos);
      if (cp < kDirectChars) char_ids_[cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(absl::string_view(name));
    byte_fallback_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::LoadMerges(const Json& merges, absl::string_view path) {
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    const std::string where = json_fields::Element(path, i);
    std::string a, b;
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else if (m.is_string()) {
      // Legacy "a b": one space splits; with several, the one cut that
      // makes a, b and a+b vocabulary entries (tokenizers' serialization.rs).
      const std::string line = m.get<std::string>();
      const size_t spaces = std::count(line.begin(), line.end(), ' ');
      int found = 0;
      for (size_t cut = line.find(' '); cut != std::string::npos;
           cut = line.find(' ', cut + 1)) {
        std::string left = line.substr(0, cut);
        std::string right = line.substr(cut + 1);
        if (spaces == 1 || (vocab_.contains(left) && vocab_.contains(right) &&
                            vocab_.contains(left + right))) {
          a = std::move(left);
          b = std::move(right);
          ++found;
        }
      }
      if (found != 1) {
        return json_fields::Invalid(
            where,
            absl::StrCat("merge '", line, "' does not split into two tokens"));
      }
    } else {
      return json_fields::Invalid(where, "expected \"a b\" or [\"a\", \"b\"]");
    }
    absl::Status s = AddMerge(a, b, static_cast<int32_t>(i), where);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::AddMerge(const std::string& a, const std::string& b,
                                int32_t rank, absl::string_view path) {
  auto ia = vocab_.find(a);
  auto ib = vocab_.find(b);
  if (ia == vocab_.end() || ib == vocab_.end()) {
    return json_fields::Invalid(
        path, absl::StrCat("merge token '", ia == vocab_.end() ? a : b,
                           "' is not in the vocabulary"));
  }
  // The merged token drops b's continuing_subword_prefix.
  if (b.size() < prefix_.size() ||
      (b.size() > prefix_.size() &&
       (static_cast<unsigned char>(b[prefix_.size()]) & 0xC0) == 0x80)) {
    return json_fields::Invalid(
        path, absl::StrCat("merge token '", b,
                           "' is shorter than continuing_subword_prefix"));
  }
  const std::string merged = a + b.substr(prefix_.size());
  auto im = vocab_.find(merged);
  if (im == vocab_.end()) {
    return json_fields::Invalid(
        path,
        absl::StrCat("merged token '", merged, "' is not in the vocabulary"));
  }
  // A repeated pair keeps its last rank, as tokenizers' HashMap collect.
  merges_[PairKey(ia->second, ib->second)] = MergeInfo{rank, im->second};
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_bound() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

const BpeModel::MergeInfo* BpeModel::FindMerge(int32_t left,
                                               int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::optional<int32_t> BpeModel::SymbolId(absl::string_view ch, bool first,
                                          bool last) const {
  const bool add_prefix = !first && !prefix_.empty();
  const bool add_suffix = last && !suffix_.empty();
  if (!add_prefix && !add_suffix) {
    size_t pos = 0;
    const char32_t cp = utf8::DecodeValid(ch, &pos);
    if (cp < kDirectChars) {
      const int32_t id = char_ids_[cp];
      if (id < 0) return std::nullopt;
      return id;
    }
    return TokenToId(ch);
  }
  return TokenToId(
      absl::StrCat(add_prefix ? prefix_ : "", ch, add_suffix ? suffix_ : ""));
}

// tokenizers' BPE::merge_word before merging: one symbol per character (or
// its <0xXX> byte tokens), unknown characters as unk_token (fused when
// fuse_unk), dropped when there is neither.
absl::Status BpeModel::InitialSymbols(absl::string_view word,
                                      std::vector<Symbol>* symbols) const {
  auto add = [symbols](int32_t id, uint32_t len) {
    const int32_t n = static_cast<int32_t>(symbols->size());
    if (n > 0) symbols->back().next = n;
    symbols->push_back(Symbol{id, n - 1, -1, len});
  };
  std::optional<std::pair<int32_t, uint32_t>> unk;  // pending (id, len)
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    pos += utf8::SequenceLength(static_cast<unsigned char>(word[pos]));
    const absl::string_view ch = word.substr(begin, pos - begin);
    const uint32_t len = static_cast<uint32_t>(ch.size());
    if (std::optional<int32_t> id =
            SymbolId(ch, begin == 0, pos == word.size())) {
      if (unk) add(unk->first, unk->second);
      unk.reset();
      add(*id, len);
      continue;
    }
    if (byte_fallback_) {
      // The bytes of the character as tokenizers looks them up: with any
      // prefix/suffix the symbol would have carried.
      const std::string s = absl::StrCat(begin != 0 ? prefix_ : "", ch,
                                         pos == word.size() ? suffix_ : "");
      bool all = true;
      for (char c : s)
        all &= byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : s)
          add(byte_fallback_ids_[static_cast<unsigned char>(c)], 1);
        continue;  // a pending unk stays pending (tokenizers' order)
      }
    }
    if (!unk_token_.has_value()) continue;
    if (unk && fuse_unk_) {
      unk->second += len;
      continue;
    }
    if (unk) add(unk->first, unk->second);
    std::optional<int32_t> unk_id = TokenToId(*unk_token_);
    if (!unk_id.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unk_token '", *unk_token_, "' is not in the BPE vocabulary"));
    }
    unk = std::pair{*unk_id, len};
  }
  if (unk) add(unk->first, unk->second);
  return absl::OkStatus();
}

// tokenizers' Word::merge_all without dropout.
void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& symbols = *symbols_ptr;
  thread_local std::vector<QueueEntry> queue;
  queue.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeInfo* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), QueueAfter());
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), QueueAfter());
    const QueueEntry top = queue.back();
    queue.pop_back();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const Symbol right = symbols[cur.next];
    const MergeInfo* m = FindMerge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    symbols[cur.next].len = 0;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeInfo* p = FindMerge(symbols[cur.prev].id, cur.id)) {
        queue.push_back({p->rank, cur.prev, p->new_id});
        std::push_heap(queue.begin(), queue.end(), QueueAfter());
      }
    }
    if (cur.next >= 0) {
      if (const MergeInfo* n = FindMerge(cur.id, symbols[cur.next].id)) {
        queue.push_back({n->rank, top.pos, n->new_id});
        std::push_heap(queue.begin(), queue.end(), QueueAfter());
      }
    }
  }
}

absl::Status BpeModel::Merge(absl::string_view word,
                             std::vector<int32_t>* ids) const {
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  absl::Status s = InitialSymbols(word, &symbols);
  if (!s.ok()) return s;
  MergeAll(&symbols);
  for (const Symbol& sym : symbols) {
    if (sym.len != 0) ids->push_back(sym.id);
  }
  return absl::OkStatus();
}

absl::Status BpeModel::Tokenize(absl::string_view word,
                                std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  // A word that is a token: itself with ignore_merges, and otherwise when
  // merging its characters is known (from load) to give that token.
  if (auto it = vocab_.find(word);
      it != vocab_.end() && (ignore_merges_ || self_merging_[it->second])) {
    ids->push_back(it->second);
    return absl::OkStatus();
  }
  const bool cacheable = word.size() < BpeCache::kMaxWordBytes;
  if (cacheable && cache_.Lookup(word, ids)) return absl::OkStatus();
  const size_t first = ids->size();
  absl::Status s = Merge(word, ids);
  if (!s.ok()) return s;
  if (cacheable) {
    cache_.Insert(word, absl::MakeConstSpan(*ids).subspan(first));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::model
