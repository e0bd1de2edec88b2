#include "worker/gpu/gpu_weights.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/checkpoint_tensors.h"
#include "model/rope.h"
#include "model/safetensors_reader.h"
#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {
namespace {

// A checkpoint tensor by name and the shape the forward reads it as.
using TensorPart = std::pair<std::string, std::vector<int64_t>>;

uint16_t ToStorage16(float f, DType d) {
  return d == DType::kBF16 ? FloatToBf16(f).bits : FloatToFp16(f).bits;
}

bool SameType(model::SafetensorsDType stored, DType to) {
  return (stored == model::SafetensorsDType::kBF16 && to == DType::kBF16) ||
         (stored == model::SafetensorsDType::kF16 && to == DType::kF16) ||
         (stored == model::SafetensorsDType::kF32 && to == DType::kF32);
}

// Allocates one device tensor and fills it with `parts` concatenated along
// rows, each copied as stored when its type and shape match, else read as
// fp32 and converted on the host.
class WeightUploader {
 public:
  WeightUploader(const model::SafetensorsReader& reader, DeviceMemory* memory,
                 int64_t* bytes)
      : reader_(reader), memory_(memory), bytes_(bytes) {}

  template <typename T>
  absl::Status Load(const std::vector<TensorPart>& parts, DType to, T** dst) {
    int64_t elements = 0;
    for (const auto& [name, shape] : parts) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      elements += n;
    }
    void* p = nullptr;
    RADIXKV_RETURN_IF_ERROR(
        memory_->Alloc(elements * DTypeBytes(to), &p, bytes_));
    *dst = static_cast<T*>(p);
    return Upload(parts, to, static_cast<char*>(p));
  }

 private:
  absl::Status Upload(const std::vector<TensorPart>& parts, DType to,
                      char* dst) {
    size_t offset = 0;
    for (const auto& [name, shape] : parts) {
      absl::StatusOr<const model::SafetensorsTensor*> t = reader_.Find(name);
      if (!t.ok()) return t.status();
      if (SameType((*t)->dtype, to) && (*t)->shape == shape) {
        RADIXKV_RETURN_IF_ERROR(
            RuntimeError(hipMemcpy(dst + offset, (*t)->data, (*t)->num_bytes,
                                   hipMemcpyHostToDevice),
                         "weight upload"));
        offset += (*t)->num_bytes;
        continue;
      }
      absl::StatusOr<std::vector<float>> f = reader_.ReadFloat32(name, shape);
      if (!f.ok()) return f.status();
      staging_.resize(f->size() * DTypeBytes(to));
      if (to == DType::kF32) {
        std::memcpy(staging_.data(), f->data(), staging_.size());
      } else {
        uint16_t* s16 = reinterpret_cast<uint16_t*>(staging_.data());
        for (size_t i = 0; i < f->size(); ++i)
          s16[i] = ToStorage16((*f)[i], to);
      }
      RADIXKV_RETURN_IF_ERROR(
          RuntimeError(hipMemcpy(dst + offset, staging_.data(), staging_.size(),
                                 hipMemcpyHostToDevice),
                       "weight upload"));
      offset += staging_.size();
    }
    return absl::OkStatus();
  }

  const model::SafetensorsReader& reader_;
  DeviceMemory* memory_;
  int64_t* bytes_;
  std::vector<char> staging_;
};

absl::Status LoadLayer(const model::ModelConfig& c, int layer, DType dtype,
                       WeightUploader& up, GpuLayerWeights* w) {
  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size;
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  RADIXKV_RETURN_IF_ERROR(up.Load({{p + "input_layernorm.weight", {H}}},
                                  DType::kF32, &w->input_norm));
  RADIXKV_RETURN_IF_ERROR(
      up.Load({{p + "post_attention_layernorm.weight", {H}}}, DType::kF32,
              &w->post_norm));
  RADIXKV_RETURN_IF_ERROR(
      up.Load({{p + "self_attn.q_proj.weight", {Hq * D, H}},
               {p + "self_attn.k_proj.weight", {Hkv * D, H}},
               {p + "self_attn.v_proj.weight", {Hkv * D, H}}},
              dtype, &w->qkv));
  if (c.qkv_bias) {
    RADIXKV_RETURN_IF_ERROR(up.Load({{p + "self_attn.q_proj.bias", {Hq * D}},
                                     {p + "self_attn.k_proj.bias", {Hkv * D}},
                                     {p + "self_attn.v_proj.bias", {Hkv * D}}},
                                    DType::kF32, &w->qkv_bias));
  }
  RADIXKV_RETURN_IF_ERROR(
      up.Load({{p + "self_attn.o_proj.weight", {H, Hq * D}}}, dtype, &w->o));
  if (c.o_bias) {
    RADIXKV_RETURN_IF_ERROR(
        up.Load({{p + "self_attn.o_proj.bias", {H}}}, DType::kF32, &w->o_bias));
  }
  if (c.qk_norm) {
    RADIXKV_RETURN_IF_ERROR(up.Load({{p + "self_attn.q_norm.weight", {D}}},
                                    DType::kF32, &w->q_norm));
    RADIXKV_RETURN_IF_ERROR(up.Load({{p + "self_attn.k_norm.weight", {D}}},
                                    DType::kF32, &w->k_norm));
  }
  RADIXKV_RETURN_IF_ERROR(up.Load({{p + "mlp.gate_proj.weight", {I, H}},
                                   {p + "mlp.up_proj.weight", {I, H}}},
                                  dtype, &w->gate_up));
  return up.Load({{p + "mlp.down_proj.weight", {H, I}}}, dtype, &w->down);
}

}  // namespace

absl::StatusOr<GpuWeights> UploadWeights(const model::ModelConfig& c,
                                         const std::string& model_dir,
                                         DType dtype, DeviceMemory* memory,
                                         int64_t* bytes) {
  absl::StatusOr<std::unique_ptr<model::SafetensorsReader>> reader =
      model::SafetensorsReader::Open(model_dir);
  if (!reader.ok()) return reader.status();
  RADIXKV_RETURN_IF_ERROR(model::CheckCheckpointTensors(c, **reader));
  WeightUploader up(**reader, memory, bytes);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  GpuWeights w;
  RADIXKV_RETURN_IF_ERROR(
      up.Load({{"model.embed_tokens.weight", {V, H}}}, dtype, &w.embed));
  RADIXKV_RETURN_IF_ERROR(
      up.Load({{"model.norm.weight", {H}}}, DType::kF32, &w.final_norm));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    RADIXKV_RETURN_IF_ERROR(
        up.Load({{"lm_head.weight", {V, H}}}, dtype, &w.lm_head));
  }
  w.layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    RADIXKV_RETURN_IF_ERROR(LoadLayer(c, l, dtype, up, &w.layers[l]));
  }
  const std::vector<float> inv = model::RopeInvFreq(c);
  RADIXKV_RETURN_IF_ERROR(memory->AllocT(inv.size(), &w.inv_freq, bytes));
  RADIXKV_RETURN_IF_ERROR(
      RuntimeError(hipMemcpy(w.inv_freq, inv.data(), inv.size() * sizeof(float),
                             hipMemcpyHostToDevice),
                   "inv_freq upload"));
  return w;
}

}  // namespace radixkv::worker::gpu
