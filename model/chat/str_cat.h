// String concatenation over std::string_view. absl::StrCat does not take
// std::string_view in this absl build (ABSL_OPTION_USE_STD_STRING_VIEW is 0,
// so absl::string_view is its own type).
#ifndef RADIXKV_MODEL_CHAT_STR_CAT_H_
#define RADIXKV_MODEL_CHAT_STR_CAT_H_

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace radixkv::model::chat {

inline void CatPiece(std::string* out, const char* s) { out->append(s); }
inline void CatPiece(std::string* out, const std::string& s) { out->append(s); }
inline void CatPiece(std::string* out, std::string_view s) { out->append(s); }
inline void CatPiece(std::string* out, absl::string_view s) {
  out->append(s.data(), s.size());
}
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void CatPiece(std::string* out, T v) {
  absl::StrAppend(out, v);
}

// Appends the pieces (strings, string views, numbers) to *out.
template <typename... Pieces>
void CatTo(std::string* out, const Pieces&... pieces) {
  (CatPiece(out, pieces), ...);
}

// The concatenation of the pieces.
template <typename... Pieces>
std::string Cat(const Pieces&... pieces) {
  std::string out;
  CatTo(&out, pieces...);
  return out;
}

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_STR_CAT_H_
