#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"

namespace radixkv::cache_service {

absl::Status CacheStateImpl::CheckForkLinks() const {
  absl::flat_hash_map<uint64_t, uint64_t> parent;
  for (const ForkLink& link : fork_links_.Links()) {
    const std::string name = absl::StrCat("fork link ", link.a, "-", link.b);
    const Lease* a = leases_.Find(link.a);
    const Lease* b = leases_.Find(link.b);
    if (a == nullptr || b == nullptr) {
      return absl::InternalError(name + ": names an ended lease");
    }
    if (a->worker_id != b->worker_id || link.shared < 1 ||
        link.shared > std::min(a->length, b->length)) {
      return absl::InternalError(
          name + ": joins two workers or is longer than a table");
    }
    const uint64_t ra = ForestRoot(parent, link.a);
    const uint64_t rb = ForestRoot(parent, link.b);
    if (ra == rb) return absl::InternalError(name + ": closes a cycle");
    parent[ra] = rb;
    // Both ends know the same tokens of the shared positions (a Commit told
    // every lease sharing them).
    const int64_t known_a = std::min(link.shared, a->known_length());
    const int64_t known_b = std::min(link.shared, b->known_length());
    if (known_a != known_b) {
      return absl::InternalError(
          absl::StrCat(name, ": the leases know ", known_a, " and ", known_b,
                       " of the ", link.shared, " shared tokens"));
    }
    for (int64_t p = 0; p < known_a; ++p) {
      if (a->known_token(p) != b->known_token(p)) {
        return absl::InternalError(absl::StrCat(
            name, ": the leases disagree on the token of position ", p));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckSlotsHeldOnce(const WorkerEntry& worker,
                                                const ModelEntry& model) const {
  // One bit per slot: the record holding a slot is the only one that may
  // (two records on one slot would give one KV two token prefixes).
  std::vector<bool> held(worker.allocator->capacity_slots(), false);
  int64_t twice = -1;
  uint64_t second_node = 0;
  for (const auto& [salt, tree] : model.trees) {
    tree->ForEachPreorder([&](const RadixNode& node) {
      const Residency* r = node.residency(worker.bit);
      if (r == nullptr || twice >= 0) return;
      for (int32_t slot : r->slots) {
        if (held[slot]) {
          twice = slot;
          second_node = node.id();
          return;
        }
        held[slot] = true;
      }
    });
  }
  if (twice < 0) return absl::OkStatus();
  uint64_t first_node = 0;
  for (const auto& [salt, tree] : model.trees) {
    tree->ForEachPreorder([&](const RadixNode& node) {
      const Residency* r = node.residency(worker.bit);
      if (r == nullptr || first_node != 0) return;
      if (std::find(r->slots.begin(), r->slots.end(), twice) !=
          r->slots.end()) {
        first_node = node.id();
      }
    });
  }
  return absl::InternalError(
      absl::StrCat("worker ", worker.info.worker_id, ": slot ", twice,
                   " is held by two tree records (nodes ", first_node, " and ",
                   second_node, ")"));
}

absl::Status CacheStateImpl::CheckLeases(
    LockRefCounts& lock_refs,
    absl::flat_hash_map<std::string, std::set<uint64_t>>& leases_of) const {
  for (const auto& [id, l] : leases_.leases()) {
    if (id == 0 || id >= leases_.next_id()) {
      return absl::InternalError(absl::StrCat("lease id ", id, " >= next id"));
    }
    const WorkerEntry* worker = FindWorker(l.worker_id);
    if (worker == nullptr) {
      return absl::InternalError(absl::StrCat("lease ", id, ": no worker"));
    }
    leases_of[l.worker_id].insert(id);
    if (static_cast<int64_t>(l.pages.size()) !=
            CeilDiv(l.length, worker->info.page_size) ||
        static_cast<int64_t>(l.prompt.size()) > l.length ||
        l.prefix_len > l.length) {
      return absl::InternalError(absl::StrCat("lease ", id, ": bad table"));
    }
    if (l.terminal != nullptr) {
      if (l.terminal->tree() != FindTree(l.model, l.cache_salt)) {
        return absl::InternalError(absl::StrCat("lease ", id, ": wrong tree"));
      }
      if (l.terminal->end() < l.prefix_len) {
        return absl::InternalError(
            absl::StrCat("lease ", id, ": locked path shorter than prefix"));
      }
      for (const RadixNode* n = l.terminal; n->parent() != nullptr;
           n = n->parent()) {
        if (!n->resident(worker->bit)) {
          return absl::InternalError(
              absl::StrCat("lease ", id, ": locked path not resident"));
        }
        ++lock_refs[{n->id(), worker->bit}];
        // The locked path spells the lease's resident prefix. Acquire,
        // Fork and Commit lock exactly [0, prefix_len) (the terminal edge
        // ends there); a lease restored from a snapshot may lock an edge
        // running past it, so only positions below prefix_len must agree.
        for (size_t k = 0; k < n->tokens().size(); ++k) {
          const int64_t p = n->start() + static_cast<int64_t>(k);
          if (p < l.prefix_len && p < static_cast<int64_t>(l.prompt.size()) &&
              l.prompt[p] != n->tokens()[k]) {
            return absl::InternalError(
                absl::StrCat("lease ", id, ": locked path != prompt"));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckModels(const LockRefCounts& lock_refs) const {
  for (const auto& [name, model] : models_) {
    for (int bit = 0; bit < kMaxWorkersPerModel; ++bit) {
      const bool used = (model.mask >> bit) & 1;
      if (used != ((*model.contexts)[bit].allocator != nullptr)) {
        return absl::InternalError("model mask != worker contexts");
      }
      if (used) {
        auto w = workers_.find(model.bit_owner[bit]);
        if (w == workers_.end() || w->second.bit != bit ||
            w->second.info.model != name) {
          return absl::InternalError("model bit owner mismatch");
        }
      }
    }
    for (const auto& [salt, tree] : model.trees) {
      if (tree->empty()) {
        return absl::InternalError("empty tree kept: " + name + "/" + salt);
      }
      if (absl::Status s = tree->CheckInvariants(model.mask, lock_refs);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckWorker(
    const std::string& id, const WorkerEntry& worker,
    const std::set<uint64_t>& lease_ids) const {
  auto m = models_.find(worker.info.model);
  if (m == models_.end() || !((m->second.mask >> worker.bit) & 1)) {
    return absl::InternalError("worker " + id + " not in its model");
  }
  if (worker.lease_ids != lease_ids) {
    return absl::InternalError("worker " + id + ": lease set mismatch");
  }
  int64_t lease_page_refs = 0;
  for (uint64_t lease_id : worker.lease_ids) {
    lease_page_refs +=
        static_cast<int64_t>(leases_.Find(lease_id)->pages.size());
  }
  if (lease_page_refs != worker.lease_page_refs) {
    return absl::InternalError("worker " + id + ": lease_page_refs mismatch");
  }
  const PageAllocator& a = *worker.allocator;
  std::vector<int32_t> refs(a.num_pages(), 0);
  std::vector<int32_t> protects(a.num_pages(), 0);
  int64_t resident_tokens = 0;
  size_t queued = 0;
  for (const auto& [salt, tree] : m->second.trees) {
    tree->ForEachPreorder([&](const RadixNode& node) {
      const Residency* r = node.residency(worker.bit);
      if (r == nullptr) return;
      resident_tokens += static_cast<int64_t>(r->slots.size());
      if (r->lock_ref == 0 && r->resident_children == 0) ++queued;
      int32_t last = -1;
      for (int32_t slot : r->slots) {
        const int32_t page = slot / a.page_size();
        if (page == last) continue;
        last = page;
        ++refs[page];
        if (r->lock_ref > 0) ++protects[page];
      }
    });
  }
  for (uint64_t lease_id : worker.lease_ids) {
    for (int32_t page : leases_.Find(lease_id)->pages) {
      ++refs[page];
      ++protects[page];
    }
  }
  if (absl::Status s = CheckSlotsHeldOnce(worker, m->second); !s.ok()) {
    return s;
  }
  if (queued != worker.queue->size()) {
    return absl::InternalError(
        absl::StrCat("worker ", id, ": eviction queue holds ",
                     worker.queue->size(), " entries, expected ", queued));
  }
  if (resident_tokens != (*m->second.contexts)[worker.bit].resident_tokens) {
    return absl::InternalError("worker " + id + ": resident_tokens mismatch");
  }
  std::vector<bool> is_free(a.num_pages(), false);
  for (int32_t page : a.free_list()) {
    if (is_free[page]) {
      return absl::InternalError(
          absl::StrCat("worker ", id, ": page ", page, " freed twice"));
    }
    is_free[page] = true;
  }
  int32_t num_protected = 0;
  for (int32_t p = 0; p < a.num_pages(); ++p) {
    if (refs[p] != a.ref_count(p) || protects[p] != a.protect_count(p)) {
      return absl::InternalError(absl::StrCat(
          "worker ", id, ": page ", p, " ref/protect ", a.ref_count(p), "/",
          a.protect_count(p), " but holders give ", refs[p], "/", protects[p]));
    }
    if (is_free[p] != (refs[p] == 0)) {
      return absl::InternalError(
          absl::StrCat("worker ", id, ": page ", p,
                       is_free[p] ? " on the free list but held" : " leaked"));
    }
    if (protects[p] > 0) ++num_protected;
  }
  if (num_protected != a.num_protected_pages() ||
      a.free_slots() + a.evictable_slots() + a.protected_slots() !=
          worker.info.capacity_slots ||
      a.num_evictable_pages() < 0) {
    return absl::InternalError("worker " + id +
                               ": free + evictable + protected != capacity");
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckInvariants() const {
  // Expected lock_ref per (node, bit), from the leases.
  LockRefCounts lock_refs;
  absl::flat_hash_map<std::string, std::set<uint64_t>> leases_of;
  if (absl::Status s = CheckLeases(lock_refs, leases_of); !s.ok()) return s;
  if (absl::Status s = CheckModels(lock_refs); !s.ok()) return s;
  for (const auto& [id, worker] : workers_) {
    if (absl::Status s = CheckWorker(id, worker, leases_of[id]); !s.ok()) {
      return s;
    }
  }
  return CheckForkLinks();
}

absl::StatusOr<std::vector<std::vector<int32_t>>>
CacheStateImpl::ResidentSequences(std::string_view model_name,
                                  std::string_view cache_salt,
                                  std::string_view worker_id) const {
  const WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return UnknownWorker(worker_id);
  }
  std::vector<std::vector<int32_t>> out;
  if (worker->info.model != model_name) return out;
  const RadixTree* tree =
      FindTree(std::string(model_name), std::string(cache_salt));
  if (tree == nullptr) return out;
  const int bit = worker->bit;
  // Iterative DFS (paths can be deep): (node, length of its path prefix).
  std::vector<std::pair<const RadixNode*, size_t>> stack = {{tree->root(), 0}};
  std::vector<int32_t> prefix;
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    prefix.resize(depth);
    prefix.insert(prefix.end(), node->tokens().begin(), node->tokens().end());
    const Residency* r = node->residency(bit);
    if (r != nullptr && r->resident_children == 0) out.push_back(prefix);
    for (const auto& [key, child] : node->children()) {
      if (child->resident(bit)) stack.push_back({child.get(), prefix.size()});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace radixkv::cache_service
