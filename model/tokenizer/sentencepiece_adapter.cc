// Built into libradixkv_sentencepiece.so. No Abseil includes in this file:
// see sentencepiece_adapter.h.
#include "model/tokenizer/sentencepiece_adapter.h"

#include <sentencepiece_processor.h>

namespace {

using sentencepiece::SentencePieceProcessor;

const SentencePieceProcessor* Sp(const void* sp) {
  return static_cast<const SentencePieceProcessor*>(sp);
}

void* Create() { return new SentencePieceProcessor(); }

void Destroy(void* sp) { delete static_cast<SentencePieceProcessor*>(sp); }

bool Load(void* sp, const std::string* path, std::string* error) {
  const sentencepiece::util::Status s =
      static_cast<SentencePieceProcessor*>(sp)->Load(*path);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool Encode(const void* sp, std::string_view text, std::vector<int>* ids,
            std::string* error) {
  const sentencepiece::util::Status s = Sp(sp)->Encode(text, ids);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool Decode(const void* sp, const std::vector<int>* ids, std::string* text,
            std::string* error) {
  const sentencepiece::util::Status s = Sp(sp)->Decode(*ids, text);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

int PieceSize(const void* sp) { return Sp(sp)->GetPieceSize(); }
int BosId(const void* sp) { return Sp(sp)->bos_id(); }
int EosId(const void* sp) { return Sp(sp)->eos_id(); }
void IdToPiece(const void* sp, int id, std::string* piece) {
  *piece = Sp(sp)->IdToPiece(id);
}
int PieceToId(const void* sp, std::string_view piece) {
  return Sp(sp)->PieceToId(piece);
}
bool IsControl(const void* sp, int id) { return Sp(sp)->IsControl(id); }
bool IsUnknown(const void* sp, int id) { return Sp(sp)->IsUnknown(id); }

constexpr RadixkvSentencePieceApi kApi = {
    RADIXKV_SENTENCEPIECE_API_VERSION,
    &Create,
    &Destroy,
    &Load,
    &Encode,
    &Decode,
    &PieceSize,
    &BosId,
    &EosId,
    &IdToPiece,
    &PieceToId,
    &IsControl,
    &IsUnknown,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const RadixkvSentencePieceApi*
radixkv_sentencepiece_api() {
  return &kApi;
}
