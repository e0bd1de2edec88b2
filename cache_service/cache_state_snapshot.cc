#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_state_impl.h"
#include "cache_service/dump_text.h"

namespace radixkv::cache_service {

namespace {

// v2 added each lease's shared_tokens and the fork links; v1 snapshots
// (no fork families known) are still read.
constexpr std::string_view kSnapshotMagicV1 = "radixkv.cache_state.v1";
constexpr std::string_view kSnapshotMagic = "radixkv.cache_state.v2";

absl::Status Corrupt(std::string_view what) {
  return absl::DataLossError(
      absl::StrCat("cache_state snapshot: ", std::string(what)));
}

}  // namespace

std::string CacheStateImpl::CanonicalDump() const {
  std::string out =
      absl::StrCat("radixkv.cache_state v1\nnext_lease_id=", leases_.next_id(),
                   " next_node_id=", next_node_id_,
                   " expired_leases_total=", expired_leases_total_, "\n");
  for (const auto& [id, w] : workers_) {
    const PageAllocator& a = *w.allocator;
    absl::StrAppend(
        &out, "worker ", Quote(id), " epoch=", w.info.epoch,
        " model=", Quote(w.info.model), " page_size=", w.info.page_size,
        " capacity_slots=", w.info.capacity_slots,
        " vocab_size=", w.info.vocab_size, " address=", Quote(w.info.address),
        " metrics_address=", Quote(w.info.metrics_address), " bit=", w.bit,
        " last_heartbeat_ms=", w.last_heartbeat_ms, "\n");
    absl::StrAppend(&out, "  load=", w.load.running_requests, ",",
                    w.load.waiting_requests, ",", w.load.outstanding_tokens,
                    ",", w.load.available_slots,
                    " prefix_query_tokens=", w.prefix_query_tokens,
                    " prefix_hit_tokens=", w.prefix_hit_tokens,
                    " evicted_tokens=", w.evicted_tokens,
                    " expired_leases=", w.expired_leases, "\n");
    absl::StrAppend(&out, "  pages free=", a.num_free_pages(),
                    " evictable=", a.num_evictable_pages(),
                    " protected=", a.num_protected_pages(), " free_list=[",
                    Runs(a.free_list()), "]\n  refs=[");
    bool first = true;
    for (int32_t p = 0; p < a.num_pages(); ++p) {
      if (a.ref_count(p) == 0) continue;
      absl::StrAppend(&out, first ? "" : ",", p, ":", a.ref_count(p), "/",
                      a.protect_count(p));
      first = false;
    }
    out += "]\n";
  }
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      absl::StrAppend(&out, "tree model=", Quote(name), " salt=", Quote(salt),
                      " nodes=", tree->num_nodes(), "\n");
      tree->ForEachPreorder([&](const RadixNode& node) {
        if (node.parent() == nullptr) return;
        absl::StrAppend(
            &out, "  node id=", node.id(), " parent=", node.parent()->id(),
            " start=", node.start(), " tokens=[", Runs(node.tokens()), "]\n");
        for (const Residency& r : node.residencies()) {
          absl::StrAppend(
              &out, "    res worker=", Quote(model.bit_owner[r.bit]),
              " lock_ref=", r.lock_ref,
              " resident_children=", r.resident_children,
              " last_access_ms=", r.stats.last_access_ms,
              " hits=", r.stats.hit_count, " priority=", r.stats.priority,
              " slots=[", Runs(r.slots), "]\n");
        }
      });
    }
  }
  for (const auto& [id, l] : leases_.leases()) {
    absl::StrAppend(&out, "lease id=", id, " worker=", Quote(l.worker_id),
                    " model=", Quote(l.model), " salt=", Quote(l.cache_salt),
                    " request=", Quote(l.request_id),
                    " terminal=", l.terminal == nullptr ? 0 : l.terminal->id(),
                    " priority=", l.priority, " prefix_len=", l.prefix_len,
                    " length=", l.length, " expires_at_ms=", l.expires_at_ms,
                    "\n  prompt=[", Runs(l.prompt), "] pages=[", Runs(l.pages),
                    "]\n");
    if (!l.shared_tokens.empty()) {
      absl::StrAppend(&out, "  shared_tokens=[", Runs(l.shared_tokens), "]\n");
    }
  }
  for (const ForkLink& link : fork_links_.Links()) {
    absl::StrAppend(&out, "fork_link ", link.a, " ", link.b,
                    " shared=", link.shared, "\n");
  }
  return out;
}

std::string CacheStateImpl::Serialize() const {
  SnapshotWriter w;
  // ~3 bytes per random token id + ~1 per (delta-encoded) slot.
  int64_t estimate = 4096;
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      estimate += 3 * tree->num_tokens() + 16 * tree->num_nodes();
    }
    for (const WorkerContext& ctx : *model.contexts) {
      estimate += ctx.resident_tokens;
    }
  }
  w.Reserve(static_cast<size_t>(estimate));
  w.Str(kSnapshotMagic);
  w.U64(leases_.next_id());
  w.U64(next_node_id_);
  w.I64(expired_leases_total_);
  w.U64(workers_.size());
  for (const auto& [id, e] : workers_) {
    w.Str(id);
    w.Str(e.info.address);
    w.Str(e.info.metrics_address);
    w.I64(e.info.capacity_slots);
    w.I64(e.info.page_size);
    w.Str(e.info.model);
    w.I64(e.info.epoch);
    w.I64(e.info.vocab_size);
    w.I64(e.load.running_requests);
    w.I64(e.load.waiting_requests);
    w.I64(e.load.outstanding_tokens);
    w.I64(e.load.available_slots);
    w.I64(e.last_heartbeat_ms);
    w.I64(e.bit);
    w.I64(e.prefix_query_tokens);
    w.I64(e.prefix_hit_tokens);
    w.I64(e.evicted_tokens);
    w.I64(e.expired_leases);
    w.I32s(e.allocator->free_list());
  }
  size_t num_trees = 0;
  for (const auto& [name, model] : models_) num_trees += model.trees.size();
  w.U64(num_trees);
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      w.Str(name);
      w.Str(salt);
      w.U64(tree->num_nodes());
      // Preorder; each node names its parent by preorder index (0 = root).
      absl::flat_hash_map<const RadixNode*, uint64_t> index;
      uint64_t next = 0;
      tree->ForEachPreorder([&](const RadixNode& node) {
        index[&node] = next++;
        if (node.parent() == nullptr) return;
        w.U64(index.at(node.parent()));
        w.U64(node.id());
        w.I32s(node.tokens());
        w.U64(node.residencies().size());
        for (const Residency& r : node.residencies()) {
          w.I64(r.bit);
          w.I64(r.stats.last_access_ms);
          w.I64(r.stats.hit_count);
          w.I64(r.stats.priority);
          w.I32s(r.slots);
        }
      });
    }
  }
  w.U64(leases_.size());
  for (const auto& [id, l] : leases_.leases()) {
    w.U64(id);
    w.Str(l.worker_id);
    w.Str(l.model);
    w.Str(l.cache_salt);
    w.Str(l.request_id);
    w.U64(l.terminal == nullptr ? 0 : l.terminal->id());
    w.I32s(l.prompt);
    w.I64(l.priority);
    w.I64(l.prefix_len);
    w.I32s(l.pages);
    w.I64(l.length);
    w.I64(l.expires_at_ms);
    w.I32s(l.shared_tokens);
  }
  const std::vector<ForkLink> links = fork_links_.Links();
  w.U64(links.size());
  for (const ForkLink& link : links) {
    w.U64(link.a);
    w.U64(link.b);
    w.I64(link.shared);
  }
  return w.Take();
}

absl::Status CacheStateImpl::ReadWorkers(SnapshotReader& r) {
  const uint64_t num_workers = r.U64();
  for (uint64_t i = 0; i < num_workers && r.ok(); ++i) {
    RegisterWorkerRequest info;
    info.worker_id = r.Str();
    info.address = r.Str();
    info.metrics_address = r.Str();
    info.capacity_slots = r.I64();
    info.page_size = static_cast<int32_t>(r.I64());
    info.model = r.Str();
    info.epoch = r.I64();
    info.vocab_size = static_cast<int32_t>(r.I64());
    WorkerLoad load;
    load.running_requests = static_cast<int32_t>(r.I64());
    load.waiting_requests = static_cast<int32_t>(r.I64());
    load.outstanding_tokens = r.I64();
    load.available_slots = r.I64();
    const int64_t last_heartbeat_ms = r.I64();
    const int64_t bit = r.I64();
    const int64_t counters[4] = {r.I64(), r.I64(), r.I64(), r.I64()};
    std::vector<int32_t> free_list = r.I32s();
    if (!r.ok()) break;
    if (info.worker_id.empty() || info.model.empty() ||
        workers_.contains(info.worker_id) || bit < 0 ||
        bit >= kMaxWorkersPerModel || info.capacity_slots > kMaxCapacitySlots) {
      return Corrupt("bad worker record");
    }
    absl::StatusOr<PageAllocator> allocator = PageAllocator::CreateWithFreeList(
        info.capacity_slots, info.page_size, std::move(free_list));
    if (!allocator.ok()) {
      return Corrupt(std::string(allocator.status().message()));
    }
    ModelEntry& model = models_[info.model];
    if ((model.mask >> bit) & 1) return Corrupt("worker bit used twice");
    WorkerEntry& e = workers_[info.worker_id];
    e.info = info;
    e.load = load;
    e.last_heartbeat_ms = last_heartbeat_ms;
    e.bit = static_cast<int>(bit);
    e.prefix_query_tokens = counters[0];
    e.prefix_hit_tokens = counters[1];
    e.evicted_tokens = counters[2];
    e.expired_leases = counters[3];
    e.allocator = std::make_unique<PageAllocator>(*std::move(allocator));
    e.queue = std::make_unique<EvictionQueue>();
    model.mask |= uint64_t{1} << bit;
    model.bit_owner[bit] = info.worker_id;
    (*model.contexts)[bit] = WorkerContext{e.allocator.get(), e.queue.get(), 0};
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::ReadTreeNodes(
    SnapshotReader& r, RadixTree* tree, uint64_t num_nodes,
    absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id) {
  const WorkerContexts& contexts = *models_.at(tree->model()).contexts;
  std::vector<RadixNode*> order = {tree->root()};
  for (uint64_t i = 0; i < num_nodes && r.ok(); ++i) {
    const uint64_t parent_index = r.U64();
    const uint64_t id = r.U64();
    std::vector<int32_t> tokens = r.I32s();
    const uint64_t num_res = r.U64();
    if (!r.ok() || parent_index >= order.size() || tokens.empty() || id == 0 ||
        id >= next_node_id_ || nodes_by_id.contains(id) ||
        order[parent_index]->children().contains(tokens[0])) {
      return Corrupt("bad tree node");
    }
    RadixNode* parent = order[parent_index];
    RadixNode* node = tree->RestoreChild(parent, id, std::move(tokens));
    nodes_by_id[id] = node;
    order.push_back(node);
    for (uint64_t j = 0; j < num_res && r.ok(); ++j) {
      Residency res;
      const int64_t bit = r.I64();
      res.stats.last_access_ms = r.I64();
      res.stats.hit_count = r.I64();
      res.stats.priority = static_cast<int32_t>(r.I64());
      res.slots = r.I32s();
      if (!r.ok() || bit < 0 || bit >= kMaxWorkersPerModel ||
          contexts[bit].allocator == nullptr || node->resident(bit) ||
          (parent != tree->root() && !parent->resident(bit)) ||
          res.slots.size() != node->tokens().size()) {
        return Corrupt("bad residency record");
      }
      const PageAllocator& a = *contexts[bit].allocator;
      for (size_t k = 0; k < res.slots.size(); ++k) {
        if (res.slots[k] < 0 || res.slots[k] >= a.capacity_slots() ||
            res.slots[k] % a.page_size() !=
                (node->start() + static_cast<int64_t>(k)) % a.page_size()) {
          return Corrupt("residency slot out of range or not page-aligned");
        }
      }
      res.bit = static_cast<int32_t>(bit);
      tree->RestoreResidency(node, std::move(res));
    }
    if (node->resident_mask() == 0) return Corrupt("node without residency");
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::ReadTrees(
    SnapshotReader& r, absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id) {
  const uint64_t num_trees = r.U64();
  for (uint64_t t = 0; t < num_trees && r.ok(); ++t) {
    const std::string model_name = r.Str();
    const std::string salt = r.Str();
    const uint64_t num_nodes = r.U64();
    auto m = models_.find(model_name);
    if (!r.ok() || m == models_.end() || m->second.trees.contains(salt)) {
      return Corrupt("tree of an unknown model or repeated");
    }
    RadixTree* tree = GetOrCreateTree(model_name, salt);
    if (absl::Status s = ReadTreeNodes(r, tree, num_nodes, nodes_by_id);
        !s.ok()) {
      return s;
    }
    if (!r.ok()) break;
    tree->RebuildDerived();
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::ReadLeases(
    SnapshotReader& r, bool has_fork_families,
    const absl::flat_hash_map<uint64_t, RadixNode*>& nodes_by_id) {
  const uint64_t num_leases = r.U64();
  for (uint64_t i = 0; i < num_leases && r.ok(); ++i) {
    Lease l;
    l.id = r.U64();
    l.worker_id = r.Str();
    l.model = r.Str();
    l.cache_salt = r.Str();
    l.request_id = r.Str();
    const uint64_t terminal_id = r.U64();
    l.prompt = r.I32s();
    l.priority = static_cast<int32_t>(r.I64());
    l.prefix_len = r.I64();
    l.pages = r.I32s();
    l.length = r.I64();
    l.expires_at_ms = r.I64();
    if (has_fork_families) l.shared_tokens = r.I32s();
    if (!r.ok()) break;
    WorkerEntry* worker = FindWorker(l.worker_id);
    if (worker == nullptr || worker->info.model != l.model ||
        l.length < static_cast<int64_t>(l.prompt.size()) ||
        static_cast<int64_t>(l.pages.size()) !=
            CeilDiv(l.length, worker->info.page_size) ||
        l.known_length() > l.length) {
      return Corrupt("bad lease record");
    }
    for (int32_t page : l.pages) {
      if (page < 0 || page >= worker->allocator->num_pages()) {
        return Corrupt("lease page out of range");
      }
    }
    if (terminal_id != 0) {
      auto it = nodes_by_id.find(terminal_id);
      if (it == nodes_by_id.end() ||
          it->second->tree() != FindTree(l.model, l.cache_salt)) {
        return Corrupt("lease terminal node unknown");
      }
      for (RadixNode* n = it->second; n->parent() != nullptr; n = n->parent()) {
        if (!n->resident(worker->bit)) {
          return Corrupt("lease path not resident on its worker");
        }
      }
      l.terminal = it->second;
    }
    Lease* added = leases_.AddWithId(std::move(l));
    if (added == nullptr) return Corrupt("lease id repeated");
    if (added->terminal != nullptr) {
      added->terminal->tree()->LockPath(added->terminal, worker->bit);
    }
    for (int32_t page : added->pages) worker->allocator->Ref(page, true);
    worker->lease_ids.insert(added->id);
    worker->lease_page_refs += static_cast<int64_t>(added->pages.size());
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckFreeListsMatchRefs() const {
  for (const auto& [id, worker] : workers_) {
    const PageAllocator& a = *worker.allocator;
    std::vector<bool> is_free(a.num_pages(), false);
    for (int32_t page : a.free_list()) is_free[page] = true;
    for (int32_t p = 0; p < a.num_pages(); ++p) {
      if (is_free[p] == (a.ref_count(p) > 0)) {
        return Corrupt(absl::StrCat(
            "worker ", id, " page ", p,
            is_free[p] ? " free but referenced" : " leaked (no holder)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CacheStateImpl>> CacheStateImpl::Deserialize(
    std::string_view snapshot, const CacheOptions& options) {
  auto state = std::make_unique<CacheStateImpl>(options);
  SnapshotReader r(snapshot);
  const std::string magic = r.Str();
  if (!r.ok() || (magic != kSnapshotMagic && magic != kSnapshotMagicV1)) {
    return Corrupt("bad magic");
  }
  const bool v1 = magic == kSnapshotMagicV1;
  const uint64_t next_lease_id = r.U64();
  state->next_node_id_ = r.U64();
  state->expired_leases_total_ = r.I64();
  if (absl::Status s = state->ReadWorkers(r); !s.ok()) return s;
  // Node id -> node, for lease terminals.
  absl::flat_hash_map<uint64_t, RadixNode*> nodes_by_id;
  if (absl::Status s = state->ReadTrees(r, nodes_by_id); !s.ok()) return s;
  if (absl::Status s = state->ReadLeases(r, !v1, nodes_by_id); !s.ok()) {
    return s;
  }
  std::vector<ForkLink> links;
  const uint64_t num_links = v1 ? 0 : r.U64();
  for (uint64_t i = 0; i < num_links && r.ok(); ++i) {
    links.push_back(ForkLink{r.U64(), r.U64(), r.I64()});
  }
  if (absl::Status s = state->RestoreForkLinks(links); r.ok() && !s.ok()) {
    return Corrupt(std::string(s.message()));
  }
  if (!r.ok() || !r.done()) return Corrupt("truncated or trailing bytes");
  if (next_lease_id < state->leases_.next_id()) {
    return Corrupt("next_lease_id below a lease id");
  }
  state->leases_.set_next_id(next_lease_id);
  if (absl::Status s = state->CheckFreeListsMatchRefs(); !s.ok()) return s;
  if (absl::Status s = state->CheckInvariants(); !s.ok()) {
    return Corrupt(std::string(s.message()));
  }
  return state;
}

absl::Status CacheStateImpl::RestoreForkLinks(
    const std::vector<ForkLink>& links) {
  absl::flat_hash_map<uint64_t, uint64_t> parent;
  for (const ForkLink& link : links) {
    const Lease* a = leases_.Find(link.a);
    const Lease* b = leases_.Find(link.b);
    if (a == nullptr || b == nullptr || link.a >= link.b ||
        a->worker_id != b->worker_id || link.shared < 1 ||
        link.shared > std::min(a->length, b->length)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad fork link ", link.a, "-", link.b));
    }
    const uint64_t ra = ForestRoot(parent, link.a);
    const uint64_t rb = ForestRoot(parent, link.b);
    if (ra == rb) {
      return absl::InvalidArgumentError(
          absl::StrCat("fork link ", link.a, "-", link.b, " closes a cycle"));
    }
    parent[ra] = rb;
    fork_links_.Link(link.a, link.b, link.shared);
  }
  return absl::OkStatus();
}

}  // namespace radixkv::cache_service
