// Device validation of the GPU kernels (gpu_attention.h) against float64
// references computed on the host, on fresh random inputs every run (the seed
// is printed; --seed=N replays), outputs and workspaces poisoned with NaN
// first. Needs a GPU: built by Bazel (CI builds it, never runs it) and run by
// run_device_suite.sh on the GPU machine (docs/development.md "GPU runs").
// Linked three times: with the serving library (gpu_attention_device_test),
// with the persistent wgmma kernel's library (_persistent) and with the
// negative control's wrong wgmma V descriptor (_vdesc_swap, whose extend
// cases must fail).
//
// Covers every kernel (decode v1/v2 + combine, extend, reshape_and_cache,
// copy_blocks; bf16/fp16; head_dim 64/128/256; page_size 1/16/32/64;
// layouts bshd/bhsd/vllm; GQA groups 1..16 and a chunked 32) on both kernel
// paths (tensor core, portable), plus the hard cases: element offsets past
// 2^31 with the accessed pages at the end of the pool, page ids > 65,535, 33
// sequences on a random non-contiguous block table, a 0-length sequence in a
// decode batch, and split-KV whose last partition holds one token.
//
// Usage: gpu_attention_device_test [--seed=N] [--quick] [--filter=A,B,..]
// Exit status 0 iff every case passed. Prints one table row per case.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "worker/kernels/hip/gpu_attention.h"
#include "worker/kernels/hip/gpu_test_pool.h"
#include "worker/kv_cache_layout.h"
// clang-format on

namespace radixkv::worker::gpu {
namespace {

using testing::DeviceBuffer;
using testing::FromBits;
using testing::HashElem;
using testing::ToBits;

// ----------------------------------------------------------------- support

struct Options {
  uint64_t seed = 0;
  bool quick = false;
  std::string filter;
};

struct Result {
  std::string name;
  bool pass = false;
  double rel_l2 = 0.0;
  double max_abs = 0.0;
  double lse_err = 0.0;
  std::string note;
};

std::vector<Result> g_results;

// Prints one finished case (line-buffered, so a timeout keeps the progress).
void PrintResult(const Result& r) {
  std::printf("%-78s %-5s %-10.3g %-10.3g %-10.3g %s\n", r.name.c_str(),
              r.pass ? "PASS" : "FAIL", r.rel_l2, r.max_abs, r.lse_err,
              r.note.c_str());
}

void AddResult(const Result& r) {
  PrintResult(r);
  g_results.push_back(r);
}

void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  const int threads =
      std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) {
    RADIXKV_CHECK_HIP(hipMemcpy(b.get(), v.data(), v.size() * sizeof(T),
                                hipMemcpyHostToDevice));
  }
  return b;
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n > 0) {
    RADIXKV_CHECK_HIP(
        hipMemcpy(v.data(), b.get(), n * sizeof(T), hipMemcpyDeviceToHost));
  }
  return v;
}

DeviceBuffer PoisonedBuffer(size_t bytes) {
  DeviceBuffer b(std::max<size_t>(bytes, 16));
  RADIXKV_CHECK_HIP(hipMemset(b.get(), 0xff, b.bytes()));  // NaN everywhere
  return b;
}

struct PoolSpec {
  int64_t num_pages = 64;
  int32_t page_size = 16;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 128;
  KvLayout layout = KvLayout::kBSHD;
  bool bf16 = true;
};

struct DevicePool {
  GpuKvCache cache;
  DeviceBuffer k, v;
  uint64_t seed_k = 0, seed_v = 0;
  bool bf16 = true;

  float K(int64_t slot, int32_t h, int32_t d) const {
    return HashElem(seed_k, cache.geometry.KOffset(slot, h, d), bf16);
  }
  float V(int64_t slot, int32_t h, int32_t d) const {
    return HashElem(seed_v, cache.geometry.VOffset(slot, h, d), bf16);
  }
};

DevicePool MakePool(const PoolSpec& s, std::mt19937_64& rng) {
  DevicePool p;
  KvCacheGeometry& g = p.cache.geometry;
  g.num_pages = s.num_pages;
  g.page_size = s.page_size;
  g.num_kv_heads = s.num_kv_heads;
  g.head_dim = s.head_dim;
  g.elem_bytes = 2;
  g.layout = s.layout;
  p.cache.dtype = s.bf16 ? DType::kBF16 : DType::kF16;
  p.bf16 = s.bf16;
  const int64_t n = g.ElementsPerLayer();
  p.k = DeviceBuffer(n * 2);
  p.v = DeviceBuffer(n * 2);
  p.seed_k = rng();
  p.seed_v = rng();
  testing::HashFill(p.k.get(), n, p.seed_k, s.bf16);
  testing::HashFill(p.v.get(), n, p.seed_v, s.bf16);
  p.cache.k = p.k.get();
  p.cache.v = p.v.get();
  return p;
}

// Slots for sequences of the given lengths on a random, non-contiguous block
// table: distinct pages drawn from [page_lo, num_pages), shared across
// sequences (no page used twice).
std::vector<int64_t> RandomSlots(const std::vector<int32_t>& lens,
                                 int64_t num_pages, int32_t page_size,
                                 int64_t page_lo, std::mt19937_64& rng,
                                 std::vector<int32_t>* indptr) {
  std::unordered_set<int64_t> used;
  std::vector<int64_t> slots;
  indptr->assign(1, 0);
  std::uniform_int_distribution<int64_t> pick(page_lo, num_pages - 1);
  for (int32_t len : lens) {
    int64_t page = -1;
    for (int32_t t = 0; t < len; ++t) {
      if (t % page_size == 0) {
        do {
          page = pick(rng);
        } while (used.count(page));
        used.insert(page);
      }
      slots.push_back(page * page_size + t % page_size);
    }
    indptr->push_back(static_cast<int32_t>(slots.size()));
  }
  return slots;
}

std::vector<uint16_t> RandomBits(size_t n, bool bf16, std::mt19937_64& rng,
                                 std::vector<float>* values) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> bits(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = ToBits(u(rng), bf16);
    (*values)[i] = FromBits(bits[i], bf16);
  }
  return bits;
}

// Compares kernel output (16-bit) and lse with the float64 reference.
// Rows with ref_lse == -inf must be exactly 0 with lse -inf.
void Compare(Result* r, const std::vector<uint16_t>& out_bits, bool bf16,
             const std::vector<double>& ref, const std::vector<float>& lse,
             const std::vector<double>& ref_lse, int32_t head_dim,
             bool check_lse) {
  double num = 0.0, den = 0.0, max_abs = 0.0, lse_err = 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = FromBits(out_bits[i], bf16);
    if (!std::isfinite(o)) {
      ++bad;
      continue;
    }
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
    max_abs = std::max(max_abs, std::fabs(o - ref[i]));
  }
  int64_t bad_lse = 0, bad_empty = 0;
  for (size_t row = 0; row < ref_lse.size(); ++row) {
    if (ref_lse[row] == -INFINITY) {
      for (int32_t d = 0; d < head_dim; ++d) {
        if (FromBits(out_bits[row * head_dim + d], bf16) != 0.0f) ++bad_empty;
      }
      if (check_lse && lse[row] != -INFINITY) ++bad_lse;
      continue;
    }
    if (check_lse) {
      if (!std::isfinite(lse[row])) {
        ++bad_lse;
      } else {
        lse_err = std::max(lse_err, std::fabs(lse[row] - ref_lse[row]));
      }
    }
  }
  r->rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  r->max_abs = max_abs;
  r->lse_err = lse_err;
  const double tol = bf16 ? 1e-2 : 2e-3;
  r->pass = bad == 0 && bad_lse == 0 && bad_empty == 0 && r->rel_l2 < tol &&
            lse_err < 2e-3;
  if (bad)
    r->note += "non-finite/unwritten outputs=" + std::to_string(bad) + " ";
  if (bad_lse) r->note += "bad lse=" + std::to_string(bad_lse) + " ";
  if (bad_empty)
    r->note += "empty rows not 0=" + std::to_string(bad_empty) + " ";
}

const char* PathName(KernelPath p) {
  return p == KernelPath::kPortable ? "portable" : "mma";
}

// ------------------------------------------------------------------ decode

struct DecodeCase {
  std::string name;
  PoolSpec pool;
  int32_t num_q_heads = 8;
  std::vector<int32_t> lens;
  int32_t partition_size = -1;
  KernelPath path = KernelPath::kAuto;
  int64_t page_lo = 0;  // pages are drawn from [page_lo, num_pages)
  // Decode calls on the same workspace (outputs re-poisoned in between):
  // every run must match the reference and the first run bit for bit (the
  // fused combine's counters must be back at 0 after each launch).
  int32_t runs = 1;
  int32_t window_left = -1;  // sliding window: the last w + 1 tokens
};

void RunDecode(const DecodeCase& c, std::mt19937_64& rng) {
  Result r;
  r.name = c.name;
  DevicePool pool = MakePool(c.pool, rng);
  const KvCacheGeometry& g = pool.cache.geometry;
  const int32_t B = static_cast<int32_t>(c.lens.size());
  const int32_t hq = c.num_q_heads, D = g.head_dim;
  const int32_t group = hq / g.num_kv_heads;
  std::vector<int32_t> indptr;
  std::vector<int64_t> slots =
      RandomSlots(c.lens, g.num_pages, g.page_size, c.page_lo, rng, &indptr);
  std::vector<float> qf;
  std::vector<uint16_t> qbits =
      RandomBits(static_cast<size_t>(B) * hq * D, c.pool.bf16, rng, &qf);
  const int32_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
  DeviceBuffer d_q = Upload(qbits), d_indptr = Upload(indptr),
               d_indices = Upload(slots);
  DeviceBuffer d_out = PoisonedBuffer(static_cast<size_t>(B) * hq * D * 2);
  DeviceBuffer d_lse = PoisonedBuffer(static_cast<size_t>(B) * hq * 4);
  int32_t ps = c.partition_size;
  if (ps < 0) ps = ChooseDecodePartitionSize(B, g.num_kv_heads, hq, max_len);
  const int32_t t0 = c.window_left;  // reference: keys from n - 1 - w on
  const size_t ws_bytes = DecodeWorkspaceBytes(B, hq, D, max_len, ps);
  DeviceBuffer d_ws = PoisonedBuffer(ws_bytes);
  // The counter region is zero-filled once, as gpu_attention.h requires; the
  // partials stay poisoned (an unwritten partial that is read shows as NaN).
  if (ws_bytes >= kDecodeCounterBytes) {
    RADIXKV_CHECK_HIP(hipMemset(d_ws.get(), 0, kDecodeCounterBytes));
  }
  GpuDecodeArgs a;
  a.q = d_q.get();
  a.kv_indptr = d_indptr.as<int32_t>();
  a.kv_indices = d_indices.as<int64_t>();
  a.batch_size = B;
  a.max_seq_len = max_len;
  a.num_q_heads = hq;
  a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.partition_size = ps;
  a.window_left = c.window_left;
  a.out = d_out.get();
  a.lse = d_lse.as<float>();
  a.workspace = d_ws.get();
  a.workspace_bytes = ws_bytes;
  a.path = c.path;
  std::vector<std::vector<uint16_t>> outs;
  std::vector<std::vector<float>> lses;
  for (int32_t run = 0; run < c.runs; ++run) {
    if (run > 0) {
      RADIXKV_CHECK_HIP(hipMemset(d_out.get(), 0xff, d_out.bytes()));
      RADIXKV_CHECK_HIP(hipMemset(d_lse.get(), 0xff, d_lse.bytes()));
    }
    absl::Status st = Decode(pool.cache, a, nullptr);
    RADIXKV_CHECK_HIP(hipDeviceSynchronize());
    if (!st.ok()) {
      r.note = st.ToString();
      AddResult(r);
      return;
    }
    outs.push_back(Download<uint16_t>(d_out, qbits.size()));
    lses.push_back(Download<float>(d_lse, static_cast<size_t>(B) * hq));
  }
  const std::vector<uint16_t>& out = outs[0];
  const std::vector<float>& lse = lses[0];

  std::vector<double> ref(qbits.size()), ref_lse(static_cast<size_t>(B) * hq);
  // Per (sequence, kv head): gather the context's K/V once, then every query
  // head of the group.
  ParallelFor(static_cast<int64_t>(B) * g.num_kv_heads, [&](int64_t bk) {
    const int32_t b = static_cast<int32_t>(bk / g.num_kv_heads);
    const int32_t kvh = static_cast<int32_t>(bk % g.num_kv_heads);
    const int32_t n = indptr[b + 1] - indptr[b];
    std::vector<double> kd(static_cast<size_t>(n) * D), vd(kd.size());
    for (int32_t t = 0; t < n; ++t) {
      const int64_t slot = slots[indptr[b] + t];
      for (int32_t d = 0; d < D; ++d) {
        kd[static_cast<size_t>(t) * D + d] = pool.K(slot, kvh, d);
        vd[static_cast<size_t>(t) * D + d] = pool.V(slot, kvh, d);
      }
    }
    std::vector<double> s(n);
    for (int32_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int64_t bh = static_cast<int64_t>(b) * hq + h;
      double* o = &ref[bh * D];
      if (n == 0) {
        ref_lse[bh] = -INFINITY;
        continue;
      }
      double m = -INFINITY;
      const int32_t first = t0 >= 0 ? std::max(0, n - 1 - t0) : 0;
      for (int32_t t = first; t < n; ++t) {
        double dot = 0.0;
        for (int32_t d = 0; d < D; ++d) {
          dot += qf[bh * D + d] * kd[static_cast<size_t>(t) * D + d];
        }
        s[t] = dot * a.sm_scale;
        m = std::max(m, s[t]);
      }
      double l = 0.0;
      for (int32_t t = first; t < n; ++t) {
        s[t] = std::exp(s[t] - m);
        l += s[t];
      }
      for (int32_t t = first; t < n; ++t) {
        for (int32_t d = 0; d < D; ++d) {
          o[d] += s[t] / l * vd[static_cast<size_t>(t) * D + d];
        }
      }
      ref_lse[bh] = m + std::log(l);
    }
  });
  Compare(&r, out, c.pool.bf16, ref, lse, ref_lse, D, true);
  for (size_t run = 1; run < outs.size(); ++run) {
    Result rr;
    Compare(&rr, outs[run], c.pool.bf16, ref, lses[run], ref_lse, D, true);
    const bool same =
        outs[run] == out && std::memcmp(lses[run].data(), lse.data(),
                                        lse.size() * sizeof(float)) == 0;
    if (!rr.pass || !same) {
      r.pass = false;
      r.note += "run " + std::to_string(run) +
                (same ? " " : " differs from run 0 ") + rr.note;
    }
  }
  r.note += "P=" + std::to_string(ps);
  if (c.runs > 1) r.note += " runs=" + std::to_string(c.runs);
  AddResult(r);
}

// ------------------------------------------------------------------ extend

struct ExtendCase {
  std::string name;
  PoolSpec pool;
  int32_t num_q_heads = 8;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (prefix, extend)
  KernelPath path = KernelPath::kAuto;
  int64_t page_lo = 0;
  int32_t window_left = -1;  // keys at positions >= position - w
};

void RunExtend(const ExtendCase& c, std::mt19937_64& rng) {
  Result r;
  r.name = c.name;
  DevicePool pool = MakePool(c.pool, rng);
  const KvCacheGeometry& g = pool.cache.geometry;
  const int32_t B = static_cast<int32_t>(c.seqs.size());
  const int32_t hq = c.num_q_heads, hkv = g.num_kv_heads, D = g.head_dim;
  const int32_t group = hq / hkv;
  std::vector<int32_t> prefix_lens, qo_indptr(1, 0);
  int32_t max_ext = 0;
  for (auto [lp, le] : c.seqs) {
    prefix_lens.push_back(lp);
    qo_indptr.push_back(qo_indptr.back() + le);
    max_ext = std::max(max_ext, le);
  }
  std::vector<int32_t> kv_indptr;
  std::vector<int64_t> slots = RandomSlots(
      prefix_lens, g.num_pages, g.page_size, c.page_lo, rng, &kv_indptr);
  const int32_t total_q = qo_indptr.back();
  std::vector<float> qf, kf, vf;
  std::vector<uint16_t> qb =
      RandomBits(static_cast<size_t>(total_q) * hq * D, c.pool.bf16, rng, &qf);
  std::vector<uint16_t> kb =
      RandomBits(static_cast<size_t>(total_q) * hkv * D, c.pool.bf16, rng, &kf);
  std::vector<uint16_t> vb =
      RandomBits(static_cast<size_t>(total_q) * hkv * D, c.pool.bf16, rng, &vf);
  DeviceBuffer d_q = Upload(qb), d_k = Upload(kb), d_v = Upload(vb);
  DeviceBuffer d_qo = Upload(qo_indptr), d_kvp = Upload(kv_indptr),
               d_kvi = Upload(slots);
  DeviceBuffer d_out = PoisonedBuffer(qb.size() * 2);
  DeviceBuffer d_lse = PoisonedBuffer(static_cast<size_t>(total_q) * hq * 4);
  GpuExtendArgs a;
  a.q = d_q.get();
  a.k_extend = d_k.get();
  a.v_extend = d_v.get();
  a.qo_indptr = d_qo.as<int32_t>();
  a.kv_indptr = d_kvp.as<int32_t>();
  a.kv_indices = d_kvi.as<int64_t>();
  a.batch_size = B;
  a.max_extend_len = max_ext;
  a.num_q_heads = hq;
  a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.window_left = c.window_left;
  a.out = d_out.get();
  a.lse = d_lse.as<float>();
  a.path = c.path;
  absl::Status st = Extend(pool.cache, a, nullptr);
  RADIXKV_CHECK_HIP(hipDeviceSynchronize());
  if (!st.ok()) {
    r.note = st.ToString();
    AddResult(r);
    return;
  }
  std::vector<uint16_t> out = Download<uint16_t>(d_out, qb.size());
  std::vector<float> lse =
      Download<float>(d_lse, static_cast<size_t>(total_q) * hq);
  std::vector<double> ref(qb.size()),
      ref_lse(static_cast<size_t>(total_q) * hq);
  // Per (sequence, kv head): gather prefix + extend K/V once, then every
  // query head of the group and every new token.
  ParallelFor(static_cast<int64_t>(B) * hkv, [&](int64_t bk) {
    const int32_t b = static_cast<int32_t>(bk / hkv);
    const int32_t kvh = static_cast<int32_t>(bk % hkv);
    const int32_t lp = c.seqs[b].first, le = c.seqs[b].second;
    const int32_t total = lp + le;
    std::vector<double> kd(static_cast<size_t>(total) * D), vd(kd.size());
    for (int32_t j = 0; j < total; ++j) {
      for (int32_t d = 0; d < D; ++d) {
        const size_t o = static_cast<size_t>(j) * D + d;
        if (j < lp) {
          kd[o] = pool.K(slots[kv_indptr[b] + j], kvh, d);
          vd[o] = pool.V(slots[kv_indptr[b] + j], kvh, d);
        } else {
          const size_t e =
              (static_cast<size_t>(qo_indptr[b] + j - lp) * hkv + kvh) * D + d;
          kd[o] = kf[e];
          vd[o] = vf[e];
        }
      }
    }
    std::vector<double> s(total);
    for (int32_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int32_t i = 0; i < le; ++i) {
        const int64_t qrow = static_cast<int64_t>(qo_indptr[b] + i) * hq + h;
        const int32_t n = lp + i + 1;  // shifted causal mask
        const int32_t j0 =
            c.window_left >= 0 ? std::max(0, n - 1 - c.window_left) : 0;
        double m = -INFINITY;
        for (int32_t j = j0; j < n; ++j) {
          double dot = 0.0;
          for (int32_t d = 0; d < D; ++d) {
            dot += qf[qrow * D + d] * kd[static_cast<size_t>(j) * D + d];
          }
          s[j] = dot * a.sm_scale;
          m = std::max(m, s[j]);
        }
        double l = 0.0;
        for (int32_t j = j0; j < n; ++j) {
          s[j] = std::exp(s[j] - m);
          l += s[j];
        }
        for (int32_t j = j0; j < n; ++j) {
          for (int32_t d = 0; d < D; ++d) {
            ref[qrow * D + d] += s[j] / l * vd[static_cast<size_t>(j) * D + d];
          }
        }
        ref_lse[qrow] = m + std::log(l);
      }
    }
  });
  Compare(&r, out, c.pool.bf16, ref, lse, ref_lse, D, true);
  AddResult(r);
}

// ------------------------------------------------------- reshape_and_cache

void RunReshapeAndCache(const std::string& name, const PoolSpec& spec,
                        int32_t num_tokens, int64_t page_lo,
                        std::mt19937_64& rng) {
  Result r;
  r.name = name;
  DevicePool pool = MakePool(spec, rng);
  const KvCacheGeometry& g = pool.cache.geometry;
  const int32_t hkv = g.num_kv_heads, D = g.head_dim;
  if (g.capacity_slots() - page_lo * g.page_size < 2 * num_tokens) {
    r.note = "test bug: pool too small for distinct slots";
    AddResult(r);
    return;
  }
  std::unordered_set<int64_t> used;
  std::vector<int64_t> loc;
  std::uniform_int_distribution<int64_t> pick(page_lo * g.page_size,
                                              g.capacity_slots() - 1);
  for (int32_t t = 0; t < num_tokens; ++t) {
    if (t == num_tokens / 2) {
      loc.push_back(-1);  // padding token: must be skipped
      continue;
    }
    int64_t s;
    do {
      s = pick(rng);
    } while (used.count(s));
    used.insert(s);
    loc.push_back(s);
  }
  std::vector<float> kf, vf;
  std::vector<uint16_t> kb = RandomBits(
      static_cast<size_t>(num_tokens) * hkv * D, spec.bf16, rng, &kf);
  std::vector<uint16_t> vb = RandomBits(
      static_cast<size_t>(num_tokens) * hkv * D, spec.bf16, rng, &vf);
  DeviceBuffer d_k = Upload(kb), d_v = Upload(vb), d_loc = Upload(loc);
  absl::Status st = ReshapeAndCache(pool.cache, d_k.get(), d_v.get(),
                                    d_loc.as<int64_t>(), num_tokens, nullptr);
  RADIXKV_CHECK_HIP(hipDeviceSynchronize());
  if (!st.ok()) {
    r.note = st.ToString();
    AddResult(r);
    return;
  }
  int64_t mismatches = 0;
  const int64_t n = g.ElementsPerLayer();
  if (n <= (int64_t{1} << 28)) {
    // Whole pool: written slots hold the new rows, everything else the hash.
    std::vector<uint16_t> k = Download<uint16_t>(pool.k, n);
    std::vector<uint16_t> v = Download<uint16_t>(pool.v, n);
    std::vector<uint16_t> ek(n), ev(n);
    ParallelFor(n, [&](int64_t i) {
      ek[i] = ToBits(testing::HashUniform(pool.seed_k, i), spec.bf16);
      ev[i] = ToBits(testing::HashUniform(pool.seed_v, i), spec.bf16);
    });
    for (int32_t t = 0; t < num_tokens; ++t) {
      if (loc[t] < 0) continue;
      for (int32_t h = 0; h < hkv; ++h) {
        for (int32_t d = 0; d < D; ++d) {
          const size_t src = (static_cast<size_t>(t) * hkv + h) * D + d;
          ek[g.KOffset(loc[t], h, d)] = kb[src];
          ev[g.VOffset(loc[t], h, d)] = vb[src];
        }
      }
    }
    for (int64_t i = 0; i < n; ++i)
      mismatches += (k[i] != ek[i]) + (v[i] != ev[i]);
  } else {
    // Huge pool: read back only the written elements.
    for (int32_t t = 0; t < num_tokens; ++t) {
      if (loc[t] < 0) continue;
      for (int32_t h = 0; h < hkv; ++h) {
        for (int32_t d = 0; d < D; ++d) {
          const size_t src = (static_cast<size_t>(t) * hkv + h) * D + d;
          uint16_t kv[2];
          RADIXKV_CHECK_HIP(
              hipMemcpy(&kv[0], pool.k.as<uint16_t>() + g.KOffset(loc[t], h, d),
                        2, hipMemcpyDeviceToHost));
          RADIXKV_CHECK_HIP(
              hipMemcpy(&kv[1], pool.v.as<uint16_t>() + g.VOffset(loc[t], h, d),
                        2, hipMemcpyDeviceToHost));
          mismatches += (kv[0] != kb[src]) + (kv[1] != vb[src]);
        }
      }
    }
    r.note = "written elements only; ";
  }
  r.pass = mismatches == 0;
  r.max_abs = static_cast<double>(mismatches);
  r.note += "mismatched elements=" + std::to_string(mismatches);
  AddResult(r);
}

// ------------------------------------------------------------- copy_blocks

void RunCopyBlocks(const std::string& name, const PoolSpec& spec,
                   std::mt19937_64& rng) {
  Result r;
  r.name = name;
  constexpr int kLayers = 3;
  std::vector<DevicePool> pools;
  for (int l = 0; l < kLayers; ++l) pools.push_back(MakePool(spec, rng));
  const KvCacheGeometry& g = pools[0].cache.geometry;
  std::vector<GpuKvCache> layers;
  for (auto& p : pools) layers.push_back(p.cache);
  std::uniform_int_distribution<int64_t> page(0, g.num_pages - 1);
  std::uniform_int_distribution<int32_t> ntok(0, g.page_size);
  std::vector<PageCopy> ops;
  for (int i = 0; i < 12; ++i) ops.push_back({page(rng), page(rng), ntok(rng)});
  ops.push_back({ops[0].dst_page, page(rng), g.page_size});  // reads op 0's dst
  ops.push_back({ops[1].src_page, ops[1].src_page, g.page_size});  // no-op
  ops.push_back({page(rng), ops[2].src_page, 1});  // overwrites op 2's src
  const int64_t n = g.ElementsPerLayer();
  std::vector<std::vector<uint16_t>> hk, hv;
  for (auto& p : pools) {
    hk.push_back(Download<uint16_t>(p.k, n));
    hv.push_back(Download<uint16_t>(p.v, n));
  }
  const size_t scratch_bytes = CopyBlocksScratchBytes(ops.size(), kLayers);
  DeviceBuffer scratch(scratch_bytes);
  // Invalid op list: rejected, nothing copied.
  std::vector<PageCopy> bad = ops;
  bad.push_back({0, g.num_pages, 1});
  absl::Status bad_st =
      CopyBlocks(layers, bad, scratch.get(), scratch_bytes, nullptr);
  absl::Status st =
      CopyBlocks(layers, ops, scratch.get(), scratch_bytes, nullptr);
  RADIXKV_CHECK_HIP(hipDeviceSynchronize());
  if (!st.ok() || bad_st.code() != absl::StatusCode::kInvalidArgument) {
    r.note = "status=" + st.ToString() + " bad_status=" + bad_st.ToString();
    AddResult(r);
    return;
  }
  // Host simulation in op order.
  for (const PageCopy& op : ops) {
    for (int l = 0; l < kLayers; ++l) {
      for (int32_t t = 0; t < op.num_tokens; ++t) {
        for (int32_t h = 0; h < g.num_kv_heads; ++h) {
          for (int32_t d = 0; d < g.head_dim; ++d) {
            const int64_t s = op.src_page * g.page_size + t;
            const int64_t dd = op.dst_page * g.page_size + t;
            hk[l][g.KOffset(dd, h, d)] = hk[l][g.KOffset(s, h, d)];
            hv[l][g.VOffset(dd, h, d)] = hv[l][g.VOffset(s, h, d)];
          }
        }
      }
    }
  }
  int64_t mismatches = 0;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<uint16_t> k = Download<uint16_t>(pools[l].k, n);
    std::vector<uint16_t> v = Download<uint16_t>(pools[l].v, n);
    for (int64_t i = 0; i < n; ++i) {
      mismatches += (k[i] != hk[l][i]) + (v[i] != hv[l][i]);
    }
  }
  r.pass = mismatches == 0;
  r.max_abs = static_cast<double>(mismatches);
  r.note = "mismatched elements=" + std::to_string(mismatches) +
           ", invalid op rejected";
  AddResult(r);
}

// ------------------------------------------------------------------- cases

std::vector<int32_t> RandomLens(int n, int lo, int hi, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

const char* LayoutTag(KvLayout l) { return KvLayoutName(l); }

int Main(const Options& opt) {
  std::mt19937_64 rng(opt.seed);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("seed=%llu\n", static_cast<unsigned long long>(opt.seed));
  std::printf("%-78s %-5s %-10s %-10s %-10s %s\n", "case", "ok", "rel_l2",
              "max_abs", "lse_err", "note");
  // --filter=A,B: run the cases whose name contains A or B.
  std::vector<std::string> filters;
  for (size_t pos = 0; pos <= opt.filter.size();) {
    const size_t comma = std::min(opt.filter.find(',', pos), opt.filter.size());
    if (comma > pos) filters.push_back(opt.filter.substr(pos, comma - pos));
    pos = comma + 1;
  }
  auto want = [&](const std::string& name) {
    if (filters.empty()) return true;
    for (const std::string& f : filters) {
      if (name.find(f) != std::string::npos) return true;
    }
    return false;
  };
  std::vector<KernelPath> paths = {KernelPath::kAuto, KernelPath::kPortable};
  const KvLayout layouts[] = {KvLayout::kBSHD, KvLayout::kBHSD,
                              KvLayout::kVllm};
  const int page_sizes[] = {1, 16, 32, 64};

  // 1. Layouts x page sizes (D 128, bf16, group 4), v1 and v2, both paths.
  for (KvLayout layout : layouts) {
    for (int ps : page_sizes) {
      if (opt.quick && !(ps == 16)) continue;
      for (KernelPath path : paths) {
        for (int part : {0, 64}) {
          DecodeCase c;
          c.pool = {256 * 16 / ps * 4, ps, 2, 128, layout, true};
          c.num_q_heads = 8;
          c.lens = RandomLens(opt.quick ? 3 : 6, 1, 700, rng);
          c.partition_size = part;
          c.path = path;
          c.name = std::string("decode ") + LayoutTag(layout) + " ps" +
                   std::to_string(ps) + (part ? " v2" : " v1") + " " +
                   PathName(path);
          if (want(c.name)) RunDecode(c, rng);
          if (opt.quick) break;
        }
      }
      ExtendCase e;
      e.pool = {256 * 16 / ps * 4, ps, 2, 128, layout, true};
      e.num_q_heads = 8;
      e.seqs = {{0, 70}, {93, 37}, {130, 1}, {17, 130}};
      for (KernelPath path : paths) {
        e.path = path;
        e.name = std::string("extend ") + LayoutTag(layout) + " ps" +
                 std::to_string(ps) + " " + PathName(path);
        if (want(e.name)) RunExtend(e, rng);
      }
      const std::string rc = std::string("reshape_and_cache ") +
                             LayoutTag(layout) + " ps" + std::to_string(ps);
      if (want(rc)) {
        // >= 1024 slots so that the 77 distinct slots are easy to draw.
        const int64_t pages = std::max(64, 1024 / ps);
        RunReshapeAndCache(rc + " bf16", {pages, ps, 4, 128, layout, true}, 77,
                           0, rng);
        RunReshapeAndCache(rc + " f16 d64", {pages, ps, 2, 64, layout, false},
                           33, 0, rng);
      }
      const std::string cb = std::string("copy_blocks ") + LayoutTag(layout) +
                             " ps" + std::to_string(ps);
      if (want(cb)) RunCopyBlocks(cb, {32, ps, 2, 128, layout, true}, rng);
    }
  }

  // 2. head_dim x dtype (bhsd, page 16, group 8).
  for (int D : {64, 128, 256}) {
    for (bool bf16 : {true, false}) {
      if (opt.quick && D == 256) continue;
      for (KernelPath path : paths) {
        const std::string tag = std::string(" d") + std::to_string(D) +
                                (bf16 ? " bf16 " : " f16 ") + PathName(path);
        DecodeCase c;
        c.pool = {512, 16, 2, D, KvLayout::kBHSD, bf16};
        c.num_q_heads = 16;
        c.lens = RandomLens(5, 1, 900, rng);
        c.partition_size = 128;
        c.path = path;
        c.name = "decode" + tag + " v2";
        if (want(c.name)) RunDecode(c, rng);
        c.partition_size = 0;
        c.name = "decode" + tag + " v1";
        if (want(c.name)) RunDecode(c, rng);
        ExtendCase e;
        e.pool = {512, 16, 2, D, KvLayout::kBSHD, bf16};
        e.num_q_heads = 4;
        e.seqs = {{200, 150}, {0, 65}, {64, 64}};
        e.path = path;
        e.name = "extend" + tag;
        if (want(e.name)) RunExtend(e, rng);
      }
    }
  }

  // 3. GQA groups 1..16 (+ 3, 5, 12 generic, 32 chunked).
  for (int group : {1, 2, 3, 4, 5, 8, 12, 16, 32}) {
    if (opt.quick && group != 3 && group != 16) continue;
    for (KernelPath path : paths) {
      const std::string tag =
          " group" + std::to_string(group) + " " + PathName(path);
      DecodeCase c;
      c.pool = {512, 16, 2, 128, KvLayout::kBSHD, true};
      c.num_q_heads = 2 * group;
      c.lens = RandomLens(4, 1, 600, rng);
      c.partition_size = 64;
      c.path = path;
      c.name = "decode" + tag;
      if (want(c.name)) RunDecode(c, rng);
      ExtendCase e;
      e.pool = c.pool;
      e.num_q_heads = 2 * group;
      e.seqs = {{45, 80}, {0, 3}};
      e.path = path;
      e.name = "extend" + tag;
      if (want(e.name)) RunExtend(e, rng);
    }
  }

  // 4. Edge cases: many sequences, empty ones, a 1-token last partition.
  for (KernelPath path : paths) {
    const std::string pn = PathName(path);
    {  // 33 sequences, random non-contiguous block table, one empty sequence,
       // lengths that leave a 1-token last partition.
      DecodeCase c;
      c.pool = {4096, 16, 4, 128, KvLayout::kBSHD, true};
      c.num_q_heads = 32;
      c.lens = RandomLens(33, 1, 1500, rng);
      c.lens[5] = 0;
      c.lens[6] = 2 * 256 + 1;
      c.lens[7] = 1;
      c.partition_size = 256;
      c.path = path;
      c.name =
          "decode 33 seqs random table + empty seq + 1-token last "
          "partition " +
          pn;
      if (want(c.name)) RunDecode(c, rng);
      c.partition_size = 0;
      c.name = "decode 33 seqs + empty seq v1 " + pn;
      if (want(c.name)) RunDecode(c, rng);
      c.partition_size = -1;
      c.name = "decode 33 seqs + empty seq auto " + pn;
      if (want(c.name)) RunDecode(c, rng);
      // Three launches on one workspace: the fused combine's counters reset
      // (run with RADIXKV_DECODE_FUSED_COMBINE=1, as run_device_suite.sh
      // does, to cover the fused path).
      c.partition_size = 256;
      c.runs = 3;
      c.name = "decode 33 seqs v2 x3 launches, same workspace " + pn;
      if (want(c.name)) RunDecode(c, rng);
      c.runs = 1;
      ExtendCase e;
      e.pool = c.pool;
      e.num_q_heads = 8;
      std::uniform_int_distribution<int> u(0, 300), u2(1, 200);
      for (int i = 0; i < 33; ++i) e.seqs.push_back({u(rng), u2(rng)});
      e.path = path;
      e.name = "extend 33 seqs random table " + pn;
      if (want(e.name)) RunExtend(e, rng);
    }
    {  // page ids > 65,535
      DecodeCase c;
      c.pool = {70000, 16, 2, 64, KvLayout::kVllm, true};
      c.num_q_heads = 8;
      c.lens = RandomLens(6, 100, 800, rng);
      c.partition_size = 128;
      c.page_lo = 65536;
      c.path = path;
      c.name = "decode page ids > 65535 (vllm) " + pn;
      if (want(c.name)) RunDecode(c, rng);
      ExtendCase e;
      e.pool = c.pool;
      e.num_q_heads = 4;
      e.seqs = {{300, 40}, {17, 100}};
      e.page_lo = 65536;
      e.path = path;
      e.name = "extend page ids > 65535 (vllm) " + pn;
      if (want(e.name)) RunExtend(e, rng);
    }
  }
  if (!opt.quick) {
    // Element offsets > 2^31: 64,000 pages x 16 x 32 heads x 128 dims
    // (2^32 elements per tensor, 8 GiB each for K and V), accessed pages in
    // the last 200 pages of the pool.
    PoolSpec big{64000, 16, 32, 128, KvLayout::kBSHD, true};
    for (KernelPath path : paths) {
      DecodeCase c;
      c.pool = big;
      c.num_q_heads = 64;
      c.lens = RandomLens(4, 200, 700, rng);
      c.partition_size = 256;
      c.page_lo = big.num_pages - 200;
      c.path = path;
      c.name = std::string("decode offsets > 2^31 ") + PathName(path);
      if (want(c.name)) RunDecode(c, rng);
      ExtendCase e;
      e.pool = big;
      e.num_q_heads = 32;
      e.seqs = {{500, 70}};
      e.page_lo = big.num_pages - 200;
      e.path = path;
      e.name = std::string("extend offsets > 2^31 ") + PathName(path);
      if (want(e.name)) RunExtend(e, rng);
    }
    if (want("reshape_and_cache offsets > 2^31")) {
      RunReshapeAndCache("reshape_and_cache offsets > 2^31", big, 9,
                         big.num_pages - 100, rng);
    }
    PoolSpec big_vllm{64000, 16, 32, 128, KvLayout::kVllm, true};
    if (want("decode offsets > 2^31 vllm")) {
      DecodeCase c;
      c.pool = big_vllm;
      c.num_q_heads = 32;
      c.lens = RandomLens(3, 100, 500, rng);
      c.partition_size = 0;
      c.page_lo = big_vllm.num_pages - 200;
      c.name = "decode offsets > 2^31 vllm mma";
      RunDecode(c, rng);
    }
  }

  // Sliding windows W (window_left W - 1) x page sizes: windows smaller than
  // a page, edges on a page boundary (W + 64, W + 128), prefixes longer than
  // the window; decode v1 / v2 and extend, both paths.
  for (int w : {1, 15, 16, 17, 64, 4095}) {
    for (int ps : {1, 16, 64}) {
      if (opt.quick && ps != 16) continue;
      const std::string tag =
          " window" + std::to_string(w) + " ps" + std::to_string(ps);
      DecodeCase c;
      c.lens = {w, w + 64, w + 128, w + 5, 1};
      if (w > 1) c.lens.push_back(w - 1);
      if (w < 4095) c.lens.push_back(3 * w + 1);
      int64_t pages = 16;
      for (int32_t n : c.lens) pages += n / ps + 1;
      c.pool = {2 * pages, ps, 2, 128, KvLayout::kBSHD, true};
      c.window_left = w - 1;
      ExtendCase e;
      const int lp = w >= 4095 ? w + 150 : w + 64;
      e.seqs = {{0, 70}, {lp, 9}, {5, std::min(2 * w + 3, 200)}, {17, 130}};
      e.pool = {2 * (lp + 400) / ps + 16, ps, 2, 128, KvLayout::kVllm, false};
      e.window_left = w - 1;
      for (KernelPath path : paths) {
        for (int part : {0, 64}) {
          c.partition_size = part;
          c.path = path;
          c.name = "decode" + tag + (part ? " v2 " : " v1 ") + PathName(path);
          if (want(c.name)) RunDecode(c, rng);
        }
        e.path = path;
        e.name = "extend" + tag + " " + PathName(path);
        if (want(e.name)) RunExtend(e, rng);
      }
    }
  }

  int failed = 0;
  std::printf("\nFAILED CASES:\n");
  for (const Result& r : g_results) {
    if (!r.pass) PrintResult(r);
    failed += !r.pass;
  }
  std::printf("\n%zu cases, %d failed (seed=%llu)\n", g_results.size(), failed,
              static_cast<unsigned long long>(opt.seed));
  return failed == 0 && !g_results.empty() ? 0 : 1;
}

}  // namespace
}  // namespace radixkv::worker::gpu

int main(int argc, char** argv) {
  radixkv::worker::gpu::Options opt;
  opt.seed = std::random_device{}();
  opt.seed = (opt.seed << 32) ^ std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seed=", 0) == 0) {
      opt.seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    } else if (a == "--quick") {
      opt.quick = true;
    } else if (a.rfind("--filter=", 0) == 0) {
      opt.filter = a.substr(9);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  return radixkv::worker::gpu::Main(opt);
}
