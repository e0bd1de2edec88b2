// CPU check of the MFMA extend kernel's index math (attention_mfma.h,
// ExtendMfmaKernel in extend_attention.hip). No AMD GPU is available to the
// project, so this test:
//   1. emulates one wave64 executing v_mfma_f32_16x16x16{f16,bf16_1k} exactly
//      as the ISA documents its lane layout (AMD Matrix Instruction
//      Calculator; the table is written out again in EmulateMfma below,
//      independently of the header's functions);
//   2. runs ExtendMfmaKernel's algorithm step by step on the host for every
//      wavefront of every block (tile gather through kv_indices with the
//      shared address function and the kernel's k_delta/v_delta split, LDS
//      tile offsets, S^T = K Q^T, shifted causal mask and early exit, online
//      softmax in base 2 with the xor-16/32 row reductions, P rounded to the
//      operand type, O^T += V^T P^T, the row store), using the header's
//      fragment functions for every register and LDS index;
//   3. compares with a float64 reference on fresh random inputs (seed
//      printed), all three pool layouts, bf16 and fp16, head_dim 64/128/256.
// It verifies the kernel's index math against our reading of the ISA, not
// the hardware: a misread lane table would be wrong in both places.
#include "worker/kernels/hip/attention_mfma.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/attention_combine.h"
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu::mfma {
namespace {

constexpr int kLanes = 64;

float ElemToFloat(uint16_t bits, bool bf16) {
  return bf16 ? Bf16ToFloat(bf16_t{bits}) : Fp16ToFloat(fp16_t{bits});
}

uint16_t FloatToElem(float f, bool bf16) {
  return bf16 ? FloatToBf16(f).bits : FloatToFp16(f).bits;
}

// One wavefront executing D = A * B + C for a 16x16x16 MFMA. Per lane l and
// item v (AMD Matrix Instruction Calculator, --register-layout):
//   a[l][v] = A[l % 16][4 * (l / 16) + v]
//   b[l][v] = B[4 * (l / 16) + v][l % 16]
//   c[l][v] = C[4 * (l / 16) + v][l % 16]
// Products are exact in fp32 for 16-bit inputs; accumulation in fp32.
void EmulateMfma(const uint16_t a[kLanes][4], const uint16_t b[kLanes][4],
                 float c[kLanes][4], bool bf16) {
  float am[16][16], bm[16][16], cm[16][16];
  for (int l = 0; l < kLanes; ++l) {
    for (int v = 0; v < 4; ++v) {
      am[l % 16][4 * (l / 16) + v] = ElemToFloat(a[l][v], bf16);
      bm[4 * (l / 16) + v][l % 16] = ElemToFloat(b[l][v], bf16);
      cm[4 * (l / 16) + v][l % 16] = c[l][v];
    }
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float acc = cm[i][j];
      for (int k = 0; k < 16; ++k) acc += am[i][k] * bm[k][j];
      c[j + 16 * (i / 4)][i % 4] = acc;
    }
  }
}

TEST(AttentionMfmaTest, FragmentFunctionsMatchTheIsaTable) {
  // The header's inverse table against the forward formulas above, and the
  // contiguity the kernel relies on (one 8-byte read / store per fragment).
  for (int l = 0; l < kLanes; ++l) {
    for (int v = 0; v < 4; ++v) {
      EXPECT_EQ(AFragRow(l) + 16 * (AFragK(l, v) / 4), l);
      EXPECT_EQ(AFragK(l, v) % 4, v);
      EXPECT_EQ(BFragCol(l) + 16 * (BFragK(l, v) / 4), l);
      EXPECT_EQ(CFragCol(l) + 16 * (CFragRow(l, v) / 4), l);
      EXPECT_EQ(CFragRow(l, v) % 4, v);
      EXPECT_EQ(QDim(l, v), QDim(l, 0) + v);
      EXPECT_EQ(KDim(l, v), KDim(l, 0) + v);
      EXPECT_EQ(VKey(l, v), VKey(l, 0) + v);
      EXPECT_EQ(OutDim(l, v), OutDim(l, 0) + v);
      EXPECT_EQ(ScoreKey(l, v), PKey(l, v));
    }
    EXPECT_EQ(LaneRow(l), LaneRow(l ^ kRowLaneXor0));
    EXPECT_EQ(LaneRow(l), LaneRow(l ^ kRowLaneXor1));
  }
}

TEST(AttentionMfmaTest, EmulatedMfmaIsAMatrixProduct) {
  // Fill A, B, C as matrices, scatter them into lanes with the header's
  // functions, run the emulated instruction, gather D the same way.
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (bool bf16 : {true, false}) {
    float am[16][16], bm[16][16], cm[16][16];
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        am[i][j] = ElemToFloat(FloatToElem(u(rng), bf16), bf16);
        bm[i][j] = ElemToFloat(FloatToElem(u(rng), bf16), bf16);
        cm[i][j] = u(rng);
      }
    }
    uint16_t a[kLanes][4], b[kLanes][4];
    float c[kLanes][4];
    for (int l = 0; l < kLanes; ++l) {
      for (int v = 0; v < 4; ++v) {
        a[l][v] = FloatToElem(am[AFragRow(l)][AFragK(l, v)], bf16);
        b[l][v] = FloatToElem(bm[BFragK(l, v)][BFragCol(l)], bf16);
        c[l][v] = cm[CFragRow(l, v)][CFragCol(l)];
      }
    }
    EmulateMfma(a, b, c, bf16);
    for (int l = 0; l < kLanes; ++l) {
      for (int v = 0; v < 4; ++v) {
        const int i = CFragRow(l, v), j = CFragCol(l);
        double want = cm[i][j];
        for (int k = 0; k < 16; ++k) want += double{am[i][k]} * bm[k][j];
        EXPECT_NEAR(c[l][v], want, 1e-4) << "lane " << l << " item " << v;
      }
    }
  }
}

TEST(AttentionMfmaTest, GcnArchNames) {
  EXPECT_TRUE(GcnArchHasMfma("gfx90a:sramecc+:xnack-"));
  EXPECT_TRUE(GcnArchHasMfma("gfx90a"));
  EXPECT_TRUE(GcnArchHasMfma("gfx942:sramecc+:xnack-"));
  EXPECT_TRUE(GcnArchHasMfma("gfx940"));
  EXPECT_FALSE(GcnArchHasMfma("gfx906:sramecc-:xnack-"));
  EXPECT_FALSE(GcnArchHasMfma("gfx908"));
  EXPECT_FALSE(GcnArchHasMfma("gfx9"));
  EXPECT_FALSE(GcnArchHasMfma("gfx1100"));
  EXPECT_FALSE(GcnArchHasMfma(""));
  EXPECT_FALSE(GcnArchHasMfma(nullptr));
}

// ------------------------------------------------ the extend kernel on a CPU

struct Sequence {
  int32_t lp;  // cached prefix tokens
  int32_t le;  // new tokens
};

struct Problem {
  KvCacheGeometry g;
  bool bf16 = true;
  int32_t num_q_heads = 0;
  float scale_log2 = 0.0f;
  std::vector<int32_t> qo_indptr, kv_indptr;
  std::vector<int64_t> kv_indices;
  std::vector<uint16_t> k_cache, v_cache;  // the paged pool
  std::vector<uint16_t> q, k_ext, v_ext;   // [total_q, H, D]
  std::vector<std::vector<float>> kp, vp;  // per sequence [lp][Hkv][D]
};

Problem MakeProblem(std::mt19937& rng, const std::vector<Sequence>& seqs,
                    KvLayout layout, int32_t page_size, int32_t head_dim,
                    bool bf16) {
  Problem pr;
  pr.bf16 = bf16;
  pr.num_q_heads = 4;
  pr.g.num_kv_heads = 2;
  pr.g.head_dim = head_dim;
  pr.g.page_size = page_size;
  pr.g.elem_bytes = 2;
  pr.g.layout = layout;
  int64_t total_prefix = 0;
  for (const Sequence& s : seqs) total_prefix += s.lp;
  pr.g.num_pages = (total_prefix + page_size - 1) / page_size + 3;
  pr.scale_log2 = 1.0f / std::sqrt(static_cast<float>(head_dim)) * kLog2e;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const uint16_t poison = bf16 ? 0x7fc0 : 0x7e00;  // NaN: unused slots
  pr.k_cache.assign(pr.g.ElementsPerLayer(), poison);
  pr.v_cache.assign(pr.g.ElementsPerLayer(), poison);
  // Slots in shuffled order: consecutive keys land on unrelated pages.
  std::vector<int64_t> slots(pr.g.capacity_slots());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
  std::shuffle(slots.begin(), slots.end(), rng);
  const int32_t hkv = pr.g.num_kv_heads, d_all = head_dim;
  pr.qo_indptr.push_back(0);
  pr.kv_indptr.push_back(0);
  size_t next_slot = 0;
  for (const Sequence& s : seqs) {
    pr.kp.emplace_back(static_cast<size_t>(s.lp) * hkv * d_all);
    pr.vp.emplace_back(static_cast<size_t>(s.lp) * hkv * d_all);
    for (int32_t j = 0; j < s.lp; ++j) {
      const int64_t slot = slots[next_slot++];
      pr.kv_indices.push_back(slot);
      for (int32_t h = 0; h < hkv; ++h) {
        for (int32_t d = 0; d < d_all; ++d) {
          const uint16_t kb = FloatToElem(u(rng), bf16);
          const uint16_t vb = FloatToElem(u(rng), bf16);
          pr.k_cache[pr.g.KOffset(slot, h, d)] = kb;
          pr.v_cache[pr.g.VOffset(slot, h, d)] = vb;
          pr.kp.back()[(static_cast<size_t>(j) * hkv + h) * d_all + d] =
              ElemToFloat(kb, bf16);
          pr.vp.back()[(static_cast<size_t>(j) * hkv + h) * d_all + d] =
              ElemToFloat(vb, bf16);
        }
      }
    }
    pr.qo_indptr.push_back(pr.qo_indptr.back() + s.le);
    pr.kv_indptr.push_back(pr.kv_indptr.back() + s.lp);
  }
  const int32_t total_q = pr.qo_indptr.back();
  auto fill = [&](std::vector<uint16_t>& v, int32_t heads) {
    v.resize(static_cast<size_t>(total_q) * heads * d_all);
    for (auto& e : v) e = FloatToElem(u(rng), bf16);
  };
  fill(pr.q, pr.num_q_heads);
  fill(pr.k_ext, hkv);
  fill(pr.v_ext, hkv);
  return pr;
}

// float64 extend attention: row i of sequence b sees all lp prefix keys and
// extend keys j <= i. out [total_q, Hq, D], lse natural log.
void Reference(const Problem& pr, std::vector<double>& out,
               std::vector<double>& lse) {
  const int32_t hq = pr.num_q_heads, hkv = pr.g.num_kv_heads;
  const int32_t D = pr.g.head_dim, group = hq / hkv;
  const double scale = pr.scale_log2 / kLog2e;
  out.assign(pr.q.size(), 0.0);
  lse.assign(static_cast<size_t>(pr.qo_indptr.back()) * hq, 0.0);
  for (size_t b = 0; b + 1 < pr.qo_indptr.size(); ++b) {
    const int32_t q0 = pr.qo_indptr[b], le = pr.qo_indptr[b + 1] - q0;
    const int32_t lp = pr.kv_indptr[b + 1] - pr.kv_indptr[b];
    for (int32_t i = 0; i < le; ++i) {
      for (int32_t h = 0; h < hq; ++h) {
        const int32_t kvh = h / group;
        const size_t qrow = (static_cast<size_t>(q0 + i) * hq + h) * D;
        std::vector<double> logits;
        std::vector<const float*> vrows;
        std::vector<size_t> vext_rows;
        auto dot_q = [&](auto key_at) {
          double s = 0.0;
          for (int32_t d = 0; d < D; ++d) {
            s += double{ElemToFloat(pr.q[qrow + d], pr.bf16)} * key_at(d);
          }
          return s * scale;
        };
        for (int32_t j = 0; j < lp; ++j) {
          const float* kr = &pr.kp[b][(static_cast<size_t>(j) * hkv + kvh) * D];
          logits.push_back(dot_q([&](int32_t d) { return double{kr[d]}; }));
        }
        for (int32_t j = 0; j <= i; ++j) {
          const size_t kr = (static_cast<size_t>(q0 + j) * hkv + kvh) * D;
          logits.push_back(dot_q([&](int32_t d) {
            return double{ElemToFloat(pr.k_ext[kr + d], pr.bf16)};
          }));
        }
        double mx = -INFINITY;
        for (double s : logits) mx = std::max(mx, s);
        double sum = 0.0;
        for (double& s : logits) sum += (s = std::exp(s - mx));
        for (int32_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int32_t j = 0; j < lp; ++j) {
            acc += logits[j] *
                   pr.vp[b][(static_cast<size_t>(j) * hkv + kvh) * D + d];
          }
          for (int32_t j = 0; j <= i; ++j) {
            acc +=
                logits[lp + j] *
                ElemToFloat(
                    pr.v_ext[(static_cast<size_t>(q0 + j) * hkv + kvh) * D + d],
                    pr.bf16);
          }
          out[qrow + d] = acc / sum;
        }
        lse[static_cast<size_t>(q0 + i) * hq + h] = mx + std::log(sum);
      }
    }
  }
}

// ExtendMfmaKernel on the host: same block/wave/tile structure, same index
// functions. kN keys per tile, 4 wavefronts x 16 rows per block.
template <int D, int kN>
void EmulateExtendMfma(const Problem& pr, std::vector<uint16_t>& out,
                       std::vector<float>& lse) {
  constexpr int kWaves = 4, kBlockM = 16 * kWaves;
  constexpr int kDSteps = D / 16, kKSteps = kN / 16;
  const bool bf16 = pr.bf16;
  const uint16_t nan_bits = bf16 ? 0x7fc0 : 0x7e00;
  const KvCacheGeometry& g = pr.g;
  const int32_t hq = pr.num_q_heads, hkv = g.num_kv_heads;
  const int32_t group = hq / hkv;
  std::vector<uint16_t> k_tile(kN * KTileStride<D>());
  std::vector<uint16_t> vt_tile(D * VtTileStride<kN>());
  std::vector<int64_t> bases(2 * kN);
  const int32_t batch = static_cast<int32_t>(pr.qo_indptr.size()) - 1;
  int32_t max_le = 0;
  for (int32_t b = 0; b < batch; ++b) {
    max_le = std::max(max_le, pr.qo_indptr[b + 1] - pr.qo_indptr[b]);
  }
  const int32_t num_m_blocks = (max_le + kBlockM - 1) / kBlockM;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t h = 0; h < hq; ++h) {
      for (int32_t bx = 0; bx < num_m_blocks; ++bx) {
        const int32_t m_block = num_m_blocks - 1 - bx;
        const int32_t qo_start = pr.qo_indptr[b];
        const int32_t le = pr.qo_indptr[b + 1] - qo_start;
        const int32_t m0 = m_block * kBlockM;
        if (m0 >= le) continue;
        const int64_t kv_start = pr.kv_indptr[b];
        const int32_t lp = pr.kv_indptr[b + 1] - pr.kv_indptr[b];
        const int32_t kvh = h / group;
        const int32_t prefix_tiles = (lp + kN - 1) / kN;
        const int32_t extend_end = std::min(le, m0 + kBlockM);
        const int32_t num_tiles = prefix_tiles + (extend_end + kN - 1) / kN;
        // Per wavefront and lane: Q^T fragments, O^T accumulators, m, l.
        std::vector<uint16_t> q(kWaves * kLanes * kDSteps * 4);
        std::vector<float> o(kWaves * kLanes * kDSteps * 4, 0.0f);
        std::vector<float> m(kWaves * kLanes, -INFINITY);
        std::vector<float> l(kWaves * kLanes, 0.0f);
        auto qf = [&](int w, int lane, int d) {
          return &q[((w * kLanes + lane) * kDSteps + d) * 4];
        };
        auto of = [&](int w, int lane, int d) {
          return &o[((w * kLanes + lane) * kDSteps + d) * 4];
        };
        for (int w = 0; w < kWaves; ++w) {
          for (int lane = 0; lane < kLanes; ++lane) {
            const int32_t row = m0 + w * 16 + LaneRow(lane);
            for (int d = 0; d < kDSteps; ++d) {
              for (int i = 0; i < 4; ++i) {
                qf(w, lane, d)[i] =
                    row < le
                        ? pr.q[(static_cast<size_t>(qo_start + row) * hq + h) *
                                   D +
                               16 * d + QDim(lane, i)]
                        : 0;
              }
            }
          }
        }
        for (int32_t it = 0; it < num_tiles; ++it) {
          const bool prefix = it < prefix_tiles;
          const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
          for (int t = 0; t < kN; ++t) {  // one thread per key
            const int32_t key = key0 + t;
            int64_t kb = -1, vb = -1;
            if (prefix && key < lp) {
              const int64_t slot = pr.kv_indices[kv_start + key];
              kb = g.KOffset(slot, kvh, 0);
              vb = g.VOffset(slot, kvh, 0);
            } else if (!prefix && key < le) {
              kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
            }
            bases[t] = kb;
            bases[kN + t] = vb;
          }
          // Poison the tiles: a fragment read of anything not written below
          // (padding, a wrong offset) turns the row into NaN.
          std::fill(k_tile.begin(), k_tile.end(), nan_bits);
          std::fill(vt_tile.begin(), vt_tile.end(), nan_bits);
          const std::vector<uint16_t>& ksrc = prefix ? pr.k_cache : pr.k_ext;
          const std::vector<uint16_t>& vsrc = prefix ? pr.v_cache : pr.v_ext;
          for (int chunk = 0; chunk < D / 8; ++chunk) {
            const int64_t kd =
                prefix ? g.KOffset(0, kvh, chunk * 8) - g.KOffset(0, kvh, 0)
                       : chunk * 8;
            const int64_t vd =
                prefix ? g.VOffset(0, kvh, chunk * 8) - g.VOffset(0, kvh, 0)
                       : chunk * 8;
            const int64_t v_step =
                prefix && g.layout == KvLayout::kVllm ? g.VDimStride() : 1;
            for (int r = 0; r < kN; ++r) {
              const int64_t kb = bases[r], vb = bases[kN + r];
              for (int e = 0; e < 8; ++e) {
                k_tile[KTileOffset<D>(r, chunk * 8 + e)] =
                    kb >= 0 ? ksrc[kb + kd + e] : 0;
                vt_tile[VtTileOffset<kN>(r, chunk * 8 + e)] =
                    vb >= 0 ? vsrc[vb + vd + e * v_step] : 0;
              }
            }
          }
          for (int w = 0; w < kWaves; ++w) {
            const int32_t wave_row0 = m0 + w * 16;
            if (!prefix && key0 > wave_row0 + 15) continue;  // early exit
            // S^T = K Q^T.
            float s[kKSteps][kLanes][4] = {};
            for (int j = 0; j < kKSteps; ++j) {
              for (int d = 0; d < kDSteps; ++d) {
                uint16_t a[kLanes][4], bq[kLanes][4];
                for (int lane = 0; lane < kLanes; ++lane) {
                  for (int i = 0; i < 4; ++i) {
                    a[lane][i] = k_tile[KTileOffset<D>(16 * j + KKey(lane),
                                                       16 * d + KDim(lane, i))];
                    bq[lane][i] = qf(w, lane, d)[i];
                  }
                }
                EmulateMfma(a, bq, s[j], bf16);
              }
            }
            // Scale and mask.
            const bool need_mask =
                prefix ? key0 + kN > lp : key0 + kN - 1 > wave_row0;
            for (int j = 0; j < kKSteps; ++j) {
              for (int lane = 0; lane < kLanes; ++lane) {
                for (int i = 0; i < 4; ++i) {
                  const int32_t key = key0 + 16 * j + ScoreKey(lane, i);
                  const int32_t row = wave_row0 + LaneRow(lane);
                  const bool ok =
                      !need_mask || KeyVisible(prefix, key, lp, row);
                  s[j][lane][i] =
                      ok ? s[j][lane][i] * pr.scale_log2 : -INFINITY;
                }
              }
            }
            // Online softmax: lane max, then butterflies over xor 16, 32.
            float mx[kLanes], tmp[kLanes];
            for (int lane = 0; lane < kLanes; ++lane) {
              mx[lane] = -INFINITY;
              for (int j = 0; j < kKSteps; ++j) {
                for (int i = 0; i < 4; ++i) {
                  mx[lane] = std::max(mx[lane], s[j][lane][i]);
                }
              }
            }
            for (int x : {kRowLaneXor0, kRowLaneXor1}) {
              for (int lane = 0; lane < kLanes; ++lane) {
                tmp[lane] = std::max(mx[lane], mx[lane ^ x]);
              }
              std::copy(tmp, tmp + kLanes, mx);
            }
            uint16_t p[kKSteps][kLanes][4];
            for (int lane = 0; lane < kLanes; ++lane) {
              float& ml = m[w * kLanes + lane];
              const float m_new = std::max(ml, mx[lane]);
              const float m_ref = SoftmaxReference(m_new);
              const float alpha = std::exp2(ml - m_ref);
              float sum = 0.0f;
              for (int j = 0; j < kKSteps; ++j) {
                for (int i = 0; i < 4; ++i) {
                  const float e = std::exp2(s[j][lane][i] - m_ref);
                  sum += e;
                  p[j][lane][i] = FloatToElem(e, bf16);
                }
              }
              l[w * kLanes + lane] = l[w * kLanes + lane] * alpha + sum;
              ml = m_new;
              for (int d = 0; d < kDSteps; ++d) {
                for (int i = 0; i < 4; ++i) of(w, lane, d)[i] *= alpha;
              }
            }
            // O^T += V^T P^T.
            for (int d = 0; d < kDSteps; ++d) {
              float acc[kLanes][4];
              for (int lane = 0; lane < kLanes; ++lane) {
                for (int i = 0; i < 4; ++i) acc[lane][i] = of(w, lane, d)[i];
              }
              for (int j = 0; j < kKSteps; ++j) {
                uint16_t a[kLanes][4];
                for (int lane = 0; lane < kLanes; ++lane) {
                  for (int i = 0; i < 4; ++i) {
                    a[lane][i] = vt_tile[VtTileOffset<kN>(
                        16 * j + VKey(lane, i), 16 * d + VDim(lane))];
                  }
                }
                EmulateMfma(a, p[j], acc, bf16);
              }
              for (int lane = 0; lane < kLanes; ++lane) {
                for (int i = 0; i < 4; ++i) of(w, lane, d)[i] = acc[lane][i];
              }
            }
          }
        }
        // Finish (l over xor 16, 32) and the row store.
        for (int w = 0; w < kWaves; ++w) {
          float lw[kLanes], tmp[kLanes];
          for (int lane = 0; lane < kLanes; ++lane)
            lw[lane] = l[w * kLanes + lane];
          for (int x : {kRowLaneXor0, kRowLaneXor1}) {
            for (int lane = 0; lane < kLanes; ++lane) {
              tmp[lane] = lw[lane] + lw[lane ^ x];
            }
            std::copy(tmp, tmp + kLanes, lw);
          }
          for (int lane = 0; lane < kLanes; ++lane) {
            const int32_t row = m0 + w * 16 + LaneRow(lane);
            if (row >= le) continue;
            const size_t orow = static_cast<size_t>(qo_start + row) * hq + h;
            const float inv = lw[lane] > 0.0f ? 1.0f / lw[lane] : 0.0f;
            for (int d = 0; d < kDSteps; ++d) {
              for (int i = 0; i < 4; ++i) {
                out[orow * D + 16 * d + OutDim(lane, i)] =
                    FloatToElem(of(w, lane, d)[i] * inv, bf16);
              }
            }
            if (lane < 16)
              lse[orow] = CombineLse(m[w * kLanes + lane], lw[lane]);
          }
        }
      }
    }
  }
}

struct Case {
  KvLayout layout;
  int32_t page_size;
  int32_t head_dim;
  bool bf16;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << KvLayoutName(c.layout) << " page " << c.page_size << " D "
      << c.head_dim << (c.bf16 ? " bf16" : " fp16");
}

class ExtendMfmaEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExtendMfmaEmulationTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u (%s page %d D %d %s)\n", seed, KvLayoutName(c.layout),
              c.page_size, c.head_dim, c.bf16 ? "bf16" : "fp16");
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  // Partial prefix tiles (37, 130), an empty prefix, two m-blocks (81 rows),
  // extend lengths that are not multiples of 16.
  const std::vector<Sequence> seqs = {{0, 70}, {37, 5}, {130, 81}};
  const Problem pr =
      MakeProblem(rng, seqs, c.layout, c.page_size, c.head_dim, c.bf16);
  const uint16_t poison = c.bf16 ? 0x7fc0 : 0x7e00;
  std::vector<uint16_t> out(pr.q.size(), poison);
  std::vector<float> lse(pr.q.size() / c.head_dim, NAN);
  switch (c.head_dim) {
    case 64:
      EmulateExtendMfma<64, 64>(pr, out, lse);
      break;
    case 128:
      EmulateExtendMfma<128, 64>(pr, out, lse);
      break;
    default:
      EmulateExtendMfma<256, 32>(pr, out, lse);
      break;
  }
  std::vector<double> want, want_lse;
  Reference(pr, want, want_lse);
  // bf16 P and outputs round at 2^-9 relative, fp16 at 2^-12.
  const double tol = c.bf16 ? 1.2e-2 : 2e-3;
  double max_err = 0.0;
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = ElemToFloat(out[i], c.bf16);
    const double err = std::fabs(got - want[i]);
    if (!(err <= tol)) {
      if (++bad <= 5) {
        ADD_FAILURE() << "out[" << i << "] = " << got << ", want " << want[i];
      }
    } else {
      max_err = std::max(max_err, err);
    }
  }
  EXPECT_EQ(bad, 0);
  for (size_t i = 0; i < lse.size(); ++i) {
    EXPECT_NEAR(lse[i], want_lse[i], 2e-3) << "lse row " << i;
  }
  std::printf("max |out - ref| = %.2e over %zu values\n", max_err, out.size());
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsDtypesHeadDims, ExtendMfmaEmulationTest,
    ::testing::Values(Case{KvLayout::kBSHD, 1, 128, true},
                      Case{KvLayout::kBSHD, 16, 64, false},
                      Case{KvLayout::kBHSD, 16, 128, true},
                      Case{KvLayout::kBHSD, 4, 256, false},
                      Case{KvLayout::kVllm, 16, 128, true},
                      Case{KvLayout::kVllm, 16, 64, true},
                      Case{KvLayout::kVllm, 8, 256, true},
                      Case{KvLayout::kBSHD, 16, 128, false},
                      Case{KvLayout::kVllm, 16, 128, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(KvLayoutName(c.layout)) + "_p" +
             std::to_string(c.page_size) + "_d" + std::to_string(c.head_dim) +
             (c.bf16 ? "_bf16" : "_fp16");
    });

}  // namespace
}  // namespace radixkv::worker::gpu::mfma
