// Encode speed of HfTokenizer on one core: MB/s over a text corpus and the
// time of one 32K-token prompt, per tokenizer.json, as a table.
// tools/tokenizer_bench/hf_tokenizers_reference.py prints the same table
// for Hugging Face tokenizers (same corpus, same files, same method).
//
//   hf_tokenizer_benchmark [--corpus=FILE] [--runs=N] [NAME=tokenizer.json ...]
//
// Defaults: $RADIXKV_SHARED_DIR/golden/corpus.txt (else the Debian license
// texts listed below, concatenated) and the llama3-bpe and qwen2-bpe golden
// tokenizers under $RADIXKV_SHARED_DIR/golden/tokenizers.
//
// Method (both programs): one warm-up encode of the corpus (fills the BPE
// word cache, as in a running server), then `runs` timed encodes; the table
// shows the first (cold) run and the median. The 32K prompt is the decode of
// the corpus' first 32,768 tokens; its encode is timed the same way. "ids
// fnv1a" hashes the corpus ids (FNV-1a 64 over little-endian int32): equal
// values in both tables mean identical encodings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/tokenizer/hf_tokenizer.h"

ABSL_FLAG(std::string, corpus, "",
          "text file to encode (default: golden/corpus.txt, else Debian "
          "license texts)");
ABSL_FLAG(int, runs, 5, "timed encodes per measurement");

namespace radixkv::model {
namespace {

constexpr int kPromptTokens = 32768;

// Present on every Debian/Ubuntu machine (package base-files).
constexpr const char* kLicenseFiles[] = {
    "/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GPL-2",
    "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/LGPL-2.1",
    "/usr/share/common-licenses/MPL-2.0"};

std::string SharedDir() {
  const char* env = std::getenv("RADIXKV_SHARED_DIR");
  return env != nullptr && env[0] != '\0' ? env : "../shared";
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

std::string DefaultCorpus(std::string* name) {
  std::string text;
  *name = SharedDir() + "/golden/corpus.txt";
  if (ReadFile(*name, &text)) return text;
  *name = "debian-licenses";
  for (const char* f : kLicenseFiles) {
    std::string part;
    if (ReadFile(f, &part)) text += part;
  }
  return text;
}

uint64_t Fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    const uint32_t v = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) {
      h = (h ^ ((v >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
    }
  }
  return h;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Times `runs` encodes of `text`; returns the first (cold cache) and the
// median of the others, in seconds.
std::pair<double, double> TimeEncode(const HfTokenizer& t,
                                     const std::string& text, int runs,
                                     size_t* tokens) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, false);
    times.push_back(Seconds(std::chrono::steady_clock::now() - start));
    if (!ids.ok()) {
      std::fprintf(stderr, "encode failed: %s\n",
                   std::string(ids.status().message()).c_str());
      std::exit(1);
    }
    *tokens = ids->size();
  }
  const double first = times[0];
  if (times.size() > 1) times.erase(times.begin());
  std::sort(times.begin(), times.end());
  return {first, times[times.size() / 2]};
}

int Run(const std::vector<std::pair<std::string, std::string>>& tokenizers) {
  std::string corpus_name = absl::GetFlag(FLAGS_corpus);
  std::string corpus;
  if (corpus_name.empty()) {
    corpus = DefaultCorpus(&corpus_name);
  } else if (!ReadFile(corpus_name, &corpus)) {
    std::fprintf(stderr, "cannot read %s\n", corpus_name.c_str());
    return 1;
  }
  const int runs = std::max(1, absl::GetFlag(FLAGS_runs));
  std::printf("corpus: %s (%zu bytes), %d timed runs, one thread\n",
              corpus_name.c_str(), corpus.size(), runs);
  std::printf("%-16s %9s %10s %10s %12s %10s %14s %18s\n", "tokenizer",
              "load ms", "tokens", "cold MB/s", "median MB/s", "32K tokens",
              "32K median ms", "ids fnv1a");
  for (const auto& [name, path] : tokenizers) {
    const auto load_start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
        HfTokenizer::LoadFile(path);
    const double load = Seconds(std::chrono::steady_clock::now() - load_start);
    if (!t.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   std::string(t.status().message()).c_str());
      return 1;
    }
    size_t tokens = 0;
    const auto [cold, median] = TimeEncode(**t, corpus, 1 + runs, &tokens);
    absl::StatusOr<std::vector<int32_t>> ids = (*t)->Encode(corpus, false);
    const size_t n = std::min<size_t>(kPromptTokens, ids->size());
    absl::StatusOr<std::string> prompt =
        (*t)->Decode(absl::MakeConstSpan(*ids).subspan(0, n), false);
    size_t prompt_tokens = 0;
    const auto [prompt_cold, prompt_median] =
        TimeEncode(**t, *prompt, 1 + runs, &prompt_tokens);
    (void)prompt_cold;
    const double mb = corpus.size() / 1e6;
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(Fnv1a(*ids)));
    std::printf("%-16s %9.1f %10zu %10.2f %12.2f %10zu %14.3f %18s\n",
                name.c_str(), load * 1e3, tokens, mb / cold, mb / median,
                prompt_tokens, prompt_median * 1e3, hash);
  }
  return 0;
}

}  // namespace
}  // namespace radixkv::model

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::vector<std::pair<std::string, std::string>> tokenizers;
  for (size_t i = 1; i < args.size(); ++i) {
    std::vector<std::string> kv =
        absl::StrSplit(args[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      std::fprintf(stderr, "expected NAME=tokenizer.json, got %s\n", args[i]);
      return 2;
    }
    tokenizers.emplace_back(kv[0], kv[1]);
  }
  if (tokenizers.empty()) {
    const std::string dir = radixkv::model::SharedDir() + "/golden/tokenizers/";
    for (const char* name : {"llama3-bpe", "qwen2-bpe"}) {
      tokenizers.emplace_back(name, dir + name + "/tokenizer.json");
    }
  }
  return radixkv::model::Run(tokenizers);
}
