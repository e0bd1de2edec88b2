#include "model/safetensors_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace radixkv::model {
namespace {

using Json = nlohmann::json;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

size_t ElementBytes(absl::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") {
    return 2;
  }
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

SafetensorsDType ParseDType(absl::string_view dtype) {
  if (dtype == "F32") return SafetensorsDType::kF32;
  if (dtype == "BF16") return SafetensorsDType::kBF16;
  if (dtype == "F16") return SafetensorsDType::kF16;
  return SafetensorsDType::kOther;
}

// IEEE binary16 -> binary32, exact (normals, subnormals, inf, NaN).
float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3FFu;
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Bf16BitsToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsReader::~SafetensorsReader() {
  for (const MappedFile& f : files_) {
    if (f.base != nullptr && f.size > 0) {
      ::munmap(const_cast<uint8_t*>(f.base), f.size);
    }
  }
}

absl::Status SafetensorsReader::MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("fstat ", path));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated safetensors file (", size, " bytes)"));
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
  }
  files_.push_back(MappedFile{path, static_cast<const uint8_t*>(base), size});
  const MappedFile& f = files_.back();

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.base[i];
  if (header_len > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_len, " exceeds file size ", size));
  }
  const char* hbegin = reinterpret_cast<const char*>(f.base + 8);
  Json header = Json::parse(hbegin, hbegin + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed safetensors JSON header"));
  }
  const uint8_t* data_start = f.base + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const Json& e = it.value();
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", it.key(), "': ", why));
    };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
        !e.contains("shape") || !e["shape"].is_array() ||
        !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return bad("malformed entry");
    }
    SafetensorsTensor t;
    t.name = it.key();
    t.dtype_name = e["dtype"].get<std::string>();
    t.dtype = ParseDType(t.dtype_name);
    for (const Json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return bad("bad shape");
      }
      t.shape.push_back(d.get<int64_t>());
    }
    const Json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad("bad data_offsets");
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end,
                              ") outside the data section of ", data_size,
                              " bytes"));
    }
    const size_t elem = ElementBytes(t.dtype_name);
    if (elem == 0) return bad(absl::StrCat("unknown dtype ", t.dtype_name));
    if (static_cast<uint64_t>(t.num_elements()) * elem != end - begin) {
      return bad(absl::StrCat("byte size ", end - begin,
                              " != ", t.num_elements(), " elements x ", elem,
                              " bytes (shape ", ShapeString(t.shape), ")"));
    }
    t.data = data_start + begin;
    t.num_bytes = end - begin;
    if (tensors_.contains(t.name)) {
      return bad("stored in more than one shard");
    }
    tensors_.emplace(t.name, std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader());
  reader->source_ = path;
  if (!IsDirectory(path)) {
    if (absl::Status s = reader->MapFile(path); !s.ok()) return s;
    return reader;
  }
  const std::string index_path = path + "/model.safetensors.index.json";
  if (FileExists(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Json index = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() ||
        !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": malformed index (no weight_map)"));
    }
    std::vector<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end();
         ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": weight_map value for '", it.key(),
                         "' is not a file name"));
      }
      shards.push_back(it.value().get<std::string>());
    }
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    for (const std::string& shard : shards) {
      if (absl::Status s = reader->MapFile(path + "/" + shard); !s.ok()) {
        return s;
      }
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end();
         ++it) {
      if (!reader->tensors_.contains(it.key())) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": tensor '", it.key(), "' is not in its shard ",
            it.value().get<std::string>()));
      }
    }
    return reader;
  }
  const std::string single = path + "/model.safetensors";
  if (!FileExists(single)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": neither model.safetensors.index.json nor ",
                     "model.safetensors found"));
  }
  if (absl::Status s = reader->MapFile(single); !s.ok()) return s;
  return reader;
}

bool SafetensorsReader::Contains(absl::string_view name) const {
  return tensors_.contains(name);
}

std::vector<std::string> SafetensorsReader::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsReader::Find(
    absl::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", name, "' not found in ", source_));
  }
  return &it->second;
}

absl::StatusOr<std::vector<float>> SafetensorsReader::ReadFloat32(
    absl::string_view name, absl::Span<const int64_t> expected_shape) const {
  absl::StatusOr<const SafetensorsTensor*> found = Find(name);
  if (!found.ok()) return found.status();
  const SafetensorsTensor& t = **found;
  if (!expected_shape.empty() &&
      !std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(),
                  expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' in ", source_, " has shape ", ShapeString(t.shape),
        ", expected ", ShapeString(expected_shape)));
  }
  const int64_t n = t.num_elements();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case SafetensorsDType::kF32:
      std::memcpy(out.data(), t.data, t.num_bytes);
      break;
    case SafetensorsDType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        out[i] = Bf16BitsToFloat(b);
      }
      break;
    case SafetensorsDType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = HalfBitsToFloat(h);
      }
      break;
    case SafetensorsDType::kOther:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has dtype ", t.dtype_name,
                       "; only F32, BF16 and F16 can be read as float"));
  }
  return out;
}

}  // namespace radixkv::model
