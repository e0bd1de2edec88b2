#include "model/chat/py_str.h"

#include <algorithm>

#include "model/chat/py_unicode.h"

namespace radixkv::model::chat {
namespace {

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

// CPython's ADJUST_INDICES for find/count.
void AdjustIndices(int64_t length, std::optional<int64_t> start,
                   std::optional<int64_t> end, int64_t* lo, int64_t* hi) {
  *lo = start.value_or(0);
  *hi = end.value_or(length);
  if (*hi > length) {
    *hi = length;
  } else if (*hi < 0) {
    *hi = std::max<int64_t>(*hi + length, 0);
  }
  if (*lo < 0) *lo = std::max<int64_t>(*lo + length, 0);
}

std::vector<std::string> SplitWhitespace(const std::u32string& cps,
                                         int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = cps.size();
  while (i < n && PyIsSpace(cps[i])) ++i;
  while (i < n) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i)));
      return out;
    }
    size_t j = i;
    while (j < n && !PyIsSpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
    while (i < n && PyIsSpace(cps[i])) ++i;
  }
  return out;
}

std::vector<std::string> RSplitWhitespace(const std::u32string& cps,
                                          int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t i = static_cast<int64_t>(cps.size()) - 1;
  while (i >= 0 && PyIsSpace(cps[i])) --i;
  while (i >= 0) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(EncodeUtf8(std::u32string_view(cps).substr(0, i + 1)));
      break;
    }
    int64_t j = i;
    while (j >= 0 && !PyIsSpace(cps[j])) --j;
    out.push_back(EncodeUtf8(std::u32string_view(cps).substr(j + 1, i - j)));
    i = j;
    while (i >= 0 && PyIsSpace(cps[i])) --i;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

SliceIndices NormalizeSlice(int64_t length, std::optional<int64_t> start,
                            std::optional<int64_t> stop,
                            std::optional<int64_t> step) {
  SliceIndices r;
  r.step = step.value_or(1);
  const bool back = r.step < 0;
  const auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v.has_value()) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = back ? -1 : 0;
    } else if (x >= length) {
      x = back ? length - 1 : length;
    }
    return x;
  };
  r.start = adjust(start, back ? length - 1 : 0);
  r.stop = adjust(stop, back ? -1 : length);
  if (back) {
    r.count = r.stop < r.start ? (r.start - r.stop - 1) / (-r.step) + 1 : 0;
  } else {
    r.count = r.start < r.stop ? (r.stop - r.start - 1) / r.step + 1 : 0;
  }
  return r;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right) {
  const std::u32string cps = DecodeUtf8(s);
  const std::u32string set =
      chars.has_value() ? DecodeUtf8(*chars) : std::u32string();
  const auto strip = [&](char32_t c) {
    return chars.has_value() ? set.find(c) != std::u32string::npos
                             : PyIsSpace(c);
  };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  if (!sep.has_value()) return SplitWhitespace(DecodeUtf8(s), maxsplit);
  std::vector<std::string> out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t hit = s.find(*sep, pos);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  if (!sep.has_value()) return RSplitWhitespace(DecodeUtf8(s), maxsplit);
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  const std::u32string cps = DecodeUtf8(s);
  std::vector<std::string> out;
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    if (!IsLineBreak(cps[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (cps[i] == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    const size_t end = keepends ? eol : i;
    out.push_back(
        EncodeUtf8(std::u32string_view(cps).substr(start, end - start)));
    start = i = eol;
  }
  if (start < cps.size()) {
    out.push_back(EncodeUtf8(std::u32string_view(cps).substr(start)));
  }
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_text,
                      std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    const std::u32string cps = DecodeUtf8(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub,
               std::optional<int64_t> start, std::optional<int64_t> end,
               bool reverse) {
  const std::u32string cps = DecodeUtf8(s);
  const std::u32string needle = DecodeUtf8(sub);
  int64_t lo, hi;
  AdjustIndices(static_cast<int64_t>(cps.size()), start, end, &lo, &hi);
  const int64_t m = static_cast<int64_t>(needle.size());
  if (hi - lo < m) return -1;
  const std::u32string_view hay = std::u32string_view(cps).substr(lo, hi - lo);
  const size_t hit = reverse ? hay.rfind(needle) : hay.find(needle);
  return hit == std::u32string_view::npos ? -1 : lo + static_cast<int64_t>(hit);
}

int64_t PyCount(std::string_view s, std::string_view sub,
                std::optional<int64_t> start, std::optional<int64_t> end) {
  const std::u32string cps = DecodeUtf8(s);
  const std::u32string needle = DecodeUtf8(sub);
  int64_t lo, hi;
  AdjustIndices(static_cast<int64_t>(cps.size()), start, end, &lo, &hi);
  if (lo > static_cast<int64_t>(cps.size()) || hi < lo) return 0;
  if (needle.empty()) return hi - lo + 1;
  int64_t n = 0;
  const std::u32string_view hay = std::u32string_view(cps).substr(lo, hi - lo);
  for (size_t p = hay.find(needle); p != std::u32string_view::npos;
       p = hay.find(needle, p + needle.size())) {
    ++n;
  }
  return n;
}

std::string PySubstring(std::string_view s, std::optional<int64_t> start,
                        std::optional<int64_t> end) {
  const std::u32string cps = DecodeUtf8(s);
  const SliceIndices r =
      NormalizeSlice(static_cast<int64_t>(cps.size()), start, end, 1);
  return EncodeUtf8(std::u32string_view(cps).substr(r.start, r.count));
}

std::string PyPad(std::string_view s, int64_t width, std::string_view fill,
                  char align) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  const int64_t total = width - len;
  int64_t left = 0;
  if (align == '>') {
    left = total;
  } else if (align == '^') {
    // CPython's pad for center: extra space goes right, unless both odd.
    left = total / 2 + (total & width & 1);
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out.append(fill);
  out.append(s);
  for (int64_t i = left; i < total; ++i) out.append(fill);
  return out;
}

std::string PyZfill(std::string_view s, int64_t width) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  std::string out(s);
  const size_t at = !out.empty() && (out[0] == '+' || out[0] == '-') ? 1 : 0;
  out.insert(at, static_cast<size_t>(width - len), '0');
  return out;
}

}  // namespace radixkv::model::chat
