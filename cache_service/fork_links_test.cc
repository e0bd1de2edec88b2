#include "cache_service/fork_links.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

using Shared = std::map<uint64_t, int64_t>;

Shared VisitAll(const ForkLinks& links, uint64_t from, int64_t limit) {
  Shared out;
  links.Visit(from, limit, [&](uint64_t lease, int64_t shared) {
    EXPECT_TRUE(out.emplace(lease, shared).second) << "visited twice";
    return true;
  });
  return out;
}

TEST(ForkLinksTest, SharedLengthIsTheShortestLinkOnThePath) {
  ForkLinks links;
  // 1 forked 2 at 8 and 3 at 5; 2 forked 4 at 12.
  links.Link(1, 2, 8);
  links.Link(1, 3, 5);
  links.Link(2, 4, 12);
  EXPECT_EQ(VisitAll(links, 1, 100), (Shared{{2, 8}, {3, 5}, {4, 8}}));
  EXPECT_EQ(VisitAll(links, 4, 100), (Shared{{2, 12}, {1, 8}, {3, 5}}));
  EXPECT_EQ(VisitAll(links, 3, 6), (Shared{{1, 5}, {2, 5}, {4, 5}}));
  EXPECT_EQ(VisitAll(links, 4, 3), (Shared{{2, 3}, {1, 3}, {3, 3}}));
  EXPECT_TRUE(VisitAll(links, 9, 100).empty());
  EXPECT_EQ(links.Links(),
            (std::vector<ForkLink>{{1, 2, 8}, {1, 3, 5}, {2, 4, 12}}));
}

TEST(ForkLinksTest, VisitStopsPastALeaseThatSaysSo) {
  ForkLinks links;
  links.Link(1, 2, 8);
  links.Link(2, 3, 8);
  links.Link(1, 4, 8);
  std::vector<uint64_t> order;
  links.Visit(1, 100, [&](uint64_t lease, int64_t) {
    order.push_back(lease);
    return lease != 2;
  });
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 4}));
}

TEST(ForkLinksTest, RemovingALeaseKeepsTheOthersShared) {
  ForkLinks links;
  links.Link(1, 2, 8);
  links.Link(1, 3, 5);
  links.Link(1, 4, 8);
  links.Remove(1);
  // Hub: 2 (longest, smallest id).
  EXPECT_EQ(links.Links(), (std::vector<ForkLink>{{2, 3, 5}, {2, 4, 8}}));
  EXPECT_EQ(VisitAll(links, 4, 100), (Shared{{2, 8}, {3, 5}}));
  links.Remove(2);
  links.Remove(3);
  EXPECT_TRUE(links.empty());
  EXPECT_FALSE(links.Linked(4));
}

// Random forks and removals against the definition: two live leases share
// the shortest fork on the chain of forks joining them, through leases
// alive or ended.
TEST(ForkLinksTest, RandomForksAndRemovalsMatchTheForkHistory) {
  const uint64_t seed =
      std::getenv("RADIXKV_TEST_SEED") != nullptr
          ? std::strtoull(getenv("RADIXKV_TEST_SEED"), nullptr, 10)
          : std::random_device{}();
  std::cout << "RADIXKV_TEST_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 200; ++round) {
    ForkLinks links;
    std::vector<ForkLink> history;  // every fork ever made
    std::set<uint64_t> alive;
    uint64_t next = 1;
    for (int op = 0; op < 40; ++op) {
      if (alive.empty() || uniform(0, 2) > 0) {
        const uint64_t child = next++;
        if (!alive.empty()) {
          auto it = alive.begin();
          std::advance(it, uniform(0, alive.size() - 1));
          const int64_t shared = uniform(1, 20);
          links.Link(*it, child, shared);
          history.push_back({*it, child, shared});
        }
        alive.insert(child);
      } else {
        auto it = alive.begin();
        std::advance(it, uniform(0, alive.size() - 1));
        links.Remove(*it);
        alive.erase(it);
      }
      // The history is a tree (each fork adds a leaf): the shared length of
      // two leases is the shortest fork on its unique path.
      std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> tree;
      for (const ForkLink& l : history) {
        tree[l.a].push_back({l.b, l.shared});
        tree[l.b].push_back({l.a, l.shared});
      }
      auto widest_from = [&](uint64_t x) {
        std::map<uint64_t, int64_t> reach = {{x, 1000}};
        std::vector<uint64_t> stack = {x};
        while (!stack.empty()) {
          const uint64_t v = stack.back();
          stack.pop_back();
          for (const auto& [u, w] : tree[v]) {
            if (reach.contains(u)) continue;
            reach[u] = std::min(reach[v], w);
            stack.push_back(u);
          }
        }
        return reach;
      };
      for (uint64_t x : alive) {
        const std::map<uint64_t, int64_t> reach = widest_from(x);
        Shared expected;
        for (uint64_t y : alive) {
          auto r = reach.find(y);
          if (y != x && r != reach.end()) expected[y] = r->second;
        }
        ASSERT_EQ(VisitAll(links, x, 1000), expected)
            << "seed " << seed << " round " << round << " op " << op;
      }
    }
  }
}

}  // namespace
}  // namespace radixkv::cache_service
