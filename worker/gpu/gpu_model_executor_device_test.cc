// Device test of GpuModelExecutor (GPU machine only; see BUILD):
//   - golden logits of the three shared/golden checkpoints (transformers,
//     float64) in fp32 compute (max abs <= 1e-3, argmax rule) and bf16
//     compute (relative L2 <= 2e-2), README "How a C++ test should compare";
//   - greedy generations token-identical (fp32), prefix-cache consistency;
//   - GPU vs CPU backend on the same scripted steps with prefix reuse on and
//     off (shared pages + a copy-on-write partial page): same greedy tokens
//     (fp32), logits within tolerance (bf16);
//   - decode graphs vs eager, device sampling (greedy, top-k, top-p, seeds);
//   - the serving path: ModelExecutor::ForwardSample (SequenceSampling) and
//     the Scheduler (fake cache service) over the GPU executor give the CPU
//     executor's greedy tokens; seeded sampling reproduces per seed;
//   - the tensor-core attention path (worker/kernels/hip, head_dim 64) vs the
//     generic kernel, on a random checkpoint (RADIXKV_TC_MODEL_DIR, written by
//     make_random_checkpoint);
//   - autotuned GEMMs (gpu_gemm_tuner.h: GemmEx, the streaming kernel,
//     cuBLASLt with split-K) vs the default GEMM rule and vs fp32, on the
//     same checkpoint, prefill and decode at power-of-two row counts.
// Needs RADIXKV_SHARED_DIR (the folder with golden/). Prints its seed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/gpu/gpu_device_test_helpers.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/logit_processors.h"
#include "worker/offline_generation.h"
#include "worker/sampler.h"
#include "worker/scheduler.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/golden_checkpoints.h"

namespace radixkv::worker {
namespace {

using Json = nlohmann::json;
using testing::PrefillAllLogits;
constexpr int kVocab = testing::kGoldenVocab;

using gpu_test::DecodeStepBatch;
using gpu_test::MakeCpu;
using gpu_test::MakeGpu;
using gpu_test::MaxAbs;
using gpu_test::PrefillBatch;
using gpu_test::RelL2;
using gpu_test::Shared;

// ---------------------------------------------------------------- golden

TEST(GpuGolden, LogitsFp32AndBf16) {
  const std::string shared = Shared();
  absl::StatusOr<Json> index =
      model::testing::ReadJsonFile(shared + "/golden/logits_index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  const Json& seqs = (*index)["sequences"];
  int files = 0;
  for (const char* model : testing::kGoldenModels) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      auto e = MakeGpu(shared + "/golden/models/" + model, dtype);
      ASSERT_NE(e, nullptr);
      for (const Json& f : (*index)["models"][model]["files"]) {
        const int seq = f["sequence"].get<int>();
        const int64_t len = f["length"].get<int64_t>();
        const auto ids = seqs[seq]["ids"].get<std::vector<int32_t>>();
        absl::StatusOr<std::vector<float>> golden = model::testing::ReadF32File(
            shared + "/golden/" + f["file"].get<std::string>(), len * kVocab);
        ASSERT_TRUE(golden.ok()) << golden.status();
        const std::vector<float> got = PrefillAllLogits(*e, ids);
        const double max_abs = MaxAbs(got, *golden);
        const double rel = RelL2(got, *golden);
        std::printf(
            "golden %-16s seq%d len%-4lld %s: max_abs %.3g rel_l2 %.3g\n",
            model, seq, static_cast<long long>(len), DTypeName(dtype), max_abs,
            rel);
        if (dtype == DType::kF32) {
          EXPECT_LE(max_abs, 1e-3) << model << " seq" << seq;
          const auto low = f["positions_with_top2_margin_below_1em3"]
                               .get<std::vector<int>>();
          for (int64_t p = 0; p < len; ++p) {
            const float* g = &(*golden)[p * kVocab];
            const float* c = &got[p * kVocab];
            const int ca = std::max_element(c, c + kVocab) - c;
            const int ga = std::max_element(g, g + kVocab) - g;
            if (std::find(low.begin(), low.end(), p) != low.end()) {
              EXPECT_GE(g[ca], g[ga] - 1e-3) << model << " p" << p;
            } else {
              EXPECT_EQ(ca, ga) << model << " seq" << seq << " p" << p;
            }
          }
        } else if (std::string(model) == "llama3-gqa-bf16") {
          EXPECT_LE(rel, 2e-2) << model << " seq" << seq;
          EXPECT_LE(max_abs, 0.1) << model << " seq" << seq;
        } else {
          EXPECT_LE(rel, 5e-2) << model << " seq" << seq;  // fp32 weights
        }
        ++files;
      }
    }
  }
  EXPECT_EQ(files, 24);
}

TEST(GpuGolden, GreedyGenerationsTokenIdenticalFp32) {
  const std::string shared = Shared();
  absl::StatusOr<Json> gen =
      model::testing::ReadJsonFile(shared + "/golden/generation.json");
  ASSERT_TRUE(gen.ok()) << gen.status();
  int compared = 0;
  for (const char* model : testing::kGoldenModels) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      auto e = MakeGpu(shared + "/golden/models/" + model, dtype);
      ASSERT_NE(e, nullptr);
      std::vector<OfflineRequest> requests;
      for (const Json& c : (*gen)["models"][model]) {
        OfflineRequest r;
        r.prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
        r.params.max_new_tokens = 24;
        r.params.ignore_eos = true;
        requests.push_back(r);
      }
      auto out = GenerateOffline(*e, requests, e->config().eos_token_ids);
      ASSERT_TRUE(out.ok()) << out.status();
      int same = 0, total = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        const auto want = (*gen)["models"][model][i]["generated_ids"]
                              .get<std::vector<int32_t>>();
        for (size_t t = 0; t < want.size() && t < (*out)[i].output_ids.size();
             ++t) {
          same += want[t] == (*out)[i].output_ids[t];
          ++total;
        }
        if (dtype == DType::kF32) {
          EXPECT_EQ((*out)[i].output_ids, want) << model << " prompt " << i;
          ++compared;
        }
      }
      std::printf("greedy %-16s %s: %d/%d tokens equal to golden\n", model,
                  DTypeName(dtype), same, total);
      EXPECT_GT(e->num_graphs(), 0) << "decode steps should replay graphs";
    }
  }
  EXPECT_EQ(compared, 9);
}

TEST(GpuGolden, PrefixCacheExtendEqualsOneShot) {
  const std::string shared = Shared();
  absl::StatusOr<Json> index =
      model::testing::ReadJsonFile(shared + "/golden/logits_index.json");
  ASSERT_TRUE(index.ok());
  const auto ids = (*index)["sequences"][3]["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 300u);
  for (const char* model : testing::kGoldenModels) {
    auto e = MakeGpu(shared + "/golden/models/" + model, DType::kF32);
    ASSERT_NE(e, nullptr);
    const std::vector<float> one = PrefillAllLogits(*e, ids);
    // prefill(S[:200]) into slots 1000.., then extend S[200:].
    ForwardBatch a;
    for (int i = 0; i < 200; ++i) {
      a.input_ids.push_back(ids[i]);
      a.positions.push_back(i);
      a.out_cache_loc.push_back(1000 + i);
    }
    a.qo_indptr = {0, 200};
    a.kv_indptr = {0, 0};
    a.return_all_logits = true;
    std::vector<float> la, lb;
    ASSERT_TRUE(e->Forward(a, &la).ok());
    ForwardBatch b;
    for (int i = 200; i < 300; ++i) {
      b.input_ids.push_back(ids[i]);
      b.positions.push_back(i);
      b.out_cache_loc.push_back(1000 + i);
    }
    for (int i = 0; i < 200; ++i) b.kv_indices.push_back(1000 + i);
    b.qo_indptr = {0, 100};
    b.kv_indptr = {0, 200};
    b.return_all_logits = true;
    ASSERT_TRUE(e->Forward(b, &lb).ok());
    la.insert(la.end(), lb.begin(), lb.end());
    const double d = MaxAbs(la, one);
    std::printf("prefix cache %-16s: max |split - one-shot| = %.3g\n", model,
                d);
    EXPECT_LE(d, 1e-5) << model;
  }
}

// -------------------------------------------------- GPU vs CPU, prefix reuse

// Scripted steps on any executor: request A prefilled, request B prefilled
// with (reuse) or without (no reuse) A's first 40 tokens from the cache (two
// shared full pages + a copy-on-write copy of A's partial third page), then
// both decode greedily together. Returns the per-step logits and tokens.
struct Script {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens_a, tokens_b;
};

// With `force`, decode inputs are force's tokens (teacher forcing), so that
// logits of two backends stay comparable after a low-margin argmax differs.
absl::StatusOr<Script> RunScript(ModelExecutor& e, bool reuse,
                                 const std::vector<int32_t>& pa,
                                 const std::vector<int32_t>& pb_suffix,
                                 int decode_steps,
                                 const Script* force = nullptr) {
  constexpr int kPage = 16;
  Script out;
  const int32_t V = e.config().vocab_size;
  auto argmax = [&](const std::vector<float>& l, int row) {
    return ArgMax(absl::MakeConstSpan(l.data() + int64_t{row} * V, V));
  };
  // A: pages 0.. (slots 0..).
  std::vector<int64_t> slots_a, slots_b;
  std::vector<int32_t> ctx_a = pa, ctx_b;
  {
    ForwardBatch b;
    b.input_ids = pa;
    for (size_t i = 0; i < pa.size(); ++i) {
      b.positions.push_back(static_cast<int32_t>(i));
      slots_a.push_back(static_cast<int64_t>(i));
    }
    b.out_cache_loc = slots_a;
    b.qo_indptr = {0, static_cast<int32_t>(pa.size())};
    b.kv_indptr = {0, 0};
    std::vector<float> l;
    if (auto s = e.Forward(b, &l); !s.ok()) return s;
    out.logits.push_back(l);
    out.tokens_a.push_back(argmax(l, 0));
  }
  // B = A[:40] + suffix.
  std::vector<int32_t> pb(pa.begin(), pa.begin() + 40);
  pb.insert(pb.end(), pb_suffix.begin(), pb_suffix.end());
  ctx_b = pb;
  {
    ForwardBatch b;
    const int64_t base = 20 * kPage;  // B's own pages start at page 20
    int32_t cached = 0;
    if (reuse) {
      for (int i = 0; i < 32; ++i) slots_b.push_back(i);  // pages 0, 1
      b.copy_ops.push_back(PageCopy{2, 20, 8});           // A's partial page 2
      for (int i = 0; i < 8; ++i) slots_b.push_back(base + i);
      cached = 40;
      b.kv_indices = slots_b;
    }
    for (size_t i = cached; i < pb.size(); ++i) {
      b.input_ids.push_back(pb[i]);
      b.positions.push_back(static_cast<int32_t>(i));
      const int64_t slot = base + static_cast<int64_t>(i);
      b.out_cache_loc.push_back(slot);
      slots_b.push_back(slot);
    }
    b.qo_indptr = {0, static_cast<int32_t>(pb.size()) - cached};
    b.kv_indptr = {0, cached};
    std::vector<float> l;
    if (auto s = e.Forward(b, &l); !s.ok()) return s;
    out.logits.push_back(l);
    out.tokens_b.push_back(argmax(l, 0));
  }
  // Batched greedy decode of A and B.
  for (int step = 0; step < decode_steps; ++step) {
    ForwardBatch b;
    b.is_decode = true;
    const int64_t sa = static_cast<int64_t>(ctx_a.size());
    const int64_t sb = 20 * kPage + static_cast<int64_t>(ctx_b.size());
    slots_a.push_back(sa);
    slots_b.push_back(sb);
    const int32_t in_a = force ? force->tokens_a[step] : out.tokens_a.back();
    const int32_t in_b = force ? force->tokens_b[step] : out.tokens_b.back();
    b.input_ids = {in_a, in_b};
    b.positions = {static_cast<int32_t>(ctx_a.size()),
                   static_cast<int32_t>(ctx_b.size())};
    ctx_a.push_back(in_a);
    ctx_b.push_back(in_b);
    b.out_cache_loc = {sa, sb};
    b.qo_indptr = {0, 1, 2};
    b.kv_indices = slots_a;
    b.kv_indices.insert(b.kv_indices.end(), slots_b.begin(), slots_b.end());
    b.kv_indptr = {0, static_cast<int32_t>(slots_a.size()),
                   static_cast<int32_t>(slots_a.size() + slots_b.size())};
    std::vector<float> l;
    if (auto s = e.Forward(b, &l); !s.ok()) return s;
    out.logits.push_back(l);
    out.tokens_a.push_back(argmax(l, 0));
    out.tokens_b.push_back(argmax(l, 1));
  }
  return out;
}

TEST(GpuVsCpu, PrefixReuseOnOffSameGreedyTokens) {
  const std::string shared = Shared();
  const uint32_t seed = std::random_device{}();
  std::printf("GpuVsCpu seed=%u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, kVocab - 1);
  std::vector<int32_t> pa(45), suffix(13);
  for (auto& t : pa) t = tok(rng);
  for (auto& t : suffix) t = tok(rng);
  for (const char* model : testing::kGoldenModels) {
    const std::string dir = shared + "/golden/models/" + model;
    auto cpu = MakeCpu(dir);
    ASSERT_NE(cpu, nullptr);
    for (bool reuse : {false, true}) {
      auto ref = RunScript(*cpu, reuse, pa, suffix, 12);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        auto gpu = MakeGpu(dir, dtype);
        ASSERT_NE(gpu, nullptr);
        // fp32: free-running greedy must give the same tokens; bf16:
        // teacher-forced on the CPU tokens, logits compared step by step.
        auto got = RunScript(*gpu, reuse, pa, suffix, 12,
                             dtype == DType::kF32 ? nullptr : &*ref);
        ASSERT_TRUE(got.ok()) << got.status();
        double max_abs = 0, max_rel = 0;
        for (size_t i = 0; i < ref->logits.size(); ++i) {
          max_abs = std::max(max_abs, MaxAbs(got->logits[i], ref->logits[i]));
          max_rel = std::max(max_rel, RelL2(got->logits[i], ref->logits[i]));
        }
        std::printf(
            "gpu-vs-cpu %-16s reuse=%d %s: max_abs %.3g rel_l2 %.3g "
            "tokens A %s B %s\n",
            model, reuse, DTypeName(dtype), max_abs, max_rel,
            got->tokens_a == ref->tokens_a ? "same" : "DIFF",
            got->tokens_b == ref->tokens_b ? "same" : "DIFF");
        if (dtype == DType::kF32) {
          EXPECT_EQ(got->tokens_a, ref->tokens_a)
              << model << " reuse " << reuse;
          EXPECT_EQ(got->tokens_b, ref->tokens_b)
              << model << " reuse " << reuse;
          EXPECT_LE(max_abs, 1e-3) << model;
        } else {
          EXPECT_LE(max_rel, 5e-2) << model;
        }
      }
    }
  }
}

TEST(GpuExecutor, ReuseOnEqualsReuseOffAndGraphsEqualEager) {
  const std::string dir = Shared() + "/golden/models/llama3-gqa-bf16";
  std::vector<int32_t> pa(45), suffix(13);
  for (size_t i = 0; i < pa.size(); ++i) pa[i] = 3 + (i * 37) % 500;
  for (size_t i = 0; i < suffix.size(); ++i) suffix[i] = 5 + (i * 91) % 500;
  auto graphs = MakeGpu(dir, DType::kF32, /*graphs=*/true);
  auto eager = MakeGpu(dir, DType::kF32, /*graphs=*/false);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(eager, nullptr);
  auto g_on = RunScript(*graphs, true, pa, suffix, 16);
  auto e_on = RunScript(*eager, true, pa, suffix, 16);
  auto e_off = RunScript(*eager, false, pa, suffix, 16);
  ASSERT_TRUE(g_on.ok() && e_on.ok() && e_off.ok());
  EXPECT_TRUE(graphs->last_step().graph_replayed);
  EXPECT_GT(graphs->num_graphs(), 0);
  EXPECT_EQ(eager->num_graphs(), 0);
  double d = 0;
  for (size_t i = 0; i < g_on->logits.size(); ++i) {
    d = std::max(d, MaxAbs(g_on->logits[i], e_on->logits[i]));
  }
  std::printf("graphs vs eager: max abs %.3g; reuse on vs off tokens %s\n", d,
              e_on->tokens_b == e_off->tokens_b ? "same" : "DIFF");
  EXPECT_LE(d, 1e-6);
  EXPECT_EQ(e_on->tokens_b, e_off->tokens_b);
  EXPECT_EQ(g_on->tokens_a, e_on->tokens_a);
}

// ------------------------------------------------------------- sampling

TEST(GpuExecutor, DeviceSampling) {
  const std::string dir = Shared() + "/golden/models/llama-tiny-fp32";
  auto e = MakeGpu(dir, DType::kF32);
  ASSERT_NE(e, nullptr);
  const uint32_t seed = std::random_device{}();
  std::printf("DeviceSampling seed=%u\n", seed);
  std::mt19937 rng(seed);
  // Four sequences prefilled in one batch; sample the next token each.
  std::vector<std::vector<int32_t>> prompts(4);
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 5 + s * 3; ++i) prompts[s].push_back(3 + rng() % 500);
  }
  const ForwardBatch b = PrefillBatch(prompts);
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<GpuSamplingParams> greedy(4);
  ASSERT_TRUE(e->ForwardSample(b, greedy, &tokens, &logits).ok());
  ASSERT_EQ(tokens.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(tokens[s],
              ArgMax(absl::MakeConstSpan(&logits[s * kVocab], kVocab)));
  }
  const std::vector<int32_t> greedy_tokens = tokens;
  auto sample = [&](GpuSamplingParams p) {
    std::vector<GpuSamplingParams> ps(4, p);
    std::vector<int32_t> t;
    EXPECT_TRUE(e->ForwardSample(b, ps, &t).ok());
    return t;
  };
  // top_k = 1 and a tiny top_p are greedy at any temperature.
  EXPECT_EQ(sample({1.0f, 1, 1.0f, 7, 0}), greedy_tokens);
  EXPECT_EQ(sample({1.5f, 0, 1e-6f, 7, 0}), greedy_tokens);
  // top_k = 5: every draw is one of the 5 largest logits; draws vary with the
  // step and repeat with the same (seed, step).
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 40; ++step) {
    const std::vector<int32_t> t = sample({1.0f, 5, 1.0f, seed, step});
    EXPECT_EQ(t, sample({1.0f, 5, 1.0f, seed, step}));
    for (int s = 0; s < 4; ++s) {
      const float* row = &logits[s * kVocab];
      std::vector<float> sorted(row, row + kVocab);
      std::sort(sorted.rbegin(), sorted.rend());
      EXPECT_GE(row[t[s]], sorted[4]) << "top-k violated";
    }
    seen.insert(t[0]);
  }
  EXPECT_GE(seen.size(), 2u);
  // top_k = 5 at temperature 50 (nearly uniform over the five): the draws of
  // each row are exactly within its five largest logits and reach at least
  // three of them, so the threshold is neither too loose nor too tight.
  for (int s = 0; s < 4; ++s) {
    const float* row = &logits[s * kVocab];
    std::vector<float> sorted(row, row + kVocab);
    std::sort(sorted.rbegin(), sorted.rend());
    std::set<int32_t> drawn;
    for (uint64_t step = 0; step < 60; ++step) {
      const int32_t tok = sample({50.0f, 5, 1.0f, seed + 2, step})[s];
      EXPECT_GE(row[tok], sorted[4]) << "top-k violated";
      drawn.insert(tok);
    }
    EXPECT_GE(drawn.size(), 3u) << "row " << s;
  }
  // top_p = 0.5: every draw lies in the smallest set of top tokens whose
  // probability mass (temperature 1) reaches 0.5.
  for (uint64_t step = 0; step < 20; ++step) {
    const std::vector<int32_t> t = sample({1.0f, 0, 0.5f, seed + 1, step});
    for (int s = 0; s < 4; ++s) {
      const float* row = &logits[s * kVocab];
      std::vector<std::pair<float, int>> order;
      for (int v = 0; v < kVocab; ++v) order.push_back({row[v], v});
      std::sort(order.rbegin(), order.rend());
      double z = 0;
      for (auto& [l, v] : order) z += std::exp(double(l) - order[0].first);
      double mass = 0;
      std::set<int> nucleus;
      for (auto& [l, v] : order) {
        if (mass >= 0.5 * z) break;
        nucleus.insert(v);
        mass += std::exp(double(l) - order[0].first);
      }
      EXPECT_TRUE(nucleus.count(t[s])) << "top-p violated, token " << t[s];
    }
  }
}

// ------------------------------------------------- serving (scheduler)

// Tokens of each prompt served by a Scheduler (fake cache service with
// prefix reuse, chunked prefill of 48 tokens) over `executor`.
std::vector<std::vector<int32_t>> Serve(
    ModelExecutor* executor, const std::vector<std::vector<int32_t>>& prompts,
    int max_new_tokens, float temperature, uint64_t first_seed = 1000) {
  testing::FakeKvCacheClient cache(executor->capacity_slots(),
                                   executor->page_size());
  SchedulerOptions options;
  options.start_thread = false;
  options.heartbeat_interval = absl::Hours(1);
  options.max_prefill_tokens = 48;
  auto scheduler =
      Scheduler::Create(options, executor, &cache, nullptr, nullptr);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  if (!scheduler.ok()) return {};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest r;
    r.set_request_id(absl::StrCat("r", i));
    r.mutable_token_ids()->mutable_ids()->Assign(prompts[i].begin(),
                                                 prompts[i].end());
    r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    r.mutable_sampling()->set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(temperature);
    r.mutable_sampling()->set_top_k(temperature > 0 ? 20 : 0);
    r.mutable_sampling()->set_seed(first_seed + i);
    auto stream = (*scheduler)->Submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status();
    if (!stream.ok()) return {};
    streams.push_back(*stream);
  }
  for (int i = 0; i < 100000 && !(*scheduler)->Idle(); ++i) {
    (*scheduler)->Step();
  }
  EXPECT_TRUE((*scheduler)->Idle());
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateEvent ev;
    while (streams[i]->Pop(&ev, absl::ZeroDuration())) {
      EXPECT_TRUE(ev.status.ok()) << ev.status;
      out[i].insert(out[i].end(), ev.token_ids.begin(), ev.token_ids.end());
    }
  }
  return out;
}

TEST(GpuExecutor, ServingPathSamplesOnTheDevice) {
  const std::string dir = Shared() + "/golden/models/llama-tiny-fp32";
  auto gpu = MakeGpu(dir, DType::kF32);
  auto cpu = MakeCpu(dir);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  const uint32_t seed = std::random_device{}();
  std::printf("ServingPath seed=%u\n", seed);
  std::mt19937 rng(seed);
  // 8 prompts; the second half share a 40-token prefix (prefix reuse).
  std::vector<std::vector<int32_t>> prompts(8);
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = 3 + rng() % (kVocab - 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (i >= 4) prompts[i] = shared;
    const int n = 5 + rng() % 60;
    for (int j = 0; j < n; ++j) prompts[i].push_back(3 + rng() % (kVocab - 3));
  }
  const auto g = Serve(gpu.get(), prompts, 20, 0.0f);
  const auto c = Serve(cpu.get(), prompts, 20, 0.0f);
  int same = 0, total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(g[i].size(), 20u);
    for (size_t j = 0; j < g[i].size(); ++j) same += g[i][j] == c[i][j];
    total += static_cast<int>(g[i].size());
    EXPECT_EQ(g[i], c[i]) << "prompt " << i;
  }
  std::printf("serving greedy gpu vs cpu: %d/%d tokens equal, %d graphs\n",
              same, total, gpu->num_graphs());
  EXPECT_GT(gpu->num_graphs(), 0);  // decode steps (with argmax) replayed
  // Seeded sampling on the device reproduces per (seed, step), whatever
  // the batch composition: all 8 together, then each alone.
  const auto s1 = Serve(gpu.get(), prompts, 12, 1.0f);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(s1[i].size(), 12u);
    const auto alone = Serve(gpu.get(), {prompts[i]}, 12, 1.0f, 1000 + i);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0], s1[i]) << "prompt " << i;
  }
  EXPECT_EQ(Serve(gpu.get(), prompts, 12, 1.0f), s1);
  EXPECT_NE(s1, Serve(gpu.get(), prompts, 12, 0.0f));  // really sampled

  // The interface directly: a row that needs no token reports -1, the
  // others equal the GpuSamplingParams path with the same (seed, step).
  std::vector<std::vector<int32_t>> batch_prompts(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 6 + s; ++i) {
      batch_prompts[s].push_back(3 + rng() % 500);
    }
  }
  const ForwardBatch b = PrefillBatch(batch_prompts);
  std::vector<SequenceSampling> ss(3);
  std::vector<GpuSamplingParams> gp(3);
  for (int s = 0; s < 3; ++s) {
    ss[s].temperature = gp[s].temperature = 1.0f;
    ss[s].top_k = gp[s].top_k = 50;
    ss[s].seed = gp[s].seed = seed + s;
    ss[s].step = gp[s].step = 3;
  }
  ss[1].needs_token = false;
  std::vector<int32_t> via_interface, direct;
  ModelExecutor* base = gpu.get();
  ASSERT_TRUE(base->ForwardSample(b, ss, &via_interface).ok());
  ASSERT_TRUE(gpu->ForwardSample(b, gp, &direct).ok());
  ASSERT_EQ(via_interface.size(), 3u);
  EXPECT_EQ(via_interface[0], direct[0]);
  EXPECT_EQ(via_interface[1], -1);
  EXPECT_EQ(via_interface[2], direct[2]);
  ss[0].top_p = 0.0f;
  EXPECT_EQ(base->ForwardSample(b, ss, &via_interface).code(),
            absl::StatusCode::kInvalidArgument);
}

// Overwrites row `token` of model.embed_tokens.weight (F32) in a safetensors
// file with NaN.
void PoisonEmbeddingRow(const std::string& path, int32_t token) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), sizeof(header_len));
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const Json tensor = Json::parse(header).at("model.embed_tokens.weight");
  ASSERT_EQ(tensor.at("dtype"), "F32");
  const int64_t hidden = tensor.at("shape")[1];
  const std::vector<float> nan_row(hidden, std::nanf(""));
  f.seekp(static_cast<std::streamoff>(
      8 + header_len + tensor.at("data_offsets")[0].get<int64_t>() +
      int64_t{token} * hidden * 4));
  f.write(reinterpret_cast<const char*>(nan_row.data()), hidden * 4);
  ASSERT_TRUE(f.good());
}

// A sequence whose logits contain a NaN fails alone, on the device as on the
// host: kSamplingFailedToken for its row, ordinary tokens for the others,
// through the argmax kernel (all rows greedy) and the sampling kernel. The
// NaN comes from the checkpoint: the embedding row of the token that ends
// sequence 1 is NaN, so that sequence's last hidden state and logits are.
TEST(GpuExecutor, NanLogitsFailOnlyTheirRow) {
  const std::filesystem::path src = Shared() + "/golden/models/llama-tiny-fp32";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "nan-embedding-model";
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    std::filesystem::copy_file(
        entry.path(), dir / entry.path().filename(),
        std::filesystem::copy_options::overwrite_existing);
  }
  constexpr int32_t kPoisoned = kVocab - 1;
  PoisonEmbeddingRow((dir / "model.safetensors").string(), kPoisoned);
  auto gpu = MakeGpu(dir.string(), DType::kF32);
  auto cpu = MakeCpu(dir.string());
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  const uint32_t seed = std::random_device{}();
  std::printf("NanLogits seed=%u\n", seed);
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 6 + s; ++i) {
      prompts[s].push_back(3 + rng() % (kVocab - 4));
    }
  }
  prompts[1].back() = kPoisoned;  // sequence 1 ends in the NaN embedding
  const ForwardBatch b = PrefillBatch(prompts);
  for (const float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE(absl::StrCat("temperature ", temperature));
    std::vector<SequenceSampling> ss(3);
    for (int s = 0; s < 3; ++s) {
      ss[s].temperature = temperature;
      ss[s].seed = seed + s;
    }
    std::vector<int32_t> on_gpu(3, 12345), on_cpu(3, 12345);
    ASSERT_TRUE(static_cast<ModelExecutor*>(gpu.get())
                    ->ForwardSample(b, ss, &on_gpu)
                    .ok());
    ASSERT_TRUE(static_cast<ModelExecutor*>(cpu.get())
                    ->ForwardSample(b, ss, &on_cpu)
                    .ok());
    EXPECT_EQ(on_gpu[1], kSamplingFailedToken);
    EXPECT_EQ(on_cpu[1], kSamplingFailedToken);
    for (int s : {0, 2}) {
      EXPECT_GE(on_gpu[s], 0);
      EXPECT_LT(on_gpu[s], kVocab);
      if (temperature == 0.0f) {
        EXPECT_EQ(on_gpu[s], on_cpu[s]) << s;
      }
    }
  }
}

// Penalties, min_p and logprobs on the device (logit_kernels.h) for random
// parameters, against a float64 reference of the device's own logits: fp32
// logprobs within 1e-4 of the float64 log-softmax of the penalized logits
// over the temperature, the reference's top-k ids (ties excepted), greedy
// rows the CPU sampler's token, sampled rows never a token min_p removes.
TEST(GpuExecutor, DeviceProcessorsMatchAFloat64ReferenceOfTheDeviceLogits) {
  auto gpu = MakeGpu(Shared() + "/golden/models/llama-tiny-fp32", DType::kF32);
  ASSERT_NE(gpu, nullptr);
  const uint32_t seed = std::random_device{}();
  std::printf("DeviceProcessors seed %u\n", seed);
  std::mt19937 rng(seed);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  constexpr int kRows = 6;
  std::vector<std::vector<int32_t>> prompts(kRows), outputs(kRows);
  for (int s = 0; s < kRows; ++s) {
    // Few distinct ids, so histories repeat tokens.
    for (int i = 0; i < 6 + s; ++i) prompts[s].push_back(3 + rng() % 40);
    for (int i = 0; i < 2 * s; ++i) outputs[s].push_back(3 + rng() % 60);
  }
  const ForwardBatch b = PrefillBatch(prompts);
  std::vector<float> logits;
  ASSERT_TRUE(gpu->Forward(b, &logits).ok());
  for (int round = 0; round < 8; ++round) {
    std::vector<SequenceSampling> ss(kRows);
    std::vector<SampledToken> sampled(kRows);
    for (int s = 0; s < kRows; ++s) {
      SequenceSampling& p = ss[s];
      p.temperature = (s + round) % 3 == 0 ? 0.0f : uniform(0.3, 1.5);
      p.top_k = rng() % 2 ? 0 : 50;
      p.top_p = rng() % 2 ? 1.0f : 0.9f;
      p.repetition_penalty = uniform(0.5, 2.0);
      p.frequency_penalty = uniform(-2.0, 2.0);
      p.presence_penalty = uniform(-2.0, 2.0);
      p.min_p = rng() % 2 ? 0.0f : uniform(0.0, 0.3);
      p.logprobs = 1 + rng() % 20;
      p.seed = seed + s;
      p.step = round;
      p.prompt = prompts[s];
      p.output = outputs[s];
      p.sampled = &sampled[s];
    }
    std::vector<int32_t> tokens(kRows, 12345);
    ASSERT_TRUE(static_cast<ModelExecutor*>(gpu.get())
                    ->ForwardSample(b, ss, &tokens)
                    .ok());
    for (int s = 0; s < kRows; ++s) {
      SCOPED_TRACE(absl::StrCat("round ", round, " row ", s));
      const SequenceSampling& p = ss[s];
      const std::span<const float> row(logits.data() + s * kVocab, kVocab);
      std::vector<double> x(row.begin(), row.end());
      ApplyPenalties(
          {p.repetition_penalty, p.frequency_penalty, p.presence_penalty},
          prompts[s], outputs[s], &x);
      const bool greedy = p.temperature == 0.0f;
      const double t = greedy ? 1.0 : p.temperature;
      const std::vector<double> ref = LogSoftmax(x, t);
      const int32_t tok = tokens[s];
      ASSERT_GE(tok, 0);
      ASSERT_LT(tok, kVocab);
      EXPECT_EQ(sampled[s].token, tok);
      EXPECT_NEAR(sampled[s].logprob, ref[tok], 1e-4);
      const auto top = TopLogprobs(ref, p.logprobs);
      ASSERT_EQ(sampled[s].top.size(), top.size());
      for (size_t j = 0; j < top.size(); ++j) {
        const auto [id, lp] = sampled[s].top[j];
        EXPECT_NEAR(lp, ref[id], 1e-4) << j;
        // Ties: ids whose fp32 penalized logits round equal.
        if (id != top[j].first) {
          EXPECT_NEAR(ref[id], top[j].second, 1e-5);
        }
      }
      const double max_lp = top[0].second;
      if (greedy) {
        SamplingParams sp;
        sp.repetition_penalty = p.repetition_penalty;
        sp.frequency_penalty = p.frequency_penalty;
        sp.presence_penalty = p.presence_penalty;
        Sampler cpu(sp);
        auto want = cpu.SampleWithHistory(row, prompts[s], outputs[s]);
        ASSERT_TRUE(want.ok());
        if (tok != want->token) {
          EXPECT_NEAR(ref[tok], max_lp, 1e-5);
        }
      } else if (p.min_p > 0) {
        // min_p keeps p(tok) >= min_p x p(max) (fp32 at the boundary).
        EXPECT_GE(ref[tok] - max_lp, std::log(p.min_p) - 1e-4);
      }
    }
  }
}

// Prompt logprobs on the device (device_prompt_logprobs.h) in chunks of 8
// rows (max_logit_rows 8: 32 target rows make 4 chunks), in a batch that
// also samples with the device processors, against a float64 log-softmax of
// the same executor's all-token logits of that batch: fp32 logprobs within
// 1e-4, the reference's top ids (ties excepted); outputs poisoned first.
TEST(GpuExecutor, PromptLogprobsMatchAFloat64ReferenceOfTheDeviceLogits) {
  GpuModelExecutorOptions o;
  o.model_dir = Shared() + "/golden/models/llama-tiny-fp32";
  o.dtype = DType::kF32;
  o.kv_capacity_slots = 4096;
  o.max_tokens_per_step = 256;
  o.max_batch_size = 8;
  o.max_logit_rows = 8;
  o.max_context_len = 1024;
  auto gpu = GpuModelExecutor::Create(o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const uint32_t seed = std::random_device{}();
  std::printf("PromptLogprobs seed %u\n", seed);
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 13 + 8 * s; ++i) prompts[s].push_back(3 + rng() % 200);
  }
  ForwardBatch b = PrefillBatch(prompts);
  ForwardBatch all = b;
  all.return_all_logits = true;
  std::vector<float> logits;
  ASSERT_TRUE((*gpu)->Forward(all, &logits).ok());
  // Sequences 0 and 1 ask for prompt logprobs (0 and 5 alternatives) of
  // all but their last row; 1 also samples with logprobs and a penalty.
  const int kTop[2] = {0, 5};
  std::vector<std::vector<SampledToken>> out(2);
  std::vector<std::vector<int32_t>> targets(2);
  std::vector<SequenceSampling> ss(3);
  SampledToken sampled;
  for (int s = 0; s < 2; ++s) {
    targets[s].assign(prompts[s].begin() + 1, prompts[s].end());
    out[s].assign(targets[s].size(), SampledToken{-7, NAN, {{-7, NAN}}});
    ss[s].prompt_logprobs = kTop[s];
    ss[s].prompt_targets = targets[s];
    ss[s].prompt_logprobs_out = out[s].data();
  }
  ss[1].repetition_penalty = 1.3f;
  ss[1].logprobs = 2;
  ss[1].prompt = prompts[1];
  ss[1].sampled = &sampled;
  ss[2].temperature = 0.8f;
  ss[2].seed = seed;
  std::vector<int32_t> tokens(3, 12345);
  ASSERT_TRUE(static_cast<ModelExecutor*>(gpu->get())
                  ->ForwardSample(b, ss, &tokens)
                  .ok());
  for (int s = 0; s < 3; ++s) {
    EXPECT_GE(tokens[s], 0);
    EXPECT_LT(tokens[s], kVocab);
  }
  for (int s = 0; s < 2; ++s) {
    for (size_t i = 0; i < targets[s].size(); ++i) {
      SCOPED_TRACE(absl::StrCat("sequence ", s, " row ", i));
      const size_t row = b.qo_indptr[s] + i;
      const std::vector<double> x(logits.begin() + row * kVocab,
                                  logits.begin() + (row + 1) * kVocab);
      const std::vector<double> ref = LogSoftmax(x, 1.0);
      const SampledToken& got = out[s][i];
      EXPECT_EQ(got.token, targets[s][i]);
      EXPECT_NEAR(got.logprob, ref[targets[s][i]], 1e-4);
      const auto top = TopLogprobs(ref, kTop[s]);
      ASSERT_EQ(got.top.size(), top.size());
      for (size_t j = 0; j < top.size(); ++j) {
        const auto [id, lp] = got.top[j];
        EXPECT_NEAR(lp, ref[id], 1e-4) << j;
        if (id != top[j].first) {
          EXPECT_NEAR(ref[id], top[j].second, 1e-5);
        }
      }
    }
  }
}

// A small case for compute-sanitizer (racecheck instruments every shared
// memory access and is far too slow for the tests above): on the 2-layer
// bf16 checkpoint, with the tensor-core and the generic attention kernels,
// a 2-sequence prefill and 3 decode steps (the second captures the graph,
// the third replays it) through ForwardSample, one row greedy and one
// sampled (temperature, top-k, top-p), plus the logits path once.
// return_all_logits over more tokens than max_logit_rows: the logits are
// computed in chunks of max_logit_rows and must equal those of an executor
// whose logits buffer holds every row; the step's KV must land in its own
// slots (a following decode step gives the same logits). The row-index
// buffer once held only max_logit_rows entries, so 513 rows overwrote
// out_cache_loc and more failed with illegal memory accesses.
TEST(GpuExecutor, AllLogitsBeyondTheLogitRowBoundAreChunkedExactly) {
  const std::string shared = Shared();
  for (const auto& [model, dtype, tol] :
       {std::tuple{"llama-tiny-fp32", DType::kF32, 1e-4},
        std::tuple{"llama3-gqa-bf16", DType::kBF16, 2e-2}}) {
    const std::string dir = shared + "/golden/models/" + model;
    GpuModelExecutorOptions o;
    o.model_dir = dir;
    o.dtype = dtype;
    o.kv_capacity_slots = 4096;
    o.max_tokens_per_step = 1024;
    o.max_batch_size = 8;
    o.max_context_len = 2048;
    ASSERT_EQ(o.max_logit_rows, 512);  // the default under test
    auto chunked = GpuModelExecutor::Create(o);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    o.max_logit_rows = 1024;
    auto whole = GpuModelExecutor::Create(o);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (const int n : {513, 514, 1000, 1024}) {
      ForwardBatch b;
      for (int i = 0; i < n; ++i) {
        b.input_ids.push_back(3 + (11 * i) % (kVocab - 3));
        b.positions.push_back(i);
        b.out_cache_loc.push_back(2048 + i);
      }
      b.qo_indptr = {0, n};
      b.kv_indptr = {0, 0};
      b.return_all_logits = true;
      std::vector<float> a(7, NAN), w;
      ASSERT_TRUE((*chunked)->Forward(b, &a).ok()) << model << " n=" << n;
      ASSERT_TRUE((*whole)->Forward(b, &w).ok()) << model << " n=" << n;
      ASSERT_EQ(a.size(), size_t(n) * kVocab);
      const double d = RelL2(a, w);
      std::printf("all logits %-16s n=%4d: rel L2 chunked vs whole %.3g\n",
                  model, n, d);
      EXPECT_LE(d, tol) << model << " n=" << n;
      ForwardBatch dec;
      dec.is_decode = true;
      dec.input_ids = {5};
      dec.positions = {n};
      dec.out_cache_loc = {2048 + n};
      for (int i = 0; i <= n; ++i) dec.kv_indices.push_back(2048 + i);
      dec.qo_indptr = {0, 1};
      dec.kv_indptr = {0, n + 1};
      std::vector<float> da, dw;
      ASSERT_TRUE((*chunked)->Forward(dec, &da).ok());
      ASSERT_TRUE((*whole)->Forward(dec, &dw).ok());
      EXPECT_LE(RelL2(da, dw), tol) << model << " decode after n=" << n;
    }
  }
}

TEST(GpuExecutor, SanitizerSmallCase) {
  const char* dir = std::getenv("RADIXKV_TC_MODEL_DIR");
  ASSERT_NE(dir, nullptr) << "set RADIXKV_TC_MODEL_DIR";
  for (const bool tensor_cores : {true, false}) {
    auto e = MakeGpu(dir, DType::kBF16, true, tensor_cores);
    ASSERT_NE(e, nullptr);
    const int32_t V = e->config().vocab_size;
    const int lens[2] = {24, 17};
    ForwardBatch prefill;
    prefill.qo_indptr = {0};
    prefill.kv_indptr = {0, 0, 0};
    for (int s = 0; s < 2; ++s) {
      for (int i = 0; i < lens[s]; ++i) {
        prefill.input_ids.push_back(3 + (7 * i + 13 * s) % (V - 3));
        prefill.positions.push_back(i);
        prefill.out_cache_loc.push_back(s * 256 + i);
      }
      prefill.qo_indptr.push_back(
          static_cast<int32_t>(prefill.input_ids.size()));
    }
    std::vector<SequenceSampling> sampling(2);
    sampling[1].temperature = 0.8f;
    sampling[1].top_k = 20;
    sampling[1].top_p = 0.9f;
    sampling[1].seed = 5;
    std::vector<float> logits;
    ASSERT_TRUE(e->Forward(prefill, &logits).ok());
    std::vector<int32_t> tokens;
    ASSERT_TRUE(e->ForwardSample(prefill, sampling, &tokens).ok());
    ASSERT_EQ(tokens.size(), 2u);
    EXPECT_EQ(tokens[0], ArgMax(absl::MakeConstSpan(logits.data(), V)));
    for (int step = 0; step < 3; ++step) {
      ForwardBatch d;
      d.is_decode = true;
      d.qo_indptr = {0, 1, 2};
      d.kv_indptr = {0};
      for (int s = 0; s < 2; ++s) {
        const int pos = lens[s] + step;
        d.input_ids.push_back(tokens[s]);
        d.positions.push_back(pos);
        d.out_cache_loc.push_back(s * 256 + pos);
        for (int i = 0; i <= pos; ++i) d.kv_indices.push_back(s * 256 + i);
        d.kv_indptr.push_back(static_cast<int32_t>(d.kv_indices.size()));
      }
      sampling[1].step = step + 1;
      ASSERT_TRUE(e->ForwardSample(d, sampling, &tokens).ok());
      for (int32_t t : tokens) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, V);
      }
    }
    std::printf("sanitizer small case (%s): %d graphs\n",
                tensor_cores ? "tensor-core" : "generic", e->num_graphs());
    EXPECT_EQ(e->num_graphs(), 1);
    EXPECT_TRUE(e->last_step().graph_replayed);
  }
}

// ------------------------------------------ tensor-core attention path

TEST(GpuExecutor, TensorCoreAttentionMatchesGenericKernel) {
  const char* dir = std::getenv("RADIXKV_TC_MODEL_DIR");
  ASSERT_NE(dir, nullptr) << "set RADIXKV_TC_MODEL_DIR (make_random_checkpoint "
                             "--head_dim=64 ...)";
  auto tc = MakeGpu(dir, DType::kBF16, true, /*tensor_cores=*/true);
  auto generic = MakeGpu(dir, DType::kBF16, true, /*tensor_cores=*/false);
  auto f32 = MakeGpu(dir, DType::kF32, true);
  ASSERT_NE(tc, nullptr);
  ASSERT_NE(generic, nullptr);
  ASSERT_NE(f32, nullptr);
  ASSERT_TRUE(tc->uses_tensor_core_attention());
  ASSERT_FALSE(generic->uses_tensor_core_attention());
  const int32_t V = tc->config().vocab_size;
  const uint32_t seed = std::random_device{}();
  std::printf("TensorCore seed=%u\n", seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> pa(300), suffix(120);
  for (auto& t : pa) t = 3 + rng() % (V - 3);
  for (auto& t : suffix) t = 3 + rng() % (V - 3);
  // Random weights give near-flat logits: teacher-force every run on the
  // fp32 run's tokens so the logits stay comparable.
  auto c = RunScript(*f32, true, pa, suffix, 24);
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = RunScript(*tc, true, pa, suffix, 24, &*c);
  auto b = RunScript(*generic, true, pa, suffix, 24, &*c);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  double rel_gen = 0, rel_f32 = 0;
  for (size_t i = 0; i < a->logits.size(); ++i) {
    rel_gen = std::max(rel_gen, RelL2(a->logits[i], b->logits[i]));
    rel_f32 = std::max(rel_f32, RelL2(a->logits[i], c->logits[i]));
  }
  std::printf("tensor-core vs generic (bf16): rel_l2 %.3g; vs fp32: %.3g\n",
              rel_gen, rel_f32);
  EXPECT_LE(rel_gen, 1e-2);
  EXPECT_LE(rel_f32, 3e-2);
  // The weight-streaming small-batch GEMM (decode steps, M = 2 here) against
  // the vendor GEMM, same executor, same forced tokens.
  tc->set_small_batch_gemm_max_rows(0);
  auto d = RunScript(*tc, true, pa, suffix, 24, &*c);
  ASSERT_TRUE(d.ok()) << d.status();
  double rel_gemv = 0;
  for (size_t i = 0; i < a->logits.size(); ++i) {
    rel_gemv = std::max(rel_gemv, RelL2(a->logits[i], d->logits[i]));
  }
  std::printf("small-batch GEMM vs vendor GEMM (bf16): rel_l2 %.3g\n",
              rel_gemv);
  EXPECT_LE(rel_gemv, 5e-3);
}

// ------------------------------------------------------ GEMM autotuning

// Every tuned row count of this test is a power of two: a 16 x 32-token
// prefill (M = 512) and 16-sequence decode steps (M = 16, a graph after
// its first eager step), the LM head over 16 rows. Teacher-forced on the
// default arm's tokens; logits of each step against the default arm
// (relative L2 <= 5e-3: only summation orders differ) and against fp32.
TEST(GpuExecutor, GemmAutotuneMatchesDefaultGemm) {
  const char* dir = std::getenv("RADIXKV_TC_MODEL_DIR");
  ASSERT_NE(dir, nullptr) << "set RADIXKV_TC_MODEL_DIR";
  auto base = MakeGpu(dir, DType::kBF16);
  auto tuned = MakeGpu(dir, DType::kBF16);
  auto f32 = MakeGpu(dir, DType::kF32);
  ASSERT_NE(base, nullptr);
  ASSERT_NE(tuned, nullptr);
  ASSERT_NE(f32, nullptr);
  tuned->set_gemm_autotune(true);
  const int32_t V = base->config().vocab_size;
  const uint32_t seed = std::random_device{}();
  std::printf("GemmAutotune seed=%u\n", seed);
  std::mt19937 rng(seed);
  constexpr int kSeqs = 16, kLen = 32;
  std::vector<std::vector<int32_t>> prompts(kSeqs, std::vector<int32_t>(kLen));
  for (auto& p : prompts) {
    for (auto& t : p) t = 3 + rng() % (V - 3);
  }
  double rel_base = 0, rel_f32 = 0;
  auto compare = [&](const ForwardBatch& b) {
    std::vector<float> lb, lt, lf;
    ASSERT_TRUE(base->Forward(b, &lb).ok());
    ASSERT_TRUE(tuned->Forward(b, &lt).ok());
    ASSERT_TRUE(f32->Forward(b, &lf).ok());
    for (float v : lt) ASSERT_TRUE(std::isfinite(v));
    rel_base = std::max(rel_base, RelL2(lt, lb));
    rel_f32 = std::max(rel_f32, RelL2(lt, lf));
  };
  compare(PrefillBatch(prompts));
  for (int step = 0; step < 4; ++step) {
    compare(DecodeStepBatch(kSeqs, kLen + step, V, rng));
  }
  std::printf("GEMM autotune vs default (bf16): rel_l2 %.3g; vs fp32: %.3g\n",
              rel_base, rel_f32);
  std::printf("%s", tuned->gemm_tuning().c_str());
  EXPECT_FALSE(tuned->gemm_tuning().empty());
  EXPECT_TRUE(tuned->last_step().graph_replayed);
  EXPECT_LE(rel_base, 5e-3);
  EXPECT_LE(rel_f32, 3e-2);
}

// The RMSNorm fused into the weight-streaming GEMM's prologue (QKV,
// gate/up, LM head with its row index) gives the same bits as the separate
// RMSNorm kernel followed by the same GEMM: one and two rows (the default
// small_batch_gemm_max_rows), graphs and eager, bf16 and fp16.
TEST(GpuExecutor, FusedRmsNormGemmEqualsSeparateKernels) {
  const char* dir = std::getenv("RADIXKV_TC_MODEL_DIR");
  ASSERT_NE(dir, nullptr) << "set RADIXKV_TC_MODEL_DIR";
  const uint32_t seed = std::random_device{}();
  std::printf("FusedRmsNorm seed=%u\n", seed);
  std::mt19937 rng(seed);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool graphs : {true, false}) {
      auto fused = MakeGpu(dir, dtype, graphs);
      auto separate = MakeGpu(dir, dtype, graphs);
      ASSERT_NE(fused, nullptr);
      ASSERT_NE(separate, nullptr);
      separate->set_fuse_rms_norm(false);
      const int32_t V = fused->config().vocab_size;
      for (int seqs : {1, 2}) {
        std::vector<std::vector<int32_t>> prompts(seqs,
                                                  std::vector<int32_t>(24));
        for (auto& p : prompts) {
          for (auto& t : p) t = 3 + rng() % (V - 3);
        }
        // A prefill of `seqs` rows of logits (the LM head through the row
        // index), then decode steps of `seqs` rows (every fused GEMM).
        std::vector<float> lf, ls;
        ASSERT_TRUE(fused->Forward(PrefillBatch(prompts), &lf).ok());
        ASSERT_TRUE(separate->Forward(PrefillBatch(prompts), &ls).ok());
        ASSERT_EQ(lf, ls) << "prefill, " << seqs << " sequences";
        for (int step = 0; step < 3; ++step) {
          const ForwardBatch d = DecodeStepBatch(seqs, 24 + step, V, rng);
          ASSERT_TRUE(fused->Forward(d, &lf).ok());
          ASSERT_TRUE(separate->Forward(d, &ls).ok());
          for (float v : lf) ASSERT_TRUE(std::isfinite(v));
          ASSERT_EQ(lf, ls) << "decode step " << step << ", " << seqs
                            << " sequences, graphs " << graphs;
        }
      }
    }
  }
}

}  // namespace
}  // namespace radixkv::worker
