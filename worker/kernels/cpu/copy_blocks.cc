#include "worker/kernels/cpu/copy_blocks.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/kv_cache_layout.h"

namespace radixkv::worker {
namespace {

// Copies the leading n tokens of page src to page dst of one K tensor (or a
// V tensor of a non-vLLM layout), in runs of contiguous bytes: a run is what
// one (head[, dim chunk]) contributes to a page's leading tokens.
void CopyLeadingTokensK(const KvCacheGeometry& g, char* base, int64_t src,
                        int64_t dst, int32_t n) {
  const int64_t eb = g.elem_bytes;
  const int64_t B = g.page_size, H = g.num_kv_heads, D = g.head_dim;
  const int64_t s0 = src * B, d0 = dst * B;
  switch (g.layout) {
    case KvLayout::kBSHD:  // [page][tok][h][d]: one run of n*H*D elements
      std::memmove(base + g.KOffset(d0, 0, 0) * eb,
                   base + g.KOffset(s0, 0, 0) * eb, n * H * D * eb);
      return;
    case KvLayout::kBHSD:  // [page][h][tok][d]: per head n*D elements
      for (int32_t h = 0; h < H; ++h) {
        std::memmove(base + g.KOffset(d0, h, 0) * eb,
                     base + g.KOffset(s0, h, 0) * eb, n * D * eb);
      }
      return;
    case KvLayout::kVllm: {  // [page][h][D/x][tok][x]: per chunk n*x
      const int32_t x = g.vllm_x();
      for (int32_t h = 0; h < H; ++h) {
        for (int32_t c = 0; c < D; c += x) {
          std::memmove(base + g.KOffset(d0, h, c) * eb,
                       base + g.KOffset(s0, h, c) * eb, n * x * eb);
        }
      }
      return;
    }
  }
}

void CopyLeadingTokensV(const KvCacheGeometry& g, char* base, int64_t src,
                        int64_t dst, int32_t n) {
  if (g.layout != KvLayout::kVllm) {
    CopyLeadingTokensK(g, base, src, dst, n);  // V has K's layout
    return;
  }
  // [page][h][d][tok]: per (head, dim) n elements.
  const int64_t eb = g.elem_bytes;
  const int64_t s0 = src * g.page_size, d0 = dst * g.page_size;
  for (int32_t h = 0; h < g.num_kv_heads; ++h) {
    for (int32_t d = 0; d < g.head_dim; ++d) {
      std::memmove(base + g.VOffset(d0, h, d) * eb,
                   base + g.VOffset(s0, h, d) * eb, n * eb);
    }
  }
}

}  // namespace

absl::Status CopyBlocks(KvPool& pool, absl::Span<const PageCopy> ops) {
  const KvCacheGeometry& g = pool.geometry();
  for (size_t i = 0; i < ops.size(); ++i) {
    const PageCopy& op = ops[i];
    if (op.src_page < 0 || op.src_page >= g.num_pages || op.dst_page < 0 ||
        op.dst_page >= g.num_pages) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy op ", i, ": page ", op.src_page, " -> ",
                       op.dst_page, " outside [0, ", g.num_pages, ")"));
    }
    if (op.num_tokens < 0 || op.num_tokens > g.page_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy op ", i, ": num_tokens ", op.num_tokens,
                       " outside [0, page_size=", g.page_size, "]"));
    }
  }
  for (const PageCopy& op : ops) {
    if (op.src_page == op.dst_page || op.num_tokens == 0) continue;
    for (int layer = 0; layer < pool.num_layers(); ++layer) {
      CopyLeadingTokensK(g, static_cast<char*>(pool.k_data(layer)), op.src_page,
                         op.dst_page, op.num_tokens);
      CopyLeadingTokensV(g, static_cast<char*>(pool.v_data(layer)), op.src_page,
                         op.dst_page, op.num_tokens);
    }
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker
