// PageAllocator: one worker's paged KV pool bookkeeping (background.md §1.4,
// vLLM BlockAllocator): a free list of pages, a ref count per page (forked
// sequences, the radix tree and leases share pages), copy-on-write of a
// shared, partly filled page, and the protected/evictable split the cache
// service reports.
//
// Units: a page holds page_size token slots; slot = page * page_size +
// offset. Pages are int32 indices in [0, num_pages).
//
// Holders: every lease table referencing a page holds one *protecting*
// reference; every radix-tree residency record holds one reference per
// distinct page of its slots, protecting while its lock_ref > 0. A page is
//   free       ref_count == 0 (it is on the free list),
//   protected  protect_count > 0,
//   evictable  ref_count > 0 and protect_count == 0 (only unlocked tree
//              nodes hold it; evicting them frees it).
// Hence free + evictable + protected == num_pages (x page_size slots).
//
// The free list is a stack with a deterministic order (pages 0, 1, 2, ...
// come out first on a fresh allocator; freed pages are reused LIFO), so
// replaying the same calls yields the same pages.
#ifndef RADIXKV_CACHE_SERVICE_PAGE_ALLOCATOR_H_
#define RADIXKV_CACHE_SERVICE_PAGE_ALLOCATOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace radixkv::cache_service {

// Copy the first num_tokens token positions of page src_page into page
// dst_page (all layers, K and V), to be executed by the worker before the
// lease's table is read or written. With page_size 1 a page is a slot.
struct CopyOp {
  int64_t src_page = 0;
  int64_t dst_page = 0;
  int32_t num_tokens = 0;  // [1, page_size]
  friend bool operator==(const CopyOp&, const CopyOp&) = default;
};

// True for the supported page sizes 1, 8, 16, 32, 64, 128 (tokens).
bool IsValidPageSize(int64_t page_size);

class PageAllocator {
 public:
  // A pool of capacity_slots / page_size pages, all free.
  // INVALID_ARGUMENT: unsupported page_size, capacity_slots not a positive
  // multiple of page_size, or more than 2^31 - 1 pages.
  // RESOURCE_EXHAUSTED: the 12 bytes per page cannot be allocated (also for
  // CreateWithFreeList).
  static absl::StatusOr<PageAllocator> Create(int64_t capacity_slots,
                                              int32_t page_size);

  // A pool whose free list is exactly free_list (in stack order, last is
  // popped first); every other page has ref_count 0 until Ref() is called
  // (snapshot restore). INVALID_ARGUMENT: bad shape, page out of range or
  // listed twice.
  static absl::StatusOr<PageAllocator> CreateWithFreeList(
      int64_t capacity_slots, int32_t page_size,
      std::vector<int32_t> free_list);

  int32_t page_size() const { return page_size_; }
  int32_t num_pages() const { return static_cast<int32_t>(ref_count_.size()); }
  int64_t capacity_slots() const {
    return static_cast<int64_t>(num_pages()) * page_size_;
  }
  int32_t num_free_pages() const {
    return static_cast<int32_t>(free_list_.size());
  }
  int32_t num_protected_pages() const { return num_protected_pages_; }
  int32_t num_evictable_pages() const {
    return num_pages() - num_free_pages() - num_protected_pages_;
  }
  int64_t free_slots() const {
    return static_cast<int64_t>(num_free_pages()) * page_size_;
  }
  int64_t protected_slots() const {
    return static_cast<int64_t>(num_protected_pages_) * page_size_;
  }
  int64_t evictable_slots() const {
    return static_cast<int64_t>(num_evictable_pages()) * page_size_;
  }

  // Pops n pages off the free list for a lease: each gets ref_count 1 and
  // protect_count 1. Requires n <= num_free_pages() (the caller evicts first).
  std::vector<int32_t> Allocate(int32_t n);

  // Adds a holder reference to an in-use page (protecting when `protect`).
  void Ref(int32_t page, bool protect);
  // Drops a holder reference (protecting when `protect`); a page whose
  // ref_count reaches 0 is pushed on the free list and true is returned.
  bool Unref(int32_t page, bool protect);
  // Turns one of the page's references into a protecting one (lock_ref of a
  // tree node going 0 -> 1) and back.
  void Protect(int32_t page);
  void Unprotect(int32_t page);

  // Copy-on-write (vLLM's append_slots, background.md §1.4): the lease holding
  // `page` (with a protecting reference) wants to write past its first
  // num_tokens positions. If the lease is the only holder, nullopt (write in
  // place). Otherwise a fresh page replaces it for the lease (the old page
  // loses the lease's reference) and the CopyOp {page, fresh, num_tokens} is
  // returned. Requires a free page when ref_count(page) > 1.
  std::optional<CopyOp> CopyOnWrite(int32_t page, int32_t num_tokens,
                                    int32_t* new_page);

  int32_t ref_count(int32_t page) const { return ref_count_[page]; }
  int32_t protect_count(int32_t page) const { return protect_count_[page]; }
  // Stack order: back() is allocated next.
  const std::vector<int32_t>& free_list() const { return free_list_; }

 private:
  PageAllocator(int32_t num_pages, int32_t page_size);

  int32_t page_size_ = 1;
  std::vector<int32_t> ref_count_;
  std::vector<int32_t> protect_count_;
  std::vector<int32_t> free_list_;
  int32_t num_protected_pages_ = 0;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_PAGE_ALLOCATOR_H_
