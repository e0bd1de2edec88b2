#!/usr/bin/env python3
"""Idealized model of prefix hit rates under cache_aware vs round_robin.

Why does cache_aware's prefix hit rate stay near, not above, 2x round_robin's
with two workers (docs/perf/2026-11-29-placement-sweep-2x.md and
docs/perf/2026-11-29-two-workers-2x-target.md)?
This model removes everything but placement and eviction: no load guard, no
concurrency, no preemption. cache_aware is idealized as a perfectly balanced
static split (group or conversation i lives on worker i % 2, always found);
round_robin alternates workers. Each worker's KV pool holds `pool` tokens.

Units: tokens. Hit rate = reused prompt tokens / prompt tokens, as the
workload runner reports it.

  shared-prefix: groups x prompts_per_group requests, shuffled (SGLang's
    generated-shared-prefix order); a request reuses its group's system
    prompt if the worker still holds it, then caches its unique tail
    (question + answer), which is never reused.
  multi-turn: conversations x rounds, round-major order with conversations
    shuffled in each round (all conversations active at once); round k's
    prompt is round k-1's prompt + answer + a new user message.

Eviction (per worker, whole segments, leaves only as in a radix tree):
  lru          least recently used leaf first (radixkv's default).
  unused-first leaves that were never reused by a later request first, then
               LRU (a segmented LRU; the cache service's lfu policy is close).

Usage: tools/workload/two_worker_hit_rate_model.py [--seeds N]
Prints, per workload size, the mean hit rates over N seeds and their ratio.
Standard library only.
"""

import argparse
import random
from collections import OrderedDict


def shared_prefix(groups, per_group, system, tail, pool, policy, eviction,
                  seed):
    rng = random.Random(seed)
    requests = [g for g in range(groups) for _ in range(per_group)]
    rng.shuffle(requests)
    # Per worker: key -> [tokens, reused]; insertion order = LRU order.
    caches = [OrderedDict(), OrderedDict()]
    used = [0, 0]
    hit = total = 0
    for i, g in enumerate(requests):
        w = i % 2 if policy == "round_robin" else g % 2
        cache = caches[w]
        total += system + tail
        if ("prefix", g) in cache:
            hit += system
            cache[("prefix", g)][1] = True
            cache.move_to_end(("prefix", g))
        else:
            cache[("prefix", g)] = [system, False]
            used[w] += system
        cache[("tail", i)] = [tail, False]
        used[w] += tail
        while used[w] > pool:
            # A prefix with a resident tail is not a leaf.
            leaves = [k for k in cache
                      if k[0] == "tail" or not any(
                          t[0] == "tail" and requests[t[1]] == k[1]
                          for t in cache)]
            if eviction == "unused-first":
                unused = [k for k in leaves if not cache[k][1]]
                leaves = unused or leaves
            victim = leaves[0]
            used[w] -= cache.pop(victim)[0]
    return hit / total


def multi_turn(conversations, rounds, system, user, answer, pool, policy,
               eviction, seed):
    rng = random.Random(seed)
    order = []
    for k in range(rounds):
        convs = list(range(conversations))
        rng.shuffle(convs)
        order += [(c, k) for c in convs]
    # Per worker: conversation -> {"segments": [tokens], "reused": [bool],
    # "last": time}; the leaf is the last segment.
    workers = [{}, {}]
    used = [0, 0]
    hit = total = 0
    for t, (c, k) in enumerate(order):
        w = t % 2 if policy == "round_robin" else c % 2
        prompt = [system + user] + [answer + user] * k
        total += sum(prompt)
        chain = workers[w].setdefault(c, {"segments": [], "reused": [],
                                          "last": t})
        n = 0
        for have, need in zip(chain["segments"], prompt):
            if have != need:
                break
            hit += have
            chain["reused"][n] = True
            n += 1
        segments = prompt + [answer]
        used[w] += sum(segments) - sum(chain["segments"])
        chain["reused"] = (chain["reused"][:n] +
                           [False] * (len(segments) - n))
        chain["segments"] = segments
        chain["last"] = t
        while used[w] > pool:
            candidates = [(cc, ch) for cc, ch in workers[w].items()
                          if ch["segments"] and cc != c] or [(c, chain)]
            if eviction == "unused-first":
                unused = [x for x in candidates if not x[1]["reused"][-1]]
                candidates = unused or candidates
            cc, victim = min(candidates, key=lambda x: x[1]["last"])
            used[w] -= victim["segments"].pop()
            victim["reused"].pop()
            if not victim["segments"]:
                del workers[w][cc]
    return hit / total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    seeds = range(args.seeds)

    def mean(f, **kw):
        return sum(f(seed=s, **kw) for s in seeds) / len(seeds)

    for eviction in ("lru", "unused-first"):
        print(f"shared-prefix: 16 prompts/group, system 385, tail 48 "
              f"(question 32 + answer 16), pool 3072, eviction {eviction}")
        print("  groups  cache_aware  round_robin  ratio")
        for groups in (8, 12, 14, 16, 20, 24):
            kw = dict(groups=groups, per_group=16, system=385, tail=48,
                      pool=3072, eviction=eviction)
            ca = mean(shared_prefix, policy="cache_aware", **kw)
            rr = mean(shared_prefix, policy="round_robin", **kw)
            print(f"  {groups:6d}  {ca:11.3f}  {rr:11.3f}  {ca / rr:5.2f}")
    for eviction in ("lru", "unused-first"):
        print(f"multi-turn: 16 conversations x 5 rounds, system 128, user "
              f"48, answer 16, all active, eviction {eviction}")
        print("    pool  cache_aware  round_robin  ratio")
        for pool in (2048, 2560, 3072, 3584, 4096):
            kw = dict(conversations=16, rounds=5, system=128, user=48,
                      answer=16, pool=pool, eviction=eviction)
            ca = mean(multi_turn, policy="cache_aware", **kw)
            rr = mean(multi_turn, policy="round_robin", **kw)
            print(f"  {pool:6d}  {ca:11.3f}  {rr:11.3f}  {ca / rr:5.2f}")


if __name__ == "__main__":
    main()
