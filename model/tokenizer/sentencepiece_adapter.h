// The sentencepiece plug-in: libsentencepiece behind a C-linkage function
// table, built as its own shared object (libradixkv_sentencepiece.so) and
// loaded by Tokenizer with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why a plug-in: Debian 12's libsentencepiece.so.0 (0.1.97) embeds a private
// protobuf-lite 3.14 and exports its google::protobuf symbols. In a process
// that also links libprotobuf.so.32 (3.21, needed by gRPC) the two copies
// interpose each other: depending on link order the process dies at start-up
// in libprotobuf's static initializers (SIGSEGV) or in sentencepiece's version
// check (abort). Loading sentencepiece RTLD_LOCAL keeps its symbols out of the
// global scope and RTLD_DEEPBIND makes it bind to its own protobuf copy.
// Also, its header declares `namespace absl { using std::string_view; }`,
// which clashes with Abseil 20220623's absl::string_view class, so
// sentencepiece_adapter.cc includes no Abseil header.
//
// Both sides share one libstdc++ (same compiler, same process), so std types
// may cross the boundary. Internal to //model/tokenizer; use
// SentencePieceTokenizer.
#ifndef RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_ADAPTER_H_
#define RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_ADAPTER_H_

#include <string>
#include <string_view>
#include <vector>

// Bump when the table changes; the loader refuses a mismatching plug-in.
#define RADIXKV_SENTENCEPIECE_API_VERSION 2

extern "C" {

// Operations on an opaque SentencePieceProcessor handle. Functions returning
// bool set `*error` on failure.
struct RadixkvSentencePieceApi {
  int version;  // RADIXKV_SENTENCEPIECE_API_VERSION
  void* (*create)();
  void (*destroy)(void* sp);
  // Loads a serialized ModelProto (tokenizer.model).
  bool (*load)(void* sp, const std::string* path, std::string* error);
  // UTF-8 text -> ids, no BOS/EOS.
  bool (*encode)(const void* sp, std::string_view text, std::vector<int>* ids,
                 std::string* error);
  // ids -> UTF-8 text (control pieces dropped, byte pieces merged, incomplete
  // UTF-8 runs become U+FFFD). ids must be in [0, piece_size).
  bool (*decode)(const void* sp, const std::vector<int>* ids, std::string* text,
                 std::string* error);
  int (*piece_size)(const void* sp);
  int (*bos_id)(const void* sp);  // -1 if none
  int (*eos_id)(const void* sp);  // -1 if none
  // The piece string of `id` in [0, piece_size) ("<s>", "\u2581the", ...).
  void (*id_to_piece)(const void* sp, int id, std::string* piece);
  // The id of `piece`, or the unknown id when it is not a piece.
  int (*piece_to_id)(const void* sp, std::string_view piece);
  // True for control pieces (BOS, EOS, ...) and the unknown piece.
  bool (*is_control)(const void* sp, int id);
  bool (*is_unknown)(const void* sp, int id);
};

// The plug-in's single exported symbol.
const RadixkvSentencePieceApi* radixkv_sentencepiece_api();

}  // extern "C"

#endif  // RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_ADAPTER_H_
