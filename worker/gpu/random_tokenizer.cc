#include "worker/gpu/random_tokenizer.h"

#include <array>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace radixkv::worker::gpu {
namespace {

// GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py, also tokenizers'
// byte_level.rs): printable Latin-1 bytes map to themselves, the others to
// U+0100 onwards; returned as UTF-8 strings.
std::array<std::string, 256> ByteAlphabet() {
  std::array<std::string, 256> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out[b] = s;
  }
  return out;
}

}  // namespace

bool WriteByteLevelTokenizer(const std::string& path, int32_t vocab,
                             int32_t regular) {
  constexpr int64_t kPairs = 256 * 256;
  if (regular < 256 || regular > vocab || regular > 256 + kPairs * 257) {
    return false;
  }
  const std::array<std::string, 256> bytes = ByteAlphabet();
  nlohmann::json tokens = nlohmann::json::object();
  nlohmann::json merges = nlohmann::json::array();
  for (int b = 0; b < 256; ++b) tokens[bytes[b]] = b;
  for (int32_t id = 256; id < regular; ++id) {
    const int64_t k = id - 256;
    std::string left, right;
    if (k < kPairs) {  // byte pair (k / 256, k % 256)
      left = bytes[k / 256];
      right = bytes[k % 256];
    } else {  // (pair (k - kPairs) / 256, byte (k - kPairs) % 256)
      const int64_t p = (k - kPairs) / 256;
      left = bytes[p / 256] + bytes[p % 256];
      right = bytes[(k - kPairs) % 256];
    }
    tokens[left + right] = id;
    merges.push_back(nlohmann::json::array({left, right}));
  }
  nlohmann::json added = nlohmann::json::array();
  for (int32_t id = regular; id < vocab; ++id) {
    const int32_t i = id - regular;
    const std::string content =
        i == 0   ? "<|begin_of_text|>"
        : i == 1 ? "<|end_of_text|>"
                 : absl::StrCat("<|reserved_special_token_", i - 2, "|>");
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  const nlohmann::json doc = {{"version", "1.0"},
                              {"truncation", nullptr},
                              {"padding", nullptr},
                              {"added_tokens", added},
                              {"normalizer", nullptr},
                              {"pre_tokenizer", byte_level},
                              {"post_processor", byte_level},
                              {"decoder", byte_level},
                              {"model",
                               {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", nullptr},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", false},
                                {"byte_fallback", false},
                                {"ignore_merges", false},
                                {"vocab", tokens},
                                {"merges", merges}}}};
  std::ofstream f(path);
  f << doc.dump() << "\n";
  return f.good();
}

}  // namespace radixkv::worker::gpu
