// CopyBlocks: execute the cache service's page copy ops on the paged KV pool
// (copy-on-write of a shared page, docs/background.md §1.4; vLLM's
// copy_blocks kernel), extended to partial pages: a prefix match that ends
// inside a page reuses that page's leading tokens by copying them into a
// fresh page (token-granular reuse, docs/background.md §2.5).
#ifndef RADIXKV_WORKER_KERNELS_CPU_COPY_BLOCKS_H_
#define RADIXKV_WORKER_KERNELS_CPU_COPY_BLOCKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {

// Copy the leading num_tokens token positions (offsets [0, num_tokens)) of
// page src_page to the same offsets of page dst_page, for every layer, K and
// V, every kv head and dim. Pages are physical page numbers (slot / page_size).
struct PageCopy {
  int64_t src_page = 0;
  int64_t dst_page = 0;
  int32_t num_tokens = 0;  // tokens, in [0, page_size]
};

// Executes `ops` in order (a later op may read what an earlier one wrote).
// Errors: INVALID_ARGUMENT if any op has a page outside [0, num_pages) or
// num_tokens outside [0, page_size]; all ops are validated first, so on error
// nothing is copied. src_page == dst_page is a no-op.
absl::Status CopyBlocks(KvPool& pool, absl::Span<const PageCopy> ops);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_CPU_COPY_BLOCKS_H_
