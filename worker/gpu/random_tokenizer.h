// A byte-level BPE tokenizer.json (Hugging Face tokenizers format) for a
// random checkpoint's vocabulary, so that the whole stack (router
// tokenization, detokenized streams) runs on a model of that vocabulary.
// The merges are synthetic, not trained: ids 0..255 are the bytes (GPT-2's
// byte-to-unicode alphabet, as tokenizers' ByteLevel pre-tokenizer), then
// every byte pair, then (byte pair, byte) triples, until `regular` tokens;
// ids [regular, vocab) are special added tokens named as Llama 3's
// (<|begin_of_text|>, <|end_of_text|>, <|reserved_special_token_N|>).
#ifndef RADIXKV_WORKER_GPU_RANDOM_TOKENIZER_H_
#define RADIXKV_WORKER_GPU_RANDOM_TOKENIZER_H_

#include <cstdint>
#include <string>

namespace radixkv::worker::gpu {

// Writes `path` (tokenizer.json) for `vocab` ids of which the first
// `regular` are BPE tokens (256 <= regular <= vocab, regular <= 256 + 65,536
// + 65,536 * 256). Returns false when the bounds do not hold or the file
// cannot be written.
bool WriteByteLevelTokenizer(const std::string& path, int32_t vocab,
                             int32_t regular);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_RANDOM_TOKENIZER_H_
