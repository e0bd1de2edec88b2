// The text of one Encode call as it moves through the pipeline: a list of
// pieces, each a byte range of one shared buffer (tokenizers'
// PreTokenizedString of NormalizedString splits, without the per-byte
// alignment tables, which only offsets need).
#ifndef RADIXKV_MODEL_TOKENIZER_PIECES_H_
#define RADIXKV_MODEL_TOKENIZER_PIECES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace radixkv::model {

struct Piece {
  uint32_t begin = 0;  // byte range in PieceList::text
  uint32_t end = 0;
  // >= 0: an added token already recognised (its text is not processed
  // further); -1: text for the pre-tokenizer and the model.
  int32_t token_id = -1;
  // The piece starts at offset 0 of the original input (tokenizers'
  // `offsets_original().0 == 0`, read by Metaspace's prepend_scheme "first").
  bool at_origin = false;
  // The piece's first byte still maps to the piece's original start: false
  // after a normalizer dropped leading characters (Strip, a Replace by ""),
  // so a slice starting there no longer starts at the piece's origin.
  bool head_aligned = true;
};

struct PieceList {
  std::string text;
  std::vector<Piece> pieces;

  absl::string_view View(const Piece& p) const {
    return absl::string_view(text.data() + p.begin, p.end - p.begin);
  }
};

// Appends to `out` the slice [begin, end) of `parent` (offsets relative to
// the parent piece, already in out's buffer coordinates through `base`),
// with the origin flags a tokenizers slice would have. Empty slices are
// dropped, as PreTokenizedString::split drops them.
inline void AppendSlice(const Piece& parent, uint32_t base, uint32_t begin,
                        uint32_t end, std::vector<Piece>* out) {
  if (begin >= end) return;
  Piece p;
  p.begin = base + begin;
  p.end = base + end;
  p.at_origin = begin == 0 && parent.at_origin && parent.head_aligned;
  out->push_back(p);
}

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_PIECES_H_
