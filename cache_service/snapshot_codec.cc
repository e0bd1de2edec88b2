#include "cache_service/snapshot_codec.h"

#include <climits>

namespace radixkv::cache_service {

void SnapshotWriter::U64(uint64_t v) {
  char buf[10];
  int n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out_.append(buf, n);
}

void SnapshotWriter::Str(std::string_view s) {
  U64(s.size());
  out_.append(s.data(), s.size());
}

void SnapshotWriter::I32s(const std::vector<int32_t>& v) {
  U64(v.size());
  int64_t previous = 0;
  for (int32_t x : v) {
    I64(static_cast<int64_t>(x) - previous);
    previous = x;
  }
}

uint64_t SnapshotReader::U64() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= in_.size()) return Fail();
    const uint8_t byte = static_cast<uint8_t>(in_[pos_++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  return Fail();
}

int32_t SnapshotReader::I32() {
  const int64_t v = I64();
  if (v < INT32_MIN || v > INT32_MAX) return static_cast<int32_t>(Fail());
  return static_cast<int32_t>(v);
}

std::string SnapshotReader::Str() {
  const uint64_t n = U64();
  if (!ok_ || n > in_.size() - pos_) return Fail(), std::string();
  std::string s(in_.substr(pos_, n));
  pos_ += n;
  return s;
}

std::vector<int32_t> SnapshotReader::I32s() {
  const uint64_t n = U64();
  std::vector<int32_t> v;
  if (!ok_ || n > in_.size() - pos_) return Fail(), v;  // >= 1 byte each
  v.reserve(n);
  int64_t previous = 0;
  for (uint64_t i = 0; i < n && ok_; ++i) {
    const int64_t delta = I64();
    if (delta < -(int64_t{1} << 33) || delta > (int64_t{1} << 33)) {
      return Fail(), v;
    }
    const int64_t x = previous + delta;
    if (x < INT32_MIN || x > INT32_MAX) return Fail(), v;
    v.push_back(static_cast<int32_t>(x));
    previous = x;
  }
  return v;
}

}  // namespace radixkv::cache_service
