#include "worker/gpu/gpu_gemm_tuner.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/gpu/gpu_runtime_compat.h"
#include "worker/gpu/model_kernels.h"

#if !defined(RADIXKV_GPU_AMD)
#include <cublasLt.h>
#endif

namespace radixkv::worker::gpu {
namespace {

BlasDataType BlasType(DType d) {
  switch (d) {
    case DType::kF32:
      return kBlasF32;
    case DType::kBF16:
      return kBlasBF16;
    case DType::kF16:
      return kBlasF16;
  }
  return kBlasF32;
}

// Timed launches per candidate (after one untimed launch).
constexpr int kTimedRuns = 5;
// cuBLASLt heuristic candidates asked for, and how many of the first ones
// also get split-K variants.
constexpr int kHeuristicAlgos = 8;
constexpr int kSplitKBases = 3;
constexpr int kSplitK[] = {2, 4, 8, 16};

bool IsPow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

enum class Kind : int { kGemmEx, kStreaming, kLt };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kGemmEx:
      return "GemmEx";
    case Kind::kStreaming:
      return "streaming";
    case Kind::kLt:
      return "cublasLt";
  }
  return "?";
}

}  // namespace

BlasStatus RunGemmEx(BlasHandle blas, DType dtype, const void* a, const void* w,
                     float* c, int64_t m, int64_t n, int64_t k, float beta) {
  // Row-major C = A W^T is column-major C^T = W A^T: op(W) = W^T, op(A) = A.
  const float alpha = 1.0f;
  const BlasDataType t = BlasType(dtype);
  return BlasGemmEx(blas, /*trans_a=*/true, /*trans_b=*/false,
                    static_cast<int>(n), static_cast<int>(m),
                    static_cast<int>(k), &alpha, w, t, static_cast<int>(k), a,
                    t, static_cast<int>(k), &beta, c, kBlasF32,
                    static_cast<int>(n));
}

#if !defined(RADIXKV_GPU_AMD)
// The cuBLASLt handle and the one operation descriptor every shape shares
// (fp32 compute and scale, op(W) = T, op(A) = N: as RunGemmEx).
struct GemmTuner::Lt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  ~Lt() {
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};
// Column-major layouts of one shape: W [k, n] (ld k), A [k, m] (ld k), C
// [n, m] (ld n); and the chosen algorithm.
struct LtShape {
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  ~LtShape() {
    for (cublasLtMatrixLayout_t l : {w, a, c}) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
  }
};
#else
struct GemmTuner::Lt {};
struct LtShape {};
#endif

struct GemmTuner::Plan {
  Kind kind = Kind::kGemmEx;
  double us = 0;          // the choice's time
  double default_us = 0;  // GemmEx's (or the streaming kernel's, m <= 2)
  int candidates = 0;
  LtShape lt;
};

GemmTuner::GemmTuner() = default;
GemmTuner::~GemmTuner() = default;

absl::Status GemmTuner::Init(hipStream_t stream, BlasHandle blas, DType dtype) {
  stream_ = stream;
  blas_ = blas;
  dtype_ = dtype;
  lt_ = std::make_unique<Lt>();
#if !defined(RADIXKV_GPU_AMD)
  if (cublasLtCreate(&lt_->handle) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescCreate(&lt_->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) !=
          CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError("cuBLASLt handle creation failed");
  }
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(lt_->op, CUBLASLT_MATMUL_DESC_TRANSA, &t,
                                 sizeof(t));
  cublasLtMatmulDescSetAttribute(lt_->op, CUBLASLT_MATMUL_DESC_TRANSB, &n,
                                 sizeof(n));
#endif
  return absl::OkStatus();
}

void GemmTuner::BindWorkspace(void* workspace, size_t bytes) {
  workspace_ = workspace;
  workspace_bytes_ = bytes;
}

void GemmTuner::BindScratch(float* scratch, size_t floats) {
  scratch_ = scratch;
  scratch_floats_ = floats;
}

namespace {

// Enqueues one implementation; false when it cannot run the shape.
struct Launch {
  hipStream_t stream;
  BlasHandle blas;
  DType dtype;
  const GemmTuner::Lt* lt;
  void* workspace;

  bool operator()(Kind kind, const LtShape& s, const void* a, const void* w,
                  float* c, int64_t m, int64_t n, int64_t k, float beta) const {
    switch (kind) {
      case Kind::kGemmEx:
        return RunGemmEx(blas, dtype, a, w, c, m, n, k, beta) == kBlasSuccess;
      case Kind::kStreaming:
        return LaunchSmallBatchGemm(
                   a, w, c, static_cast<int32_t>(m), static_cast<int32_t>(n),
                   static_cast<int32_t>(k), beta, dtype, stream) == 0;
      case Kind::kLt: {
#if !defined(RADIXKV_GPU_AMD)
        const float alpha = 1.0f;
        return cublasLtMatmul(lt->handle, lt->op, &alpha, w, s.w, a, s.a, &beta,
                              c, s.c, c, s.c, &s.algo, workspace, s.workspace,
                              stream) == CUBLAS_STATUS_SUCCESS;
#else
        return false;
#endif
      }
    }
    return false;
  }
};

}  // namespace

absl::StatusOr<bool> GemmTuner::Run(const void* a, const void* w, float* c,
                                    int64_t m, int64_t n, int64_t k,
                                    float beta) {
  const Key key{m, n, k, beta != 0.0f};
  auto it = plans_.find(key);
  Plan* plan = it == plans_.end() ? nullptr : it->second.get();
  if (plan == nullptr) {
    hipStreamCaptureStatus capture = hipStreamCaptureStatusNone;
    if (!IsPow2(m) || m > kMaxTunedRows || dtype_ == DType::kF32 ||
        (beta != 0.0f && static_cast<size_t>(m * n) > scratch_floats_) ||
        hipStreamIsCapturing(stream_, &capture) != hipSuccess ||
        capture != hipStreamCaptureStatusNone) {
      return false;
    }
    absl::StatusOr<Plan*> tuned = Tune(key, a, w, c, beta);
    if (!tuned.ok()) return tuned.status();
    plan = *tuned;
  }
  const Launch launch{stream_, blas_, dtype_, lt_.get(), workspace_};
  if (!launch(plan->kind, plan->lt, a, w, c, m, n, k, beta)) {
    return absl::InternalError(absl::StrCat(
        KindName(plan->kind), " GEMM failed M=", m, " N=", n, " K=", k));
  }
  return true;
}

namespace {

// cuBLASLt candidates of one shape: the heuristic's algorithms, then
// split-K variants of the first kSplitKBases that support it, each checked
// against the shape and the workspace.
#if !defined(RADIXKV_GPU_AMD)
struct LtCandidate {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
};

std::vector<LtCandidate> LtCandidates(cublasLtHandle_t lt,
                                      cublasLtMatmulDesc_t op, const LtShape& s,
                                      size_t max_workspace) {
  std::vector<LtCandidate> out;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) {
    return out;
  }
  const uint64_t ws = max_workspace;
  cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t results[kHeuristicAlgos] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt, op, s.w, s.a, s.c, s.c, pref,
                                     kHeuristicAlgos, results,
                                     &found) != CUBLAS_STATUS_SUCCESS) {
    found = 0;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) {
      out.push_back({results[i].algo, results[i].workspaceSize});
    }
  }
  const size_t bases = std::min<size_t>(out.size(), kSplitKBases);
  for (size_t i = 0; i < bases; ++i) {
    int32_t splitk_support = 0;
    uint32_t schemes = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(
        &out[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_support,
        sizeof(splitk_support), &written);
    cublasLtMatmulAlgoCapGetAttribute(&out[i].algo,
                                      CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK,
                                      &schemes, sizeof(schemes), &written);
    if (splitk_support == 0 ||
        (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0) {
      continue;
    }
    for (int32_t splits : kSplitK) {
      cublasLtMatmulAlgo_t algo = out[i].algo;
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulAlgoConfigSetAttribute(
          &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits));
      cublasLtMatmulAlgoConfigSetAttribute(
          &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
          sizeof(scheme));
      cublasLtMatmulHeuristicResult_t check = {};
      if (cublasLtMatmulAlgoCheck(lt, op, s.w, s.a, s.c, s.c, &algo, &check) ==
              CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= max_workspace) {
        out.push_back({algo, check.workspaceSize});
      }
    }
  }
  return out;
}
#endif

// Mean microseconds of kTimedRuns launches of `run` after one untimed
// launch; -1 when it cannot run the shape.
template <typename Fn>
absl::StatusOr<double> TimeCandidate(hipStream_t stream, hipEvent_t start,
                                     hipEvent_t stop, const Fn& run) {
  if (!run()) return -1.0;
  hipEventRecord(start, stream);
  for (int i = 0; i < kTimedRuns; ++i) run();
  hipEventRecord(stop, stream);
  if (hipError_t e = hipEventSynchronize(stop); e != hipSuccess) {
    return absl::InternalError(
        absl::StrCat("GEMM tuning: ", hipGetErrorString(e)));
  }
  float ms = 0;
  hipEventElapsedTime(&ms, start, stop);
  return 1e3 * ms / kTimedRuns;
}

}  // namespace

absl::StatusOr<GemmTuner::Plan*> GemmTuner::Tune(const Key& key, const void* a,
                                                 const void* w, float* c,
                                                 float beta) {
  const auto [m, n, k, accumulate] = key;
  auto plan = std::make_unique<Plan>();
  float* out = accumulate ? scratch_ : c;
  const Launch launch{stream_, blas_, dtype_, lt_.get(), workspace_};
  hipEvent_t start = nullptr, stop = nullptr;
  hipEventCreate(&start);
  hipEventCreate(&stop);
  double best = -1;
  auto consider = [&](Kind kind, const LtShape& s) -> absl::Status {
    absl::StatusOr<double> us = TimeCandidate(stream_, start, stop, [&] {
      return launch(kind, s, a, w, out, m, n, k, beta);
    });
    if (!us.ok()) return us.status();
    if (*us < 0) return absl::OkStatus();
    ++plan->candidates;
    if (kind == Kind::kGemmEx) plan->default_us = *us;
    if (best < 0 || *us < best) {
      best = *us;
      plan->kind = kind;
      plan->us = *us;
      return absl::OkStatus();
    }
    return absl::OkStatus();
  };
  absl::Status status = consider(Kind::kGemmEx, plan->lt);
  if (status.ok() && m <= 16) status = consider(Kind::kStreaming, plan->lt);
#if !defined(RADIXKV_GPU_AMD)
  LtShape& s = plan->lt;
  const cudaDataType_t t = BlasType(dtype_);
  if (status.ok() &&
      cublasLtMatrixLayoutCreate(&s.w, t, k, n, k) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&s.a, t, k, m, k) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&s.c, CUDA_R_32F, n, m, n) ==
          CUBLAS_STATUS_SUCCESS) {
    LtShape trial;  // borrows the layouts while candidates are timed
    trial.w = s.w;
    trial.a = s.a;
    trial.c = s.c;
    cublasLtMatmulAlgo_t chosen{};
    size_t chosen_ws = 0;
    for (const LtCandidate& cand :
         LtCandidates(lt_->handle, lt_->op, s, workspace_bytes_)) {
      if (!status.ok()) break;
      trial.algo = cand.algo;
      trial.workspace = cand.workspace;
      const Kind before = plan->kind;
      const double before_us = plan->us;
      status = consider(Kind::kLt, trial);
      if (plan->kind == Kind::kLt &&
          (before != Kind::kLt || plan->us < before_us)) {
        chosen = cand.algo;
        chosen_ws = cand.workspace;
      }
    }
    trial.w = trial.a = trial.c = nullptr;
    s.algo = chosen;
    s.workspace = chosen_ws;
  }
#endif
  hipEventDestroy(start);
  hipEventDestroy(stop);
  if (!status.ok()) return status;
  if (best < 0) return absl::InternalError("GEMM tuning: no candidate ran");
  Plan* p = plan.get();
  plans_[key] = std::move(plan);
  return p;
}

std::string GemmTuner::Describe() const {
  std::string out;
  for (const auto& [key, p] : plans_) {
    const auto [m, n, k, accumulate] = key;
    absl::StrAppendFormat(
        &out,
        "gemm m=%d n=%d k=%d beta=%d: %s %.1f us (GemmEx %.1f us, %d "
        "candidates)\n",
        m, n, k, accumulate ? 1 : 0, KindName(p->kind), p->us, p->default_us,
        p->candidates);
  }
  return out;
}

}  // namespace radixkv::worker::gpu
