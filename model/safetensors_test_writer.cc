#include "model/safetensors_test_writer.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace radixkv::model::testing {

absl::Status WriteSafetensors(
    const std::string& path, const std::vector<RawTensor>& tensors,
    const std::function<void(nlohmann::json&)>& edit_header) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype},
        {"shape", t.shape},
        {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  if (edit_header) edit_header(header);
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) {
    out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  }
  out << h << data;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace radixkv::model::testing
