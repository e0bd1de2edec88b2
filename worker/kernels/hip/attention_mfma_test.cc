// CPU check of the MFMA extend kernel (attention_mfma.h, ExtendMfmaKernel in
// extend_attention_mfma.hip). No AMD GPU is available to the project, so this
// test:
//   1. runs one wave64 on the CPU: 64 lanes as user contexts executed in
//      lockstep (LockstepWave), with HostOps implementing the shuffles and
//      v_mfma_f32_16x16x16{f16,bf16_1k} exactly as the ISA documents the
//      instruction's lane layout (AMD Matrix Instruction Calculator; the
//      table is written out again in HostOps::Mfma, independently of the
//      header's fragment functions);
//   2. runs the kernel's own wavefront code, mfma::WaveAttention (Init, Tile
//      = S^T = K Q^T, mask, early exit, online softmax in base 2, O^T +=
//      V^T P^T; Finish, Store), instantiated with HostOps, for every
//      wavefront of every block, on LDS tiles filled as ExtendMfmaKernel
//      fills them (gather through kv_indices with the shared address
//      function and the kernel's k_delta / v_delta split; this fill loop is a
//      transcription of the kernel's, not the same source);
//   3. compares with a float64 reference on fresh random inputs (seed
//      printed), all three pool layouts, bf16 and fp16, head_dim 64/128/256.
// It verifies the kernel's index math against our reading of the ISA, not
// the hardware: a misread lane table would be wrong in both places.
#include "worker/kernels/hip/attention_mfma.h"

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
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

// One wave64 on the CPU. The 64 lanes are user contexts (ucontext) run
// round-robin on the calling thread; every collective operation ends with
// Sync(), which returns to the scheduler, so no lane starts collective
// operation n + 1 before every lane has reached operation n (lockstep, as
// the hardware's single program counter). Collective operations alternate
// between two exchange buffers, so a lane writing operation n + 1's inputs
// cannot overwrite operation n's before every lane has read them. Lanes that
// do not all reach the same number of collective operations (divergent
// MFMA / shuffle) are reported by Run().
class LockstepWave {
 public:
  struct Exchange {
    float f[kLanes];
    uint16_t a[kLanes][4];
    uint16_t b[kLanes][4];
  };

  // Runs lane_fn(lane) for lanes 0..63 in lockstep. False if the lanes
  // diverged in their collective operations.
  template <class Fn>
  bool Run(Fn&& lane_fn) {
    std::function<void(int)> fn = lane_fn;
    fn_ = &fn;
    LockstepWave* const saved = current_;
    current_ = this;
    bool lockstep = true;
    for (int l = 0; l < kLanes; ++l) {
      getcontext(&lanes_[l]);
      lanes_[l].uc_stack.ss_sp = &stacks_[static_cast<size_t>(l) * kStackBytes];
      lanes_[l].uc_stack.ss_size = kStackBytes;
      lanes_[l].uc_link = &main_;
      makecontext(&lanes_[l], &LockstepWave::Entry, 0);
      done_[l] = false;
      ops_[l] = 0;
    }
    int live = kLanes;
    while (live > 0) {
      for (int l = 0; l < kLanes; ++l) {
        if (done_[l]) continue;
        lane_ = l;
        swapcontext(&main_, &lanes_[l]);
      }
      live = 0;
      for (int l = 0; l < kLanes; ++l) live += done_[l] ? 0 : 1;
      if (live != 0 && live != kLanes) lockstep = false;
      for (int l = 1; l < kLanes; ++l) lockstep &= ops_[l] == ops_[0];
    }
    current_ = saved;
    return lockstep;
  }

  static LockstepWave& Current() { return *current_; }
  int lane() const { return lane_; }

  // The exchange buffer of the calling lane's next collective operation.
  Exchange& NextExchange() { return exchange_[ops_[lane_]++ % 2]; }

  // Ends the calling lane's part of a collective operation.
  void Sync() { swapcontext(&lanes_[lane_], &main_); }

 private:
  static constexpr size_t kStackBytes = 128 * 1024;

  static void Entry() {
    LockstepWave& w = Current();
    const int lane = w.lane_;
    (*w.fn_)(lane);
    w.done_[lane] = true;
  }

  static inline thread_local LockstepWave* current_ = nullptr;
  std::function<void(int)>* fn_ = nullptr;
  ucontext_t main_;
  ucontext_t lanes_[kLanes];
  std::vector<char> stacks_ = std::vector<char>(kLanes * kStackBytes);
  bool done_[kLanes] = {};
  int64_t ops_[kLanes] = {};
  int lane_ = 0;
  Exchange exchange_[2];
};

// WaveAttention's operations on the CPU (see attention_mfma.h "Ops").
struct HostOps {
  using Frag = short __attribute__((vector_size(8)));
  using Acc = float __attribute__((vector_size(16)));

  static int LaneId() { return LockstepWave::Current().lane(); }

  static float ShflXor(float v, int lane_mask) {
    LockstepWave& w = LockstepWave::Current();
    const int lane = w.lane();
    LockstepWave::Exchange& x = w.NextExchange();
    x.f[lane] = v;
    w.Sync();
    return x.f[lane ^ lane_mask];
  }

  static Frag Load(const uint16_t* p) {
    Frag f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }

  // D = A * B + C for a 16x16x16 MFMA, this lane's 4 items. ISA lane table
  // (AMD Matrix Instruction Calculator, --register-layout):
  //   A[i][k] is item k % 4 of lane i + 16 * (k / 4)
  //   B[k][j] is item k % 4 of lane j + 16 * (k / 4)
  //   C/D[i][j] is item i % 4 of lane j + 16 * (i / 4)
  // Products of 16-bit values are exact in fp32; accumulation in fp32 in k
  // order (the hardware's order is not documented).
  template <bool kBf16>
  static Acc Mfma(Frag a, Frag b, Acc c) {
    LockstepWave& w = LockstepWave::Current();
    const int lane = w.lane();
    LockstepWave::Exchange& x = w.NextExchange();
    for (int v = 0; v < 4; ++v) {
      x.a[lane][v] = static_cast<uint16_t>(a[v]);
      x.b[lane][v] = static_cast<uint16_t>(b[v]);
    }
    w.Sync();
    Acc d;
    const int j = lane % 16;
    for (int v = 0; v < 4; ++v) {
      const int i = 4 * (lane / 16) + v;
      float acc = c[v];
      for (int k = 0; k < 16; ++k) {
        acc += ElemToFloat(x.a[i + 16 * (k / 4)][k % 4], kBf16) *
               ElemToFloat(x.b[j + 16 * (k / 4)][k % 4], kBf16);
      }
      d[v] = acc;
    }
    return d;
  }

  static float Exp2(float x) { return std::exp2(x); }

  template <bool kBf16>
  static uint16_t ToElem(float f) {
    return FloatToElem(f, kBf16);
  }
};

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

template <bool kBf16>
void CheckEmulatedMfma(std::mt19937& rng) {
  // Fill A, B, C as matrices; each lane loads its fragments with the
  // header's functions and runs HostOps::Mfma; D is gathered the same way.
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  float am[16][16], bm[16][16], cm[16][16], dm[16][16];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      am[i][j] = ElemToFloat(FloatToElem(u(rng), kBf16), kBf16);
      bm[i][j] = ElemToFloat(FloatToElem(u(rng), kBf16), kBf16);
      cm[i][j] = u(rng);
      dm[i][j] = NAN;
    }
  }
  LockstepWave wave;
  const bool lockstep = wave.Run([&](int lane) {
    HostOps::Frag a, b;
    HostOps::Acc c;
    for (int v = 0; v < 4; ++v) {
      a[v] = static_cast<short>(
          FloatToElem(am[AFragRow(lane)][AFragK(lane, v)], kBf16));
      b[v] = static_cast<short>(
          FloatToElem(bm[BFragK(lane, v)][BFragCol(lane)], kBf16));
      c[v] = cm[CFragRow(lane, v)][CFragCol(lane)];
    }
    const HostOps::Acc d = HostOps::Mfma<kBf16>(a, b, c);
    for (int v = 0; v < 4; ++v) dm[CFragRow(lane, v)][CFragCol(lane)] = d[v];
  });
  EXPECT_TRUE(lockstep);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double want = cm[i][j];
      for (int k = 0; k < 16; ++k) want += double{am[i][k]} * bm[k][j];
      EXPECT_NEAR(dm[i][j], want, 1e-4) << "D[" << i << "][" << j << "]";
    }
  }
}

TEST(AttentionMfmaTest, EmulatedMfmaIsAMatrixProduct) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  CheckEmulatedMfma<true>(rng);
  CheckEmulatedMfma<false>(rng);
}

TEST(AttentionMfmaTest, LockstepWaveReportsDivergence) {
  LockstepWave wave;
  EXPECT_TRUE(wave.Run([](int lane) { (void)HostOps::ShflXor(lane, 1); }));
  EXPECT_FALSE(wave.Run([](int lane) {
    if (lane < 32) (void)HostOps::ShflXor(lane, 1);
  }));
  // ShflXor moves values between lanes.
  float got[kLanes];
  EXPECT_TRUE(wave.Run([&](int lane) {
    got[lane] = HostOps::ShflXor(static_cast<float>(lane), kRowLaneXor1);
  }));
  for (int l = 0; l < kLanes; ++l) EXPECT_EQ(got[l], l ^ 32);
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
  int32_t window_left = -1;                // sliding window, -1 = none
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
        // Window: key position (j, or lp + j) >= lp + i - window_left.
        const int32_t lo =
            pr.window_left >= 0 ? lp + i - pr.window_left : INT32_MIN;
        for (int32_t j = 0; j < lp; ++j) {
          const float* kr = &pr.kp[b][(static_cast<size_t>(j) * hkv + kvh) * D];
          logits.push_back(j >= lo
                               ? dot_q([&](int32_t d) { return double{kr[d]}; })
                               : -INFINITY);
        }
        for (int32_t j = 0; j <= i; ++j) {
          const size_t kr = (static_cast<size_t>(q0 + j) * hkv + kvh) * D;
          logits.push_back(lp + j >= lo ? dot_q([&](int32_t d) {
            return double{ElemToFloat(pr.k_ext[kr + d], pr.bf16)};
          })
                                        : -INFINITY);
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

// ExtendMfmaKernel on the host: the same grid, block and tile loop; LDS
// tiles filled as the kernel fills them; every wavefront runs
// WaveAttention<D, kN, kBf16, HostOps> (the kernel's wavefront code) in a
// LockstepWave. Returns false if a wavefront's lanes diverged.
template <int D, int kN, bool kBf16>
bool EmulateExtendMfma(const Problem& pr, std::vector<uint16_t>& out,
                       std::vector<float>& lse) {
  constexpr int kWaves = 4, kBlockM = 16 * kWaves;
  const uint16_t nan_bits = kBf16 ? 0x7fc0 : 0x7e00;
  const KvCacheGeometry& g = pr.g;
  const int32_t hq = pr.num_q_heads, hkv = g.num_kv_heads;
  const int32_t group = hq / hkv;
  const int32_t batch = static_cast<int32_t>(pr.qo_indptr.size()) - 1;
  int32_t max_le = 0;
  for (int32_t b = 0; b < batch; ++b) {
    max_le = std::max(max_le, pr.qo_indptr[b + 1] - pr.qo_indptr[b]);
  }
  const int32_t num_m_blocks = (max_le + kBlockM - 1) / kBlockM;
  LockstepWave wave;
  bool lockstep = true;
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
        const BlockTiles tiles(lp, le, m0, kBlockM, kN, pr.window_left);
        const int32_t num_tiles = tiles.num_tiles();
        // The block's LDS tiles, one pair per iteration. Poisoned first: a
        // fragment read of anything not written (padding, a wrong offset)
        // turns the row into NaN.
        std::vector<std::vector<uint16_t>> k_tiles(num_tiles),
            vt_tiles(num_tiles);
        for (int32_t it = 0; it < num_tiles; ++it) {
          const bool prefix = tiles.prefix(it);
          const int32_t key0 = tiles.key0(it, kN);
          k_tiles[it].assign(kN * KTileStride<D>(), nan_bits);
          vt_tiles[it].assign(D * VtTileStride<kN>(), nan_bits);
          const std::vector<uint16_t>& ksrc = prefix ? pr.k_cache : pr.k_ext;
          const std::vector<uint16_t>& vsrc = prefix ? pr.v_cache : pr.v_ext;
          for (int r = 0; r < kN; ++r) {  // one thread per key: slot bases
            const int32_t key = key0 + r;
            int64_t kb = -1, vb = -1;
            if (prefix && key < lp) {
              const int64_t slot = pr.kv_indices[kv_start + key];
              kb = g.KOffset(slot, kvh, 0);
              vb = g.VOffset(slot, kvh, 0);
            } else if (!prefix && key < le) {
              kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
            }
            for (int chunk = 0; chunk < D / 8; ++chunk) {
              const int64_t kd =
                  prefix ? g.KOffset(0, kvh, chunk * 8) - g.KOffset(0, kvh, 0)
                         : chunk * 8;
              const int64_t vd =
                  prefix ? g.VOffset(0, kvh, chunk * 8) - g.VOffset(0, kvh, 0)
                         : chunk * 8;
              const int64_t v_step =
                  prefix && g.layout == KvLayout::kVllm ? g.VDimStride() : 1;
              for (int e = 0; e < 8; ++e) {
                k_tiles[it][KTileOffset<D>(r, chunk * 8 + e)] =
                    kb >= 0 ? ksrc[kb + kd + e] : 0;
                vt_tiles[it][VtTileOffset<kN>(r, chunk * 8 + e)] =
                    vb >= 0 ? vsrc[vb + vd + e * v_step] : 0;
              }
            }
          }
        }
        for (int w = 0; w < kWaves; ++w) {
          const int32_t wave_row0 = m0 + w * 16;
          lockstep &= wave.Run([&](int lane) {
            const int32_t row = wave_row0 + LaneRow(lane);
            const size_t orow = static_cast<size_t>(qo_start + row) * hq + h;
            WaveAttention<D, kN, kBf16, HostOps> att;
            att.Init(row < le ? &pr.q[orow * D] : nullptr);
            for (int32_t it = 0; it < num_tiles; ++it) {
              att.Tile(k_tiles[it].data(), vt_tiles[it].data(),
                       tiles.prefix(it), tiles.key0(it, kN), lp, wave_row0,
                       pr.scale_log2, pr.window_left);
            }
            att.Finish();
            if (row < le) att.Store(&out[orow * D], &lse[orow]);
          });
        }
      }
    }
  }
  return lockstep;
}

struct Case {
  KvLayout layout;
  int32_t page_size;
  int32_t head_dim;
  bool bf16;
  int32_t window_left = -1;  // sliding window (W - 1), -1 = none
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << KvLayoutName(c.layout) << " page " << c.page_size << " D "
      << c.head_dim << (c.bf16 ? " bf16" : " fp16") << " window_left "
      << c.window_left;
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
  Problem pr =
      MakeProblem(rng, seqs, c.layout, c.page_size, c.head_dim, c.bf16);
  pr.window_left = c.window_left;
  const uint16_t poison = c.bf16 ? 0x7fc0 : 0x7e00;
  std::vector<uint16_t> out(pr.q.size(), poison);
  std::vector<float> lse(pr.q.size() / c.head_dim, NAN);
  bool lockstep = false;
  if (c.head_dim == 64) {
    lockstep = c.bf16 ? EmulateExtendMfma<64, 64, true>(pr, out, lse)
                      : EmulateExtendMfma<64, 64, false>(pr, out, lse);
  } else if (c.head_dim == 128) {
    lockstep = c.bf16 ? EmulateExtendMfma<128, 64, true>(pr, out, lse)
                      : EmulateExtendMfma<128, 64, false>(pr, out, lse);
  } else {
    lockstep = c.bf16 ? EmulateExtendMfma<256, 32, true>(pr, out, lse)
                      : EmulateExtendMfma<256, 32, false>(pr, out, lse);
  }
  EXPECT_TRUE(lockstep) << "a wavefront's lanes diverged in MFMA / shuffles";
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
                      Case{KvLayout::kVllm, 16, 128, false},
                      // Sliding windows W = 1, 17 (prefix 130: the block's
                      // first prefix tile is skipped), 64 (a whole tile).
                      Case{KvLayout::kBSHD, 16, 64, true, 0},
                      Case{KvLayout::kVllm, 16, 128, false, 16},
                      Case{KvLayout::kBHSD, 1, 128, true, 63},
                      Case{KvLayout::kBSHD, 4, 256, true, 16}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(KvLayoutName(c.layout)) + "_p" +
             std::to_string(c.page_size) + "_d" + std::to_string(c.head_dim) +
             (c.bf16 ? "_bf16" : "_fp16") +
             (c.window_left >= 0 ? "_wl" + std::to_string(c.window_left) : "");
    });

}  // namespace
}  // namespace radixkv::worker::gpu::mfma
