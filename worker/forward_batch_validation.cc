#include "worker/forward_batch_validation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace radixkv::worker {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", what));
}

}  // namespace

absl::Status ValidateForwardBatch(const ForwardBatch& b, int32_t vocab_size,
                                  int64_t capacity_slots, int32_t page_size) {
  const int64_t num_tokens = static_cast<int64_t>(b.input_ids.size());
  if (num_tokens == 0) return Invalid("no tokens");
  if (b.qo_indptr.size() < 2) return Invalid("qo_indptr needs B+1 >= 2");
  const size_t batch = b.qo_indptr.size() - 1;
  if (b.kv_indptr.size() != b.qo_indptr.size()) {
    return Invalid(absl::StrCat("kv_indptr has ", b.kv_indptr.size(),
                                " entries, qo_indptr ", b.qo_indptr.size()));
  }
  if (b.positions.size() != b.input_ids.size() ||
      b.out_cache_loc.size() != b.input_ids.size()) {
    return Invalid(absl::StrCat("input_ids (", num_tokens, "), positions (",
                                b.positions.size(), ") and out_cache_loc (",
                                b.out_cache_loc.size(),
                                ") must have the same length"));
  }
  if (b.qo_indptr[0] != 0 || b.kv_indptr[0] != 0) {
    return Invalid("qo_indptr and kv_indptr must start at 0");
  }
  if (static_cast<size_t>(b.kv_indptr[batch]) != b.kv_indices.size()) {
    return Invalid(absl::StrCat("kv_indptr[B] = ", b.kv_indptr[batch],
                                " != kv_indices.size() ", b.kv_indices.size()));
  }
  if (b.qo_indptr[batch] != num_tokens) {
    return Invalid(absl::StrCat("qo_indptr[B] = ", b.qo_indptr[batch],
                                " != num_tokens ", num_tokens));
  }
  // Before any kv_indices access: with kv_indptr non-decreasing from 0 to
  // kv_indices.size(), every kv_indptr entry indexes inside kv_indices.
  for (size_t i = 0; i < batch; ++i) {
    if (b.kv_indptr[i + 1] < b.kv_indptr[i]) {
      return Invalid("kv_indptr is decreasing");
    }
  }
  for (size_t i = 0; i < batch; ++i) {
    if (b.qo_indptr[i + 1] <= b.qo_indptr[i]) {
      return Invalid(absl::StrCat("sequence ", i, " has no new tokens"));
    }
    if (b.is_decode) {
      if (b.qo_indptr[i + 1] - b.qo_indptr[i] != 1) {
        return Invalid(absl::StrCat("decode sequence ", i,
                                    " has more than one new token"));
      }
      if (b.kv_indptr[i + 1] == b.kv_indptr[i] ||
          b.kv_indices[b.kv_indptr[i + 1] - 1] != b.out_cache_loc[i]) {
        return Invalid(absl::StrCat(
            "decode sequence ", i,
            ": the last kv_indices entry must be the new token's slot"));
      }
    }
  }
  for (int64_t s : b.kv_indices) {
    if (s < 0 || s >= capacity_slots) {
      return Invalid(absl::StrCat("kv_indices slot ", s, " outside [0, ",
                                  capacity_slots, ")"));
    }
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (b.out_cache_loc[t] < 0 || b.out_cache_loc[t] >= capacity_slots) {
      return Invalid(absl::StrCat("out_cache_loc slot ", b.out_cache_loc[t],
                                  " outside [0, ", capacity_slots, ")"));
    }
    if (b.input_ids[t] < 0 || b.input_ids[t] >= vocab_size) {
      return Invalid(absl::StrCat("token id ", b.input_ids[t], " outside [0, ",
                                  vocab_size, ")"));
    }
    if (b.positions[t] < 0) {
      return Invalid(absl::StrCat("negative position ", b.positions[t]));
    }
  }
  const int64_t num_pages = capacity_slots / page_size;
  for (const PageCopy& op : b.copy_ops) {
    if (op.src_page < 0 || op.src_page >= num_pages || op.dst_page < 0 ||
        op.dst_page >= num_pages || op.num_tokens < 0 ||
        op.num_tokens > page_size) {
      return Invalid(absl::StrCat("copy op ", op.src_page, " -> ", op.dst_page,
                                  " (", op.num_tokens,
                                  " tokens) out of range"));
    }
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker
