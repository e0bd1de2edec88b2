#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/sentencepiece_adapter.h"

namespace radixkv::model {
namespace {

constexpr char kPluginFileName[] = "libradixkv_sentencepiece.so";
constexpr char kPluginRunfile[] = "model/tokenizer/libradixkv_sentencepiece.so";

// Loads the sentencepiece plug-in once per process.
absl::StatusOr<const RadixkvSentencePieceApi*> LoadSentencePiecePlugin() {
  static absl::StatusOr<const RadixkvSentencePieceApi*>* const plugin = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("RADIXKV_SENTENCEPIECE_PLUGIN");
        env != nullptr && env[0] != '\0') {
      candidates.push_back(env);
    }
    std::string exe;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) exe.assign(buf, n);
    for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
      if (const char* dir = std::getenv(var); dir != nullptr) {
        candidates.push_back(absl::StrCat(dir, "/radixkv/", kPluginRunfile));
      }
    }
    if (!exe.empty()) {
      candidates.push_back(
          absl::StrCat(exe, ".runfiles/radixkv/", kPluginRunfile));
      candidates.push_back(
          absl::StrCat(exe.substr(0, exe.rfind('/') + 1), kPluginFileName));
    }
    std::string tried;
    for (const std::string& path : candidates) {
      void* handle =
          ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        absl::StrAppend(&tried, "\n  ", path, ": ", ::dlerror());
        continue;
      }
      using ApiFn = const RadixkvSentencePieceApi* (*)();
      auto fn =
          reinterpret_cast<ApiFn>(::dlsym(handle, "radixkv_sentencepiece_api"));
      const RadixkvSentencePieceApi* api = fn != nullptr ? fn() : nullptr;
      if (api == nullptr || api->version != RADIXKV_SENTENCEPIECE_API_VERSION) {
        absl::StrAppend(&tried, "\n  ", path,
                        ": not a compatible radixkv sentencepiece plug-in");
        ::dlclose(handle);
        continue;
      }
      return new absl::StatusOr<const RadixkvSentencePieceApi*>(api);
    }
    return new absl::StatusOr<const RadixkvSentencePieceApi*>(
        absl::FailedPreconditionError(absl::StrCat(
            "sentencepiece plug-in ", kPluginFileName,
            " not found; set RADIXKV_SENTENCEPIECE_PLUGIN or copy it next "
            "to the binary. Tried:",
            tried)));
  }();
  return *plugin;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(
    const RadixkvSentencePieceApi* api, void* sp, Options options)
    : api_(api), sp_(sp), options_(options) {
  const int n = api_->piece_size(sp_);
  for (int id = 0; id < n; ++id) {
    if (!api_->is_control(sp_, id) && !api_->is_unknown(sp_, id)) continue;
    std::string piece;
    api_->id_to_piece(sp_, id, &piece);
    if (!piece.empty()) specials_.emplace_back(std::move(piece), id);
  }
  // Longest first, so that a special that is a prefix of another loses.
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) {
                     return a.first.size() > b.first.size();
                   });
}

SentencePieceTokenizer::~SentencePieceTokenizer() { api_->destroy(sp_); }

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
SentencePieceTokenizer::Load(const std::string& model_path, Options options) {
  if (!std::ifstream(model_path).good()) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer model not found: ", model_path));
  }
  absl::StatusOr<const RadixkvSentencePieceApi*> api =
      LoadSentencePiecePlugin();
  if (!api.ok()) return api.status();
  void* sp = (*api)->create();
  std::string error;
  if (!(*api)->load(sp, &model_path, &error)) {
    (*api)->destroy(sp);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot load sentencepiece model ", model_path, ": ", error));
  }
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(*api, sp, options));
}

absl::Status SentencePieceTokenizer::EncodePlain(
    absl::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<int> ids;
  std::string error;
  if (!api_->encode(sp_, std::string_view(text.data(), text.size()), &ids,
                    &error)) {
    return absl::InvalidArgumentError(absl::StrCat("encode: ", error));
  }
  out->insert(out->end(), ids.begin(), ids.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(
    absl::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens && options_.add_bos && bos_id() >= 0) {
    out.push_back(bos_id());
  }
  size_t start = 0;  // of the pending plain segment
  size_t i = 0;
  while (i < text.size()) {
    const auto special =
        std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) {
          return text.substr(i, s.first.size()) == s.first;
        });
    if (special == specials_.end()) {
      ++i;
      continue;
    }
    if (absl::Status s = EncodePlain(text.substr(start, i - start), &out);
        !s.ok()) {
      return s;
    }
    out.push_back(special->second);
    i += special->first.size();
    start = i;
  }
  if (absl::Status s = EncodePlain(text.substr(start), &out); !s.ok()) {
    return s;
  }
  if (add_special_tokens && options_.add_eos && eos_id() >= 0) {
    out.push_back(eos_id());
  }
  return out;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(
    absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  const int32_t n = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside [0, ", n, ")"));
    }
  }
  std::string text;
  std::vector<int> run;
  auto flush = [&]() -> absl::Status {
    if (run.empty()) return absl::OkStatus();
    std::string piece, error;
    if (!api_->decode(sp_, &run, &piece, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("decode: ", error));
    }
    text += piece;
    run.clear();
    return absl::OkStatus();
  };
  for (int32_t id : ids) {
    if (skip_special_tokens || !IsSpecial(id)) {
      run.push_back(id);
      continue;
    }
    if (absl::Status s = flush(); !s.ok()) return s;
    std::string piece;
    api_->id_to_piece(sp_, id, &piece);
    text += piece;
  }
  if (absl::Status s = flush(); !s.ok()) return s;
  return text;
}

int32_t SentencePieceTokenizer::vocab_size() const {
  return api_->piece_size(sp_);
}

std::optional<int32_t> SentencePieceTokenizer::TokenToId(
    absl::string_view token) const {
  const int id =
      api_->piece_to_id(sp_, std::string_view(token.data(), token.size()));
  if (api_->is_unknown(sp_, id)) {
    std::string unk;
    api_->id_to_piece(sp_, id, &unk);
    if (unk != token) return std::nullopt;  // not a piece
  }
  return id;
}

std::optional<std::string> SentencePieceTokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  std::string piece;
  api_->id_to_piece(sp_, id, &piece);
  return piece;
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() &&
         (api_->is_control(sp_, id) || api_->is_unknown(sp_, id));
}

int32_t SentencePieceTokenizer::bos_id() const { return api_->bos_id(sp_); }

int32_t SentencePieceTokenizer::eos_id() const { return api_->eos_id(sp_); }

}  // namespace radixkv::model
