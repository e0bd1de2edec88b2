// Compact text of the canonical dump (CacheState::CanonicalDump): quoted
// strings and runs of consecutive integers.
#ifndef RADIXKV_CACHE_SERVICE_DUMP_TEXT_H_
#define RADIXKV_CACHE_SERVICE_DUMP_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace radixkv::cache_service {

// s in double quotes, C-escaped ("a\"b" for a"b), so any bytes dump as
// one printable token.
inline std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CEscape(std::string(s)), "\"");
}

// "a..b" runs of consecutive (step +1 or -1) integers, comma-separated:
// {1, 2, 3, 7, 6} -> "1..3,7..6"; a lone value is written alone.
template <typename T>
inline std::string Runs(const std::vector<T>& values) {
  std::string out;
  size_t i = 0;
  while (i < values.size()) {
    size_t j = i;
    int64_t step = 0;
    if (i + 1 < values.size()) {
      const int64_t d = static_cast<int64_t>(values[i + 1]) - values[i];
      if (d == 1 || d == -1) step = d;
    }
    if (step != 0) {
      while (j + 1 < values.size() &&
             static_cast<int64_t>(values[j + 1]) - values[j] == step) {
        ++j;
      }
    }
    if (!out.empty()) out += ",";
    if (j == i) {
      absl::StrAppend(&out, values[i]);
    } else {
      absl::StrAppend(&out, values[i], "..", values[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_DUMP_TEXT_H_
