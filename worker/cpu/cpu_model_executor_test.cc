// CpuModelExecutor behaviour on the paged pool, on the golden checkpoints
// (shared/golden):
//   - prefix reuse: prefill(S[:P]) then extend(S[P:]) over the cached prefix
//     equals a one-shot prefill, for prefixes ending mid-page and on page
//     boundaries (page_size 16), with permuted non-contiguous pages, in one
//     ragged batch, and with a copy-on-write partial page (copy_ops);
//   - decode path: token-by-token paged decode (v1 and split-KV v2, all three
//     layouts) equals the one-shot prefill logits;
//   - bf16 KV storage stays within the README's bf16 tolerance;
//   - malformed batches are rejected before the pool is touched.
//
// Tolerance for reuse/decode equivalence: 1e-5. Both paths compute the same
// fp32 K/V; they differ only in summation order (the extend kernel's prefix
// stage vs extend stage tiling, split-KV partitions, GEMM row blocking), which
// moves logits of magnitude ~2.5 by a few 1e-7.
#include "worker/cpu/cpu_model_executor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/safetensors_reader.h"
#include "model/safetensors_test_writer.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"
#include "worker/offline_generation.h"
#include "worker/testing/golden_checkpoints.h"

namespace radixkv::worker {
namespace {

using Json = nlohmann::json;

constexpr int kVocab = testing::kGoldenVocab;
constexpr int32_t kPageSize = 16;
constexpr double kEquivalenceTol = 1e-5;

struct Golden {
  std::string shared;
  std::vector<int32_t> seq3;  // 300 tokens
  Json index;
};

Golden LoadGolden() {
  Golden g;
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  EXPECT_TRUE(shared.ok()) << shared.status();
  if (!shared.ok()) return g;
  g.shared = *shared;
  absl::StatusOr<Json> index =
      model::testing::ReadJsonFile(g.shared + "/golden/logits_index.json");
  EXPECT_TRUE(index.ok()) << index.status();
  if (!index.ok()) return g;
  g.index = *index;
  g.seq3 = g.index["sequences"][3]["ids"].get<std::vector<int32_t>>();
  return g;
}

std::unique_ptr<CpuModelExecutor> MakeExecutor(
    const std::string& dir, KvLayout layout = KvLayout::kBSHD,
    int32_t partition = 0, DType dtype = DType::kF32) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = 256 * kPageSize;
  o.page_size = kPageSize;
  o.kv_layout = layout;
  o.kv_dtype = dtype;
  o.decode_partition_size = partition;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// A sequence's page table: `num_pages` distinct pages drawn from a shuffled
// pool, so slots are non-contiguous and out of order.
class PageTable {
 public:
  explicit PageTable(std::vector<int64_t> pages) : pages_(std::move(pages)) {}
  int64_t Slot(int64_t pos) const {
    return pages_[pos / kPageSize] * kPageSize + pos % kPageSize;
  }
  int64_t page(int64_t i) const { return pages_[i]; }

 private:
  std::vector<int64_t> pages_;
};

class PageSource {
 public:
  explicit PageSource(uint32_t seed) : pages_(256) {
    std::iota(pages_.begin(), pages_.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(pages_.begin(), pages_.end(), rng);
  }
  PageTable Take(int n) {
    std::vector<int64_t> t(pages_.begin() + next_, pages_.begin() + next_ + n);
    next_ += n;
    return PageTable(std::move(t));
  }
  int64_t TakeOne() { return pages_[next_++]; }

 private:
  std::vector<int64_t> pages_;
  int next_ = 0;
};

// Appends an extend of ids[begin:end) for a sequence whose prefix
// ids[0:begin) is cached at table slots.
void AddExtend(ForwardBatch* b, const std::vector<int32_t>& ids, int begin,
               int end, const PageTable& table) {
  if (b->qo_indptr.empty()) {
    b->qo_indptr.push_back(0);
    b->kv_indptr.push_back(0);
  }
  for (int p = 0; p < begin; ++p) b->kv_indices.push_back(table.Slot(p));
  for (int p = begin; p < end; ++p) {
    b->input_ids.push_back(ids[p]);
    b->positions.push_back(p);
    b->out_cache_loc.push_back(table.Slot(p));
  }
  b->qo_indptr.push_back(static_cast<int32_t>(b->input_ids.size()));
  b->kv_indptr.push_back(static_cast<int32_t>(b->kv_indices.size()));
  b->return_all_logits = true;
}

std::vector<float> ForwardLogits(ModelExecutor& e, const ForwardBatch& b) {
  std::vector<float> logits;
  absl::Status s = e.Forward(b, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// One-shot prefill of ids[0:n) (no prefix) into ceil(n / kPageSize) pages
// taken from `pages`; logits of every position, [n, vocab]: the reference
// the paged, reused and decoded paths are compared with.
std::vector<float> OneShotLogits(ModelExecutor& e,
                                 const std::vector<int32_t>& ids, int n,
                                 PageSource& pages) {
  ForwardBatch b;
  AddExtend(&b, ids, 0, n, pages.Take((n + kPageSize - 1) / kPageSize));
  return ForwardLogits(e, b);
}

// max |a[i] - b[off + i]| over a.size() elements.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b,
                  size_t b_offset = 0) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(double(a[i]) - b[b_offset + i]));
  }
  return m;
}

std::vector<float> GoldenSeq3(const Golden& g, const std::string& model) {
  absl::StatusOr<std::vector<float>> v = model::testing::ReadF32File(
      absl::StrCat(g.shared, "/golden/logits/", model, "/seq3_len300.f32"),
      300 * kVocab);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

TEST(LlamaModelTest, PrefixReuseEqualsOneShotPrefill) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  const uint32_t seed = 20261129;
  std::printf("page permutation seed %u\n", seed);
  for (const char* model : testing::kGoldenModels) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(g.shared + "/golden/models/" + model);
    ASSERT_NE(e, nullptr);
    PageSource pages(seed);
    const int n = 300;
    const int pages_per_seq = (n + kPageSize - 1) / kPageSize;  // 19
    const std::vector<float> full = OneShotLogits(*e, g.seq3, n, pages);
    EXPECT_LE(MaxAbsDiff(full, GoldenSeq3(g, model)), 1e-3) << model;

    // 200 ends mid-page (12 pages + 8), 192 on a boundary, plus extremes.
    for (int split : {200, 192, 1, 16, 299}) {
      const PageTable table = pages.Take(pages_per_seq);
      ForwardBatch prefix;
      AddExtend(&prefix, g.seq3, 0, split, table);
      const std::vector<float> prefix_logits = ForwardLogits(*e, prefix);
      ForwardBatch extend;
      AddExtend(&extend, g.seq3, split, n, table);
      const std::vector<float> extend_logits = ForwardLogits(*e, extend);
      const double d_prefix = MaxAbsDiff(prefix_logits, full);
      const double d_extend =
          MaxAbsDiff(extend_logits, full, size_t{split} * kVocab);
      std::printf("%s split %3d: max diff prefix %.3g, extend %.3g\n", model,
                  split, d_prefix, d_extend);
      EXPECT_LE(d_prefix, kEquivalenceTol) << model << " split " << split;
      EXPECT_LE(d_extend, kEquivalenceTol) << model << " split " << split;
    }
  }
}

// Three sequences with different cached prefixes (0, mid-page, boundary) in
// ONE ragged extend batch give the same logits as one-shot prefill.
TEST(LlamaModelTest, RaggedExtendBatchEqualsOneShot) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  std::unique_ptr<CpuModelExecutor> e =
      MakeExecutor(g.shared + "/golden/models/llama3-gqa-bf16");
  ASSERT_NE(e, nullptr);
  PageSource pages(7);
  const std::vector<float> full = OneShotLogits(*e, g.seq3, 300, pages);

  const int splits[] = {0, 200, 192};
  const int ends[] = {40, 260, 300};
  std::vector<PageTable> tables;
  for (int i = 0; i < 3; ++i) {
    tables.push_back(pages.Take(19));
    if (splits[i] > 0) {
      ForwardBatch prefix;
      AddExtend(&prefix, g.seq3, 0, splits[i], tables[i]);
      ForwardLogits(*e, prefix);
    }
  }
  ForwardBatch batch;
  for (int i = 0; i < 3; ++i)
    AddExtend(&batch, g.seq3, splits[i], ends[i], tables[i]);
  const std::vector<float> out = ForwardLogits(*e, batch);
  size_t row = 0;
  for (int i = 0; i < 3; ++i) {
    const int len = ends[i] - splits[i];
    std::vector<float> rows(out.begin() + row * kVocab,
                            out.begin() + (row + len) * kVocab);
    EXPECT_LE(MaxAbsDiff(rows, full, size_t(splits[i]) * kVocab),
              kEquivalenceTol)
        << "sequence " << i;
    row += len;
  }
  // Without return_all_logits: one row per sequence, its last token.
  batch.return_all_logits = false;
  std::vector<float> last = ForwardLogits(*e, batch);
  ASSERT_EQ(last.size(), 3u * kVocab);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> r(last.begin() + i * kVocab,
                         last.begin() + (i + 1) * kVocab);
    EXPECT_LE(MaxAbsDiff(r, full, size_t(ends[i] - 1) * kVocab),
              kEquivalenceTol);
  }
}

// Token-granular reuse with paged storage: sequence B reuses A's first 200
// tokens: the 12 full pages by reference, the partial 13th page (8 tokens)
// through a copy-on-write copy op into B's own page, then extends S[200:300]
// into that page's free offsets. B equals one-shot, and A's pages are intact
// (A's own continuation still matches).
TEST(LlamaModelTest, CopyOnWritePartialPageReuse) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  for (const char* model : testing::kGoldenModels) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(g.shared + "/golden/models/" + model);
    ASSERT_NE(e, nullptr);
    PageSource pages(11);
    const std::vector<float> full = OneShotLogits(*e, g.seq3, 300, pages);

    const PageTable a = pages.Take(19);
    ForwardBatch a_prefill;
    AddExtend(&a_prefill, g.seq3, 0, 200, a);
    ForwardLogits(*e, a_prefill);

    std::vector<int64_t> b_pages;
    for (int i = 0; i < 12; ++i) b_pages.push_back(a.page(i));  // shared
    for (int i = 12; i < 19; ++i) b_pages.push_back(pages.TakeOne());
    const PageTable b(b_pages);
    ForwardBatch b_extend;
    AddExtend(&b_extend, g.seq3, 200, 300, b);
    b_extend.copy_ops.push_back(PageCopy{a.page(12), b.page(12), 8});
    const std::vector<float> b_logits = ForwardLogits(*e, b_extend);
    EXPECT_LE(MaxAbsDiff(b_logits, full, 200 * kVocab), kEquivalenceTol)
        << model;

    ForwardBatch a_extend;
    AddExtend(&a_extend, g.seq3, 200, 260, a);
    const std::vector<float> a_logits = ForwardLogits(*e, a_extend);
    EXPECT_LE(MaxAbsDiff(a_logits, full, 200 * kVocab), kEquivalenceTol)
        << model;
  }
}

// Token-by-token paged decode reproduces the one-shot prefill logits, for
// decode v1 and split-KV v2 (partitions of 32 and 48 tokens, so the last
// partition is partial) and every pool layout.
TEST(LlamaModelTest, DecodePathEqualsPrefill) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  struct Variant {
    const char* model;
    KvLayout layout;
    int32_t partition;
    int steps;
  };
  const Variant variants[] = {
      {"llama-tiny-fp32", KvLayout::kBSHD, 0, 300},
      {"llama3-gqa-bf16", KvLayout::kBSHD, 32, 300},
      {"qwen2-tiny-fp32", KvLayout::kBSHD, 48, 300},
      {"llama3-gqa-bf16", KvLayout::kBHSD, 0, 100},
      {"llama3-gqa-bf16", KvLayout::kVllm, 32, 100},
  };
  for (const Variant& v : variants) {
    std::unique_ptr<CpuModelExecutor> e = MakeExecutor(
        g.shared + "/golden/models/" + v.model, v.layout, v.partition);
    ASSERT_NE(e, nullptr);
    PageSource pages(3);
    const std::vector<float> full = OneShotLogits(*e, g.seq3, 300, pages);

    const PageTable t = pages.Take(19);
    ForwardBatch first;
    AddExtend(&first, g.seq3, 0, 1, t);
    double worst = MaxAbsDiff(ForwardLogits(*e, first), full);
    for (int p = 1; p < v.steps; ++p) {
      ForwardBatch d;
      d.is_decode = true;
      d.input_ids = {g.seq3[p]};
      d.positions = {p};
      d.out_cache_loc = {t.Slot(p)};
      for (int j = 0; j <= p; ++j) d.kv_indices.push_back(t.Slot(j));
      d.qo_indptr = {0, 1};
      d.kv_indptr = {0, p + 1};
      worst = std::max(
          worst, MaxAbsDiff(ForwardLogits(*e, d), full, size_t(p) * kVocab));
    }
    std::printf("%s layout %s partition %d: decode vs prefill max diff %.3g\n",
                v.model, KvLayoutName(v.layout), v.partition, worst);
    EXPECT_LE(worst, kEquivalenceTol)
        << v.model << " " << KvLayoutName(v.layout) << " " << v.partition;
  }
}

// bf16 / fp16 KV storage (fp32 compute): within the README's bf16 rule
// (relative L2 <= 2e-2, max abs <= 0.1) against the golden, decode included.
TEST(LlamaModelTest, HalfPrecisionKvPoolWithinBf16Tolerance) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const char* model : testing::kGoldenModels) {
      std::unique_ptr<CpuModelExecutor> e = MakeExecutor(
          g.shared + "/golden/models/" + model, KvLayout::kBSHD, 0, dtype);
      ASSERT_NE(e, nullptr);
      const std::vector<float> golden = GoldenSeq3(g, model);
      PageSource pages(5);
      const PageTable t = pages.Take(19);
      ForwardBatch prefix;
      AddExtend(&prefix, g.seq3, 0, 250, t);
      std::vector<float> got = ForwardLogits(*e, prefix);
      for (int p = 250; p < 300; ++p) {
        ForwardBatch d;
        d.is_decode = true;
        d.input_ids = {g.seq3[p]};
        d.positions = {p};
        d.out_cache_loc = {t.Slot(p)};
        for (int j = 0; j <= p; ++j) d.kv_indices.push_back(t.Slot(j));
        d.qo_indptr = {0, 1};
        d.kv_indptr = {0, p + 1};
        std::vector<float> row = ForwardLogits(*e, d);
        got.insert(got.end(), row.begin(), row.end());
      }
      ASSERT_EQ(got.size(), golden.size());
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - golden[i]) * (double(got[i]) - golden[i]);
        den += double(golden[i]) * golden[i];
      }
      const double rel_l2 = std::sqrt(num / den);
      const double max_abs = MaxAbsDiff(got, golden);
      std::printf("%s KV %s: rel L2 %.3g, max abs %.3g\n", model,
                  DTypeName(dtype), rel_l2, max_abs);
      EXPECT_LE(rel_l2, 2e-2);
      EXPECT_LE(max_abs, 0.1);
      EXPECT_GT(max_abs, 0.0);  // the pool really stored half precision
    }
  }
}

// Every malformed batch is INVALID_ARGUMENT and leaves the pool untouched.
TEST(LlamaModelTest, RejectsMalformedBatchesWithoutWriting) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.shared.empty());
  std::unique_ptr<CpuModelExecutor> e =
      MakeExecutor(g.shared + "/golden/models/llama-tiny-fp32");
  ASSERT_NE(e, nullptr);
  ForwardBatch good;
  good.input_ids = {5, 6, 7};
  good.positions = {0, 1, 2};
  good.out_cache_loc = {32, 33, 34};
  good.qo_indptr = {0, 3};
  good.kv_indptr = {0, 0};
  std::vector<float> logits;
  ASSERT_TRUE(e->Forward(good, &logits).ok());
  ASSERT_EQ(logits.size(), size_t{kVocab});

  KvPool& pool = e->kv_pool();
  const size_t layer_bytes = pool.geometry().BytesPerLayer();
  auto snapshot = [&] {
    std::string s;
    for (int l = 0; l < pool.num_layers(); ++l) {
      s.append(static_cast<const char*>(pool.k_data(l)), layer_bytes);
      s.append(static_cast<const char*>(pool.v_data(l)), layer_bytes);
    }
    return s;
  };
  const std::string before = snapshot();
  const int64_t cap = e->capacity_slots();
  std::vector<std::pair<std::string, ForwardBatch>> bad;
  auto with = [&](const std::string& name, auto edit) {
    ForwardBatch b = good;
    b.out_cache_loc = {40, 41, 42};  // would overwrite fresh slots
    edit(b);
    bad.emplace_back(name, b);
  };
  with("empty", [](ForwardBatch& b) { b = ForwardBatch(); });
  with("token id", [](ForwardBatch& b) { b.input_ids[1] = kVocab; });
  with("negative token", [](ForwardBatch& b) { b.input_ids[0] = -1; });
  with("positions size", [](ForwardBatch& b) { b.positions.pop_back(); });
  with("negative position", [](ForwardBatch& b) { b.positions[2] = -3; });
  with("out_cache_loc range",
       [&](ForwardBatch& b) { b.out_cache_loc[2] = cap; });
  with("qo_indptr end", [](ForwardBatch& b) { b.qo_indptr = {0, 2}; });
  with("qo_indptr start", [](ForwardBatch& b) { b.qo_indptr = {1, 3}; });
  with("kv_indptr size", [](ForwardBatch& b) { b.kv_indptr = {0}; });
  with("kv_indices count", [](ForwardBatch& b) { b.kv_indptr = {0, 2}; });
  with("kv slot range", [&](ForwardBatch& b) {
    b.kv_indptr = {0, 1};
    b.kv_indices = {cap + 5};
  });
  with("empty sequence", [](ForwardBatch& b) {
    b.qo_indptr = {0, 0, 3};
    b.kv_indptr = {0, 0, 0};
  });
  with("decode two tokens", [](ForwardBatch& b) {
    b.is_decode = true;
    b.kv_indptr = {0, 3};
    b.kv_indices = {40, 41, 42};
  });
  with("decode slot mismatch", [](ForwardBatch& b) {
    b.is_decode = true;
    b.input_ids = {5};
    b.positions = {3};
    b.out_cache_loc = {50};
    b.qo_indptr = {0, 1};
    b.kv_indptr = {0, 2};
    b.kv_indices = {32, 33};
  });
  with("copy op page range", [&](ForwardBatch& b) {
    b.copy_ops = {PageCopy{0, cap / kPageSize, 4}};
  });
  with("copy op tokens", [](ForwardBatch& b) {
    b.copy_ops = {PageCopy{2, 3, kPageSize + 1}};
  });
  for (const auto& [name, b] : bad) {
    absl::Status s = e->Forward(b, &logits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << name << ": " << s;
  }
  EXPECT_TRUE(before == snapshot()) << "a rejected batch wrote the pool";
}

// Sampling on the embedded model: a seed fixes the tokens, independent of
// which other requests share the batch; another seed changes them; top_k = 1
// at temperature 1 is greedy.
TEST(LlamaModelTest, SeededSamplingIsDeterministicAndTopK1IsGreedy) {
  absl::StatusOr<std::string> dir = model::testing::EmbeddedModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::unique_ptr<CpuModelExecutor> e = MakeExecutor(*dir);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> eos = e->config().eos_token_ids;
  // "[BOS] The license grants you the freedom to"
  const std::vector<int32_t> prompt = {1,   303, 387, 378, 343, 292, 377,
                                       406, 382, 291, 379, 385, 377, 405,
                                       284, 272, 297, 271, 277, 336, 322};
  auto request = [&](float temperature, int32_t top_k, float top_p,
                     uint64_t seed) {
    OfflineRequest r;
    r.prompt_ids = prompt;
    r.params.temperature = temperature;
    r.params.top_k = top_k;
    r.params.top_p = top_p;
    r.params.seed = seed;
    r.params.max_new_tokens = 40;
    r.params.ignore_eos = true;
    return r;
  };
  auto generate = [&](const std::vector<OfflineRequest>& rs) {
    absl::StatusOr<std::vector<OfflineResult>> out =
        GenerateOffline(*e, rs, eos);
    EXPECT_TRUE(out.ok()) << out.status();
    std::vector<std::vector<int32_t>> ids;
    if (out.ok()) {
      for (const OfflineResult& r : *out) ids.push_back(r.output_ids);
    }
    return ids;
  };
  const OfflineRequest sampled = request(1.2f, 0, 0.98f, 7);
  const std::vector<int32_t> alone = generate({sampled})[0];
  ASSERT_EQ(alone.size(), 40u);
  EXPECT_EQ(generate({sampled})[0], alone);
  // Same request in the middle of a batch with different neighbours.
  const std::vector<std::vector<int32_t>> batch = generate(
      {request(0.7f, 20, 1.0f, 1), sampled, request(1.0f, 0, 0.9f, 99)});
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[1], alone);
  EXPECT_NE(generate({request(1.2f, 0, 0.98f, 8)})[0], alone);
  // Greedy vs top_k = 1.
  const std::vector<int32_t> greedy = generate({request(0, 0, 1, 0)})[0];
  EXPECT_EQ(generate({request(1.0f, 1, 1.0f, 123)})[0], greedy);
  EXPECT_NE(greedy, alone);  // temperature 1.2 really sampled
}

// Writes a copy of the golden llama3-gqa-bf16 checkpoint into `dir`: the
// tensors spread over 3 shards with model.safetensors.index.json, config.json
// rewritten in the transformers-4 form (rope_theta + rope_scaling,
// torch_dtype). `skip` drops one tensor; `reshape` declares one tensor with a
// wrong shape.
void WriteShardedLlama3(const Golden& g, const std::string& dir,
                        const std::string& skip = "",
                        const std::string& reshape = "") {
  ::mkdir(dir.c_str(), 0755);
  const std::string src = g.shared + "/golden/models/llama3-gqa-bf16";
  absl::StatusOr<std::unique_ptr<model::SafetensorsReader>> r =
      model::SafetensorsReader::Open(src);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::vector<model::testing::RawTensor>> shards(3);
  Json index = {{"metadata", Json::object()}, {"weight_map", Json::object()}};
  int i = 0;
  for (const std::string& name : (*r)->TensorNames()) {
    if (name == skip) continue;
    const model::SafetensorsTensor* t = *(*r)->Find(name);
    model::testing::RawTensor raw{
        name, t->dtype_name, t->shape,
        std::string(reinterpret_cast<const char*>(t->data), t->num_bytes)};
    if (name == reshape) std::swap(raw.shape[0], raw.shape[1]);
    const std::string file =
        absl::StrCat("model-0000", i % 3 + 1, "-of-00003.safetensors");
    index["weight_map"][name] = file;
    shards[i % 3].push_back(raw);
    ++i;
  }
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(
        model::testing::WriteSafetensors(
            absl::StrCat(dir, "/model-0000", s + 1, "-of-00003.safetensors"),
            shards[s])
            .ok());
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  absl::StatusOr<Json> config =
      model::testing::ReadJsonFile(src + "/config.json");
  ASSERT_TRUE(config.ok());
  Json c = *config;
  Json rope = c["rope_parameters"];
  c.erase("rope_parameters");
  c.erase("dtype");
  c["torch_dtype"] = "bfloat16";
  c["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  c["rope_scaling"] = rope;
  std::ofstream(dir + "/config.json") << c.dump(2);
}

std::string TestTmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t != nullptr ? t : "/tmp", "/", name, "_", ::getpid());
}

// A sharded checkpoint with a transformers-4 config loads to exactly the same
// model as the single-file transformers-5 original.
TEST(LlamaModelTest, ShardedCheckpointWithTransformers4Config) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.seq3.empty());
  const std::string dir = TestTmpDir("sharded");
  WriteShardedLlama3(g, dir);
  std::unique_ptr<CpuModelExecutor> sharded = MakeExecutor(dir);
  std::unique_ptr<CpuModelExecutor> original =
      MakeExecutor(g.shared + "/golden/models/llama3-gqa-bf16");
  ASSERT_NE(sharded, nullptr);
  ASSERT_NE(original, nullptr);
  EXPECT_EQ(sharded->config().rope.type, model::RopeType::kLlama3);
  EXPECT_EQ(sharded->config().dtype, "bfloat16");
  PageSource pages(1);
  ForwardBatch b;
  AddExtend(&b, g.seq3, 0, 64, pages.Take(4));
  const std::vector<float> a = ForwardLogits(*sharded, b);
  const std::vector<float> o = ForwardLogits(*original, b);
  ASSERT_EQ(a.size(), 64u * kVocab);
  EXPECT_EQ(a, o);
}

// Missing and mis-shaped tensors fail Create with the tensor's name.
TEST(LlamaModelTest, MissingOrMisshapedTensorIsAClearError) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.shared.empty());
  CpuModelExecutorOptions o;
  o.kv_capacity_slots = 64;
  o.model_dir = TestTmpDir("missing");
  WriteShardedLlama3(g, o.model_dir, "model.layers.1.mlp.up_proj.weight");
  absl::Status s = CpuModelExecutor::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("model.layers.1.mlp.up_proj.weight"),
            std::string::npos)
      << s;
  o.model_dir = TestTmpDir("misshaped");
  WriteShardedLlama3(g, o.model_dir, "",
                     "model.layers.2.self_attn.k_proj.weight");
  s = CpuModelExecutor::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("model.layers.2.self_attn.k_proj.weight"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("[256, 64]"), std::string::npos) << s;
}

TEST(LlamaModelTest, CreateErrors) {
  CpuModelExecutorOptions o;
  o.model_dir = "/nonexistent-model";
  EXPECT_EQ(CpuModelExecutor::Create(o).status().code(),
            absl::StatusCode::kNotFound);
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.shared.empty());
  o.model_dir = g.shared + "/golden/models/llama-tiny-fp32";
  o.page_size = 3;  // not a power of two
  EXPECT_EQ(CpuModelExecutor::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.page_size = 16;
  o.kv_capacity_slots = 100;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->capacity_slots(), 112);  // 7 pages
  EXPECT_EQ((*e)->page_size(), 16);
  EXPECT_EQ((*e)->device(), "cpu");
}

}  // namespace
}  // namespace radixkv::worker
