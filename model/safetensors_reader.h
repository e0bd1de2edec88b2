// SafetensorsReader: read-only access to Hugging Face safetensors checkpoints
// through mmap.
//
// File format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian unsigned header length N, N bytes of JSON mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative
// to the first byte after the header; an optional "__metadata__" entry), then
// the raw little-endian tensor data. A sharded checkpoint has
// model.safetensors.index.json whose "weight_map" maps tensor name -> shard
// file name.
#ifndef RADIXKV_MODEL_SAFETENSORS_READER_H_
#define RADIXKV_MODEL_SAFETENSORS_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace radixkv::model {

// Element types this reader converts to fp32. Other safetensors dtypes are
// listed (kOther) but cannot be read as float.
enum class SafetensorsDType { kF32, kBF16, kF16, kOther };

// Metadata of one stored tensor; `data` points into the mapping and stays
// valid for the reader's lifetime.
struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;  // as written in the header, e.g. "BF16"
  SafetensorsDType dtype = SafetensorsDType::kOther;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;

  int64_t num_elements() const;
};

class SafetensorsReader {
 public:
  // Opens a checkpoint. `path` may be a .safetensors file or a directory
  // holding either model.safetensors.index.json (sharded; every shard it names
  // is mapped) or model.safetensors. Errors: NOT_FOUND (no checkpoint file),
  // INVALID_ARGUMENT (truncated file, malformed header, offsets outside the
  // file, byte size that does not match dtype x shape, a tensor in two
  // shards), INTERNAL (mmap failure).
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(
      const std::string& path);

  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // True if the checkpoint stores `name`.
  bool Contains(absl::string_view name) const;

  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;

  // Metadata of `name`; NOT_FOUND if absent.
  absl::StatusOr<const SafetensorsTensor*> Find(absl::string_view name) const;

  // Reads `name` converted to fp32 (F32 copied, BF16/F16 widened exactly),
  // row-major in the stored shape. If `expected_shape` is non-empty the stored
  // shape must equal it. Errors: NOT_FOUND (missing tensor, message names it
  // and the checkpoint), INVALID_ARGUMENT (shape mismatch, message gives both
  // shapes; unsupported dtype).
  absl::StatusOr<std::vector<float>> ReadFloat32(
      absl::string_view name, absl::Span<const int64_t> expected_shape) const;

 private:
  struct MappedFile {
    std::string path;
    const uint8_t* base = nullptr;
    size_t size = 0;
  };
  SafetensorsReader() = default;
  absl::Status MapFile(const std::string& path);

  std::string source_;  // what Open() was given, for error messages
  std::vector<MappedFile> files_;
  absl::flat_hash_map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_SAFETENSORS_READER_H_
