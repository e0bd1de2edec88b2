// Byte codec of CacheState snapshots: LEB128 varints, zigzag-signed
// integers, length-prefixed strings and delta-encoded int32 runs (slot runs
// and free lists step by +-1, so one byte per element). The same encoding
// as protobuf's varint/zigzag wire types, without field tags: the record
// layout is fixed by cache_state_snapshot.cc.
#ifndef RADIXKV_CACHE_SERVICE_SNAPSHOT_CODEC_H_
#define RADIXKV_CACHE_SERVICE_SNAPSHOT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace radixkv::cache_service {

// Appends values to a growing byte string.
class SnapshotWriter {
 public:
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  // Unsigned varint, 1..10 bytes.
  void U64(uint64_t v);
  // Zigzag-encoded signed varint (small magnitudes are short).
  void I64(int64_t v) {
    U64((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  // Length (U64) then the bytes.
  void Str(std::string_view s);
  // Count (U64) then each element as the I64 delta to its predecessor
  // (the first to 0).
  void I32s(const std::vector<int32_t>& v);
  // The bytes written; the writer is empty afterwards.
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what SnapshotWriter wrote. The first malformed or truncated value
// makes ok() false for good: that read and every later one return 0 / empty,
// so a caller may read a whole record and check ok() once. Never allocates
// more than the input's size (a count is checked against the bytes left).
class SnapshotReader {
 public:
  explicit SnapshotReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  // True when every byte has been read.
  bool done() const { return pos_ == in_.size(); }
  uint64_t U64();
  int64_t I64() {
    const uint64_t v = U64();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  // An I64 that must fit int32 (fails otherwise).
  int32_t I32();
  std::string Str();
  // Fails on a delta beyond +-2^33 or an element outside int32.
  std::vector<int32_t> I32s();

 private:
  uint64_t Fail() {
    ok_ = false;
    pos_ = in_.size();
    return 0;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_SNAPSHOT_CODEC_H_
