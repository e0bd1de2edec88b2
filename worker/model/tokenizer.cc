#include "worker/model/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/model/sentencepiece_adapter.h"

namespace radixkv::worker {
namespace {

// U+FFFD REPLACEMENT CHARACTER in UTF-8: what sentencepiece produces for an
// incomplete byte-fallback sequence.
constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

bool EndsWithReplacementChar(absl::string_view s) {
  return s.size() >= kReplacementChar.size() &&
         s.substr(s.size() - kReplacementChar.size()) == kReplacementChar;
}

// Number of context tokens decoded before the first generated one, so the
// window sees the same leading-space situation as a full decode.
constexpr size_t kPromptContextTokens = 5;

constexpr char kPluginFileName[] = "libradixkv_sentencepiece.so";
constexpr char kPluginRunfile[] = "worker/model/libradixkv_sentencepiece.so";

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

Tokenizer::Tokenizer(const RadixkvSentencePieceApi* api, void* sp)
    : api_(api), sp_(sp) {}

Tokenizer::~Tokenizer() { api_->destroy(sp_); }

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path) {
  if (!std::ifstream(model_path).good()) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer model not found: ", model_path));
  }
  absl::StatusOr<const RadixkvSentencePieceApi*> api =
      LoadSentencePiecePlugin();
  if (!api.ok()) return api.status();
  std::unique_ptr<Tokenizer> t(new Tokenizer(*api, (*api)->create()));
  std::string error;
  if (!t->api_->load(t->sp_, &model_path, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot load sentencepiece model ", model_path, ": ", error));
  }
  return t;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_bos) const {
  std::vector<int> ids;
  std::string error;
  if (!api_->encode(sp_, std::string_view(text.data(), text.size()), &ids,
                    &error)) {
    return absl::InvalidArgumentError(absl::StrCat("encode: ", error));
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(
    absl::Span<const int32_t> ids) const {
  const int32_t n = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside [0, ", n, ")"));
    }
  }
  std::string text;
  std::string error;
  const std::vector<int> v(ids.begin(), ids.end());
  if (!api_->decode(sp_, &v, &text, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("decode: ", error));
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return api_->piece_size(sp_); }
int32_t Tokenizer::bos_id() const { return api_->bos_id(sp_); }
int32_t Tokenizer::eos_id() const { return api_->eos_id(sp_); }

IncrementalDetokenizer::IncrementalDetokenizer(
    const Tokenizer* tokenizer, absl::Span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContextTokens);
  ids_.assign(prompt_ids.end() - keep, prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

absl::StatusOr<std::string> IncrementalDetokenizer::Append(int32_t id) {
  ids_.push_back(id);
  absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->Decode(all.subspan(prefix_offset_));
  if (!new_text.ok()) {
    ids_.pop_back();
    return new_text.status();
  }
  if (new_text->size() <= prefix_text->size() ||
      EndsWithReplacementChar(*new_text)) {
    return std::string();  // nothing complete yet
  }
  std::string delta = new_text->substr(prefix_text->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->Decode(all.subspan(prefix_offset_));
  if (!new_text.ok()) return new_text.status();
  if (new_text->size() <= prefix_text->size()) return std::string();
  std::string delta = new_text->substr(prefix_text->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

}  // namespace radixkv::worker
