#include "cache_service/page_allocator.h"

#include <limits>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::cache_service {
namespace {

absl::Status CheckShape(int64_t capacity_slots, int32_t page_size) {
  if (!IsValidPageSize(page_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size ", page_size, " is not one of 1, 8, 16, 32, 64, 128"));
  }
  if (capacity_slots < page_size || capacity_slots % page_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_slots ", capacity_slots,
                     " must be a positive multiple of page_size ", page_size));
  }
  if (capacity_slots / page_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_slots ", capacity_slots, " is too large"));
  }
  return absl::OkStatus();
}

// What a failed allocation of a pool's bookkeeping (3 int32 per page)
// becomes: the caller's state is unchanged, the process goes on.
absl::Status OutOfMemory(int32_t num_pages) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of memory for the page allocator of ", num_pages, " pages (",
      int64_t{num_pages} * 3 * sizeof(int32_t), " bytes of metadata)"));
}

}  // namespace

bool IsValidPageSize(int64_t page_size) {
  return page_size == 1 || page_size == 8 || page_size == 16 ||
         page_size == 32 || page_size == 64 || page_size == 128;
}

PageAllocator::PageAllocator(int32_t num_pages, int32_t page_size)
    : page_size_(page_size),
      ref_count_(num_pages, 0),
      protect_count_(num_pages, 0) {}

absl::StatusOr<PageAllocator> PageAllocator::Create(int64_t capacity_slots,
                                                    int32_t page_size) {
  if (absl::Status s = CheckShape(capacity_slots, page_size); !s.ok()) return s;
  const int32_t num_pages = static_cast<int32_t>(capacity_slots / page_size);
  try {
    PageAllocator allocator(num_pages, page_size);
    allocator.free_list_.resize(num_pages);
    for (int32_t i = 0; i < num_pages; ++i) {
      allocator.free_list_[i] = num_pages - 1 - i;
    }
    return allocator;
  } catch (const std::bad_alloc&) {
    return OutOfMemory(num_pages);
  }
}

absl::StatusOr<PageAllocator> PageAllocator::CreateWithFreeList(
    int64_t capacity_slots, int32_t page_size, std::vector<int32_t> free_list) {
  if (absl::Status s = CheckShape(capacity_slots, page_size); !s.ok()) return s;
  const int32_t num_pages = static_cast<int32_t>(capacity_slots / page_size);
  try {
    PageAllocator allocator(num_pages, page_size);
    std::vector<bool> seen(num_pages, false);
    for (int32_t page : free_list) {
      if (page < 0 || page >= num_pages || seen[page]) {
        return absl::InvalidArgumentError(
            absl::StrCat("free list page ", page, " out of range or repeated"));
      }
      seen[page] = true;
    }
    allocator.free_list_ = std::move(free_list);
    return allocator;
  } catch (const std::bad_alloc&) {
    return OutOfMemory(num_pages);
  }
}

std::vector<int32_t> PageAllocator::Allocate(int32_t n) {
  std::vector<int32_t> pages;
  pages.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t page = free_list_.back();
    free_list_.pop_back();
    ref_count_[page] = 1;
    protect_count_[page] = 1;
    ++num_protected_pages_;
    pages.push_back(page);
  }
  return pages;
}

void PageAllocator::Ref(int32_t page, bool protect) {
  ++ref_count_[page];
  if (protect) Protect(page);
}

bool PageAllocator::Unref(int32_t page, bool protect) {
  if (protect) Unprotect(page);
  if (--ref_count_[page] == 0) {
    free_list_.push_back(page);
    return true;
  }
  return false;
}

void PageAllocator::Protect(int32_t page) {
  if (protect_count_[page]++ == 0) ++num_protected_pages_;
}

void PageAllocator::Unprotect(int32_t page) {
  if (--protect_count_[page] == 0) --num_protected_pages_;
}

std::optional<CopyOp> PageAllocator::CopyOnWrite(int32_t page,
                                                 int32_t num_tokens,
                                                 int32_t* new_page) {
  if (ref_count_[page] == 1) {
    *new_page = page;
    return std::nullopt;
  }
  *new_page = Allocate(1)[0];
  Unref(page, /*protect=*/true);
  return CopyOp{page, *new_page, num_tokens};
}

}  // namespace radixkv::cache_service
