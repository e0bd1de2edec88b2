// Python str operations on UTF-8 strings, indexed by code point as Python
// indexes str: strip, split, splitlines, replace, find, count, padding, and
// slice index normalization.
#ifndef RADIXKV_MODEL_CHAT_PY_STR_H_
#define RADIXKV_MODEL_CHAT_PY_STR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace radixkv::model::chat {

// Python's slice.indices(length) for a slice with optional bounds (the step
// must not be 0): the normalized start, stop and step, and the item count.
struct SliceIndices {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  int64_t count = 0;
};
SliceIndices NormalizeSlice(int64_t length, std::optional<int64_t> start,
                            std::optional<int64_t> stop,
                            std::optional<int64_t> step);

// str.strip/lstrip/rstrip: `chars` (a set of code points) or whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);

// str.split / str.rsplit: `sep` (non-empty) or runs of whitespace;
// maxsplit < 0 means no limit.
std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit);

// str.splitlines: breaks at \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028
// \u2029.
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);

// str.replace; count < 0 replaces all.
std::string PyReplace(std::string_view s, std::string_view old_text,
                      std::string_view new_text, int64_t count);

// str.find / str.rfind over s[start:end] (code points); -1 if absent.
int64_t PyFind(std::string_view s, std::string_view sub,
               std::optional<int64_t> start, std::optional<int64_t> end,
               bool reverse);

// str.count over s[start:end].
int64_t PyCount(std::string_view s, std::string_view sub,
                std::optional<int64_t> start, std::optional<int64_t> end);

// s[start:end] by code points with Python's clamping.
std::string PySubstring(std::string_view s, std::optional<int64_t> start,
                        std::optional<int64_t> end);

// str.center / ljust / rjust with a one-character fill; str.zfill.
std::string PyPad(std::string_view s, int64_t width, std::string_view fill,
                  char align);  // align: '^', '<' (ljust), '>' (rjust)
std::string PyZfill(std::string_view s, int64_t width);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_PY_STR_H_
