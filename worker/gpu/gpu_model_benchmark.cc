// GPU backend benchmark on a random-weight checkpoint (make_random_checkpoint;
// default shape 16 layers, hidden 2048, 32 heads, 8 KV heads, head_dim 64,
// vocab 32000, bf16):
//   - decode throughput (output tokens/s, greedy sampling on the device,
//     graphs on) at the given batch sizes with --context-token contexts, and
//     the same step eagerly (graphs off);
//   - step breakdown: attention-only and GEMM-only replays of the step's
//     kernels (device events) as fractions of the graph step, launch
//     overhead = eager step - graph step;
//   - roofline floor of the step: (weight bytes + KV bytes read) / copy
//     bandwidth vs GEMM FLOPs / peak, with both ceilings measured in the
//     same process first (device_ceilings.h; --copy_gbps / --gemm_tflops
//     override them);
//   - A/B of GEMM autotuning (gpu_gemm_tuner.h): the graph step with the
//     default GEMM rule and with per-shape tuned GEMMs, interleaved
//     --ab_rounds times in this process, each arm's floor / step;
//   - the serving step (ForwardSample) sampled on the device vs on the
//     host, and at B = 64 the logprob overhead per decode step: the same
//     device-sampled step with logprobs = 5 on every row vs without;
//   - TTFT of a --ttft_prompt-token prompt cold and with a --ttft_prefix
//     cached prefix, each against its GEMM-bound floor (FLOPs / peak);
//   - optionally the CPU backend (fp32) for scale;
//   - with --profile_batch, only one decode step inside the profiler range,
//     with --profile_prefill one cold prefill (tools/gpu/kernel_breakdown.py
//     turns ncu's CSV into a table).
// Prints a table; every number is a median of repeated runs after warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/gpu/device_ceilings.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/gpu/profiler_range.h"
#include "worker/sampler.h"

ABSL_FLAG(std::string, model_dir, "", "Checkpoint (make_random_checkpoint).");
ABSL_FLAG(std::string, batches, "1,16,64,256", "Decode batch sizes.");
ABSL_FLAG(int, context, 1024, "Context tokens of each decoding sequence.");
ABSL_FLAG(int, decode_steps, 32, "Timed decode steps per batch size.");
ABSL_FLAG(int, ttft_prompt, 4096, "TTFT prompt tokens.");
ABSL_FLAG(int, ttft_prefix, 3584, "TTFT cached prefix tokens.");
ABSL_FLAG(bool, cpu, true, "Also time the CPU backend (B=1 decode, prefill).");
ABSL_FLAG(int, cpu_threads, 16, "CPU backend threads.");
ABSL_FLAG(double, copy_gbps, 0,
          "Copy bandwidth ceiling (GB/s); 0 = measured in this run.");
ABSL_FLAG(double, gemm_tflops, 0,
          "bf16 GEMM ceiling (TFLOP/s); 0 = measured in this run.");
ABSL_FLAG(int, ab_rounds, 2,
          "Interleaved rounds of the GEMM autotuning A/B (0 = off).");
ABSL_FLAG(bool, serving, true,
          "Also time the serving step with device and host sampling.");
ABSL_FLAG(bool, ttft, true, "Also time TTFT.");
ABSL_FLAG(bool, fuse_rms_norm, true,
          "GpuModelExecutorOptions::fuse_rms_norm (false: the A/B arm with "
          "a separate RMSNorm kernel).");
ABSL_FLAG(std::string, label, "", "Checkpoint label of the ROOFLINE rows.");
ABSL_FLAG(int, profile_prefill, 0,
          "> 0: only profile: after a warm-up, one cold prefill of this many "
          "tokens inside the profiler range.");
ABSL_FLAG(int, profile_batch, 0,
          "> 0: only profile: after warm-up, one graph-replayed greedy decode "
          "step of this batch size inside the profiler range "
          "(profiler_range.h; run under ncu --profile-from-start off "
          "--graph-profiling node), then exit.");

namespace radixkv::worker {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

int32_t Token(int64_t i, int32_t vocab) {
  return static_cast<int32_t>(3 + (i * 2654435761ll) % (vocab - 3));
}

// Prefills sequences [0, n) with `context` tokens each at slots
// seq * stride + [0, context), up to `chunk` tokens per step.
void PrefillContexts(ModelExecutor& e, int n, int context, int64_t stride,
                     int chunk) {
  const int32_t V = e.config().vocab_size;
  int seq = 0;
  while (seq < n) {
    ForwardBatch b;
    b.qo_indptr = {0};
    b.kv_indptr = {0};
    while (seq < n && static_cast<int>(b.input_ids.size()) + context <= chunk) {
      for (int i = 0; i < context; ++i) {
        b.input_ids.push_back(Token(seq * 131 + i, V));
        b.positions.push_back(i);
        b.out_cache_loc.push_back(seq * stride + i);
      }
      b.qo_indptr.push_back(static_cast<int32_t>(b.input_ids.size()));
      b.kv_indptr.push_back(0);
      ++seq;
    }
    std::vector<float> logits;
    Check(e.Forward(b, &logits), "prefill");
  }
}

// One decode step of sequences [0, B) at context length ctx (+1 new token).
ForwardBatch DecodeBatch(int B, int ctx, int64_t stride, int32_t vocab,
                         int step) {
  ForwardBatch b;
  b.is_decode = true;
  b.qo_indptr = {0};
  b.kv_indptr = {0};
  for (int s = 0; s < B; ++s) {
    b.input_ids.push_back(Token(s + step, vocab));
    b.positions.push_back(ctx);
    b.out_cache_loc.push_back(s * stride + ctx);
    for (int i = 0; i <= ctx; ++i) b.kv_indices.push_back(s * stride + i);
    b.qo_indptr.push_back(s + 1);
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
  }
  return b;
}

// What every decode measurement shares. Sequence s owns the slots
// [s * stride, s * stride + stride).
struct DecodeSetup {
  double copy_gbps = 0;  // ceilings of this run
  double gemm_tflops = 0;
  int ctx = 0;
  int steps = 0;
  int64_t stride = 0;
  int32_t small_rows_default = 0;
  double kv_bytes_per_token = 0;
  double params = 0;  // weight elements (bf16)
};

struct Row {
  int b;
  double graph_ms, eager_ms, tok_s, attn_ms, gemm_ms, floor_ms, vendor_ms,
      streaming_ms, serve_device_ms, serve_host_ms;
  // GEMM autotuning arm (-1 = not run): graph step, GEMMs-only replay.
  double tuned_ms = -1, tuned_gemm_ms = -1;
  // The serving step with logprobs = 5 on every row (device processors; -1 =
  // not run: B != 64 or --serving=false).
  double serve_logprobs_ms = -1;
};

// Median seconds of a greedy decode step on the device (3 warm-up steps);
// the first failing step's status.
absl::StatusOr<double> TryTimeDecode(GpuModelExecutor& e,
                                     const std::vector<ForwardBatch>& steps,
                                     bool graphs, int32_t small_rows) {
  std::vector<GpuSamplingParams> params(steps[0].qo_indptr.size() - 1);
  std::vector<int32_t> tokens;
  e.set_small_batch_gemm_max_rows(small_rows);
  e.set_use_graphs(graphs);
  for (int w = 0; w < 3; ++w) {
    if (absl::Status s = e.ForwardSample(steps[0], params, &tokens); !s.ok()) {
      return s;
    }
  }
  std::vector<double> t;
  for (const ForwardBatch& b : steps) {
    auto a = Clock::now();
    if (absl::Status s = e.ForwardSample(b, params, &tokens); !s.ok()) {
      return s;
    }
    t.push_back(Seconds(a));
  }
  return Median(t);
}

double TimeDecode(GpuModelExecutor& e, const std::vector<ForwardBatch>& steps,
                  bool graphs, int32_t small_rows) {
  absl::StatusOr<double> t = TryTimeDecode(e, steps, graphs, small_rows);
  Check(t.status(), "decode");
  return *t;
}

// One graph-replayed greedy decode step of B sequences inside the profiler
// range, after the warm-up that captures its graph; prints the step's wall
// time outside the profiler for reference.
void ProfileOneStep(GpuModelExecutor& e, int B, const DecodeSetup& d) {
  std::vector<ForwardBatch> steps;
  for (int s = 0; s < 4; ++s) {
    steps.push_back(DecodeBatch(B, d.ctx, d.stride, e.config().vocab_size, s));
  }
  std::printf("profile: decode B=%d step %.3f ms (graph, unprofiled)\n", B,
              TimeDecode(e, steps, true, d.small_rows_default) * 1e3);
  std::vector<GpuSamplingParams> params(B);
  std::vector<int32_t> tokens;
  Check(gpu::StartProfilerRange(), "profiler");
  Check(e.ForwardSample(steps[0], params, &tokens), "profiled step");
  Check(gpu::StopProfilerRange(), "profiler");
  std::printf("profile: graph replayed %d\n", e.last_step().graph_replayed);
}

// Median seconds of the serving path (ModelExecutor::ForwardSample, as the
// scheduler calls it, graphs on), sampled on the device (B token ids copied
// back) or by ModelExecutor's default implementation (Forward: B x vocab
// fp32 logits copied back, then the host Sampler), over at most 16 steps.
double TimeServing(GpuModelExecutor& e, const std::vector<ForwardBatch>& steps,
                   absl::Span<const SequenceSampling> sampling,
                   int32_t small_rows, bool device) {
  std::vector<int32_t> tokens;
  e.set_small_batch_gemm_max_rows(small_rows);
  e.set_use_graphs(true);
  auto step = [&](const ForwardBatch& fb) {
    return device ? e.ForwardSample(fb, sampling, &tokens)
                  : e.ModelExecutor::ForwardSample(fb, sampling, &tokens);
  };
  for (int w = 0; w < 3; ++w) Check(step(steps[0]), "warm-up");
  std::vector<double> t;
  for (int s = 0; s < std::min(static_cast<int>(steps.size()), 16); ++s) {
    auto a = Clock::now();
    Check(step(steps[s]), "serving step");
    t.push_back(Seconds(a));
  }
  return Median(t);
}

// Every number of one batch size's table rows.
Row MeasureBatch(GpuModelExecutor& e, int B, const DecodeSetup& d) {
  const model::ModelConfig& c = e.config();
  std::vector<ForwardBatch> steps;
  for (int s = 0; s < d.steps; ++s) {
    steps.push_back(DecodeBatch(B, d.ctx, d.stride, c.vocab_size, s));
  }
  const int32_t rows_default = d.small_rows_default;
  const double vendor = B <= 16 ? TimeDecode(e, steps, true, 0) : -1;
  const double streaming = B <= 16 ? TimeDecode(e, steps, true, 16) : -1;
  const double eager = TimeDecode(e, steps, false, rows_default);
  // Temperature 0.7, top-k 50, top-p 0.9.
  std::vector<SequenceSampling> sampling(B);
  std::vector<std::unique_ptr<Sampler>> host_samplers;
  for (int b = 0; b < B; ++b) {
    SamplingParams sp;
    sp.temperature = 0.7f;
    sp.top_k = 50;
    sp.top_p = 0.9f;
    sp.seed = 1000 + b;
    host_samplers.push_back(std::make_unique<Sampler>(sp));
    sampling[b].temperature = sp.temperature;
    sampling[b].top_k = sp.top_k;
    sampling[b].top_p = sp.top_p;
    sampling[b].seed = sp.seed;
    sampling[b].host_sampler = host_samplers.back().get();
  }
  const bool serving = absl::GetFlag(FLAGS_serving);
  const double serve_device =
      serving ? TimeServing(e, steps, sampling, rows_default, true) : -1;
  const double serve_host =
      serving ? TimeServing(e, steps, sampling, rows_default, false) : -1;
  // The same batch with the sampled token's logprob and the top 5 (both arms
  // on the device path: logits stay on the device, B x 6 values come back).
  double serve_logprobs = -1;
  if (serving && B == 64) {
    std::vector<SequenceSampling> with_logprobs = sampling;
    std::vector<SampledToken> sampled(B);
    for (int b = 0; b < B; ++b) {
      with_logprobs[b].logprobs = 5;
      with_logprobs[b].sampled = &sampled[b];
    }
    serve_logprobs = TimeServing(e, steps, with_logprobs, rows_default, true);
  }
  // Default GEMM rule (A) and autotuned GEMMs (B), interleaved; each arm's
  // best median over the rounds.
  double graph = TimeDecode(e, steps, true, rows_default);
  if (!e.last_step().graph_replayed) std::printf("WARNING: no graph\n");
  auto attn = e.TimeAttentionOnly(20);
  auto gemm = e.TimeGemmsOnly(20);
  double tuned = -1, tuned_gemm = -1;
  for (int r = 0; r < absl::GetFlag(FLAGS_ab_rounds); ++r) {
    e.set_gemm_autotune(true);
    // A failing tuned arm is reported and dropped; arm A stands.
    absl::StatusOr<double> tt = TryTimeDecode(e, steps, true, rows_default);
    if (!tt.ok()) {
      std::printf("WARNING: autotuned arm, B = %d: %s\n", B,
                  tt.status().ToString().c_str());
      e.set_gemm_autotune(false);
      break;
    }
    const double t = *tt;
    if (!e.last_step().graph_replayed) std::printf("WARNING: no graph\n");
    auto g = e.TimeGemmsOnly(20);
    tuned = tuned < 0 ? t : std::min(tuned, t);
    if (g.ok()) tuned_gemm = tuned_gemm < 0 ? *g : std::min(tuned_gemm, *g);
    e.set_gemm_autotune(false);
    if (r > 0)
      graph = std::min(graph, TimeDecode(e, steps, true, rows_default));
  }
  const double bytes =
      e.weight_bytes() + B * (d.ctx + 1) * d.kv_bytes_per_token;
  const double flops = 2.0 * d.params * B;
  const double floor_s =
      std::max(bytes / (d.copy_gbps * 1e9), flops / (d.gemm_tflops * 1e12));
  // Progress line: a run cut short by its timeout still shows the arms.
  std::printf("decode B=%d: floor %.3f ms, A %.3f ms, B (autotuned) %.3f ms\n",
              B, floor_s * 1e3, graph * 1e3, tuned * 1e3);
  std::fflush(stdout);
  Row row{B,
          graph * 1e3,
          eager * 1e3,
          B / graph,
          attn.ok() ? *attn * 1e3 : -1,
          gemm.ok() ? *gemm * 1e3 : -1,
          floor_s * 1e3,
          vendor * 1e3,
          streaming * 1e3,
          serve_device * 1e3,
          serve_host * 1e3,
          tuned > 0 ? tuned * 1e3 : -1,
          tuned_gemm > 0 ? tuned_gemm * 1e3 : -1};
  row.serve_logprobs_ms = serve_logprobs > 0 ? serve_logprobs * 1e3 : -1;
  return row;
}

// Seconds of one prefill of `total` prompt tokens at slots slot0 + [0,
// total), the first `cached` already in the pool.
double TimePrefill(GpuModelExecutor& e, int64_t slot0, int cached, int total) {
  ForwardBatch b;
  for (int i = cached; i < total; ++i) {
    b.input_ids.push_back(Token(777 + i, e.config().vocab_size));
    b.positions.push_back(i);
    b.out_cache_loc.push_back(slot0 + i);
  }
  for (int i = 0; i < cached; ++i) b.kv_indices.push_back(slot0 + i);
  b.qo_indptr = {0, total - cached};
  b.kv_indptr = {0, cached};
  std::vector<GpuSamplingParams> p(1);
  std::vector<int32_t> t;
  auto a = Clock::now();
  Check(e.ForwardSample(b, p, &t), "ttft");
  return Seconds(a);
}

struct CpuNumbers {
  double decode_ms = -1;
  double prefill_tok_s = -1;
};

// The CPU backend (fp32) on the same checkpoint: one prefill of ctx
// tokens, then the median of 4 B=1 decode steps.
CpuNumbers MeasureCpu(const std::string& dir, int ctx, int64_t stride,
                      int32_t vocab) {
  CpuModelExecutorOptions co;
  co.model_dir = dir;
  co.kv_capacity_slots = 4 * stride;
  co.num_threads = absl::GetFlag(FLAGS_cpu_threads);
  auto cpu = CpuModelExecutor::Create(co);
  Check(cpu.status(), "cpu create");
  CpuNumbers n;
  auto a = Clock::now();
  PrefillContexts(**cpu, 1, ctx, stride, ctx);
  n.prefill_tok_s = ctx / Seconds(a);
  std::vector<double> t;
  std::vector<float> logits;
  for (int s = 0; s < 4; ++s) {
    ForwardBatch b = DecodeBatch(1, ctx, stride, vocab, s);
    auto a2 = Clock::now();
    Check((*cpu)->Forward(b, &logits), "cpu decode");
    t.push_back(Seconds(a2));
  }
  n.decode_ms = Median(t) * 1e3;
  return n;
}

// The roofline table: ceilings of this run, the floor, each arm's step and
// floor / step. Rows start with "| <label> |" for roofline_run.sh.
void PrintRoofline(const std::vector<Row>& rows, const DecodeSetup& d,
                   double weight_gb) {
  const std::string label = absl::GetFlag(FLAGS_label);
  std::printf(
      "\nROOFLINE (%s: weights %.2f GB; copy %.0f GB/s, bf16 GEMM %.0f "
      "TFLOP/s measured in this run; floor = max((weights + KV read) / "
      "copy, 2 params B / GEMM); A = default GEMM rule, B = autotuned GEMMs)\n"
      "| checkpoint | batch | floor ms | step ms A | floor/step A | step ms B "
      "| floor/step B | B / A | GEMMs ms A | GEMMs ms B | GEMM GB/s A | GEMM "
      "GB/s B |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      label.c_str(), weight_gb, d.copy_gbps, d.gemm_tflops);
  for (const Row& r : rows) {
    std::printf(
        "| %s | %d | %.3f | %.3f | %.2f | %.3f | %.2f | %.3f | %.3f | %.3f | "
        "%.0f | %.0f |\n",
        label.c_str(), r.b, r.floor_ms, r.graph_ms, r.floor_ms / r.graph_ms,
        r.tuned_ms, r.tuned_ms > 0 ? r.floor_ms / r.tuned_ms : -1,
        r.tuned_ms > 0 ? r.tuned_ms / r.graph_ms : -1, r.gemm_ms,
        r.tuned_gemm_ms, weight_gb / r.gemm_ms * 1e3,
        r.tuned_gemm_ms > 0 ? weight_gb / r.tuned_gemm_ms * 1e3 : -1);
  }
}

void PrintTables(const std::vector<Row>& rows, int ctx, int32_t small_rows) {
  std::printf(
      "\nSUMMARY (bf16, page_size 16, context %d, H200; small-batch GEMM for "
      "<= %d rows)\n",
      ctx, small_rows);
  std::printf(
      "| batch | step ms (graph) | step ms (eager) | output tok/s | "
      "attention ms | GEMMs ms | attn %% | GEMM %% | launch ovh %% | "
      "roofline floor ms | floor / step | graph ms, vendor GEMM | graph ms, "
      "streaming GEMM |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %d | %.3f | %.3f | %.0f | %.3f | %.3f | %.0f | %.0f | %.0f "
        "| %.3f | %.2f | %.3f | %.3f |\n",
        r.b, r.graph_ms, r.eager_ms, r.tok_s, r.attn_ms, r.gemm_ms,
        100 * r.attn_ms / r.graph_ms, 100 * r.gemm_ms / r.graph_ms,
        100 * std::max(0.0, r.eager_ms - r.graph_ms) / r.eager_ms, r.floor_ms,
        r.floor_ms / r.graph_ms, r.vendor_ms, r.streaming_ms);
  }
  if (!absl::GetFlag(FLAGS_serving)) return;
  std::printf(
      "\nServing step (ForwardSample, temperature 0.7, top-k 50, top-p 0.9, "
      "graphs)\n| batch | device sampling ms | host sampling ms (logits "
      "copy + Sampler) | host / device |\n|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %d | %.3f | %.3f | %.2f |\n", r.b, r.serve_device_ms,
                r.serve_host_ms, r.serve_host_ms / r.serve_device_ms);
  }
  std::printf(
      "\nLogprobs on the device (serving step as above, logprobs = 5 on every "
      "row vs none)\n| row | with logprobs ms | without ms | overhead ms "
      "|\n|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (r.serve_logprobs_ms < 0) continue;
    std::printf(
        "| logprob overhead per decode step at B=%d, top 5 | %.3f | %.3f | "
        "%.3f |\n",
        r.b, r.serve_logprobs_ms, r.serve_device_ms,
        r.serve_logprobs_ms - r.serve_device_ms);
  }
}

// GEMM-bound floor of a prefill of `computed` tokens after `cached` ones, in
// seconds: every FLOP at the measured GEMM peak. FLOPs = 2 x computed x
// (the layers' linear weights) + the LM head of one row + causal attention,
// 4 D Hq per (query, key) pair: computed x cached + computed (computed + 1)
// / 2 pairs per layer.
double PrefillFloorSeconds(const model::ModelConfig& c, int cached,
                           int computed, double gemm_tflops) {
  const double h = c.hidden_size, d = c.head_dim, inter = c.intermediate_size;
  const double hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const double layer_weights =
      h * (hq + 2 * hkv) * d + hq * d * h + 3 * inter * h;
  const double pairs = double(computed) * cached +
                       double(computed) * (computed + 1) / 2;
  const double flops =
      c.num_hidden_layers * (2.0 * computed * layer_weights + 4 * d * hq * pairs) +
      2.0 * h * c.vocab_size;
  return flops / (gemm_tflops * 1e12);
}

// TTFT: prompt of ttft_prompt tokens, cold, then with ttft_prefix cached;
// the first run of each is a warm-up. Each against its GEMM-bound floor.
void PrintTtft(GpuModelExecutor& e, int64_t base, double gemm_tflops) {
  const int ttft_prompt = absl::GetFlag(FLAGS_ttft_prompt);
  const int ttft_prefix = absl::GetFlag(FLAGS_ttft_prefix);
  std::vector<double> cold, warm;
  for (int r = 0; r < 4; ++r) {
    cold.push_back(TimePrefill(e, base, 0, ttft_prompt));
    warm.push_back(TimePrefill(e, base, ttft_prefix, ttft_prompt));
  }
  cold.erase(cold.begin());
  warm.erase(warm.begin());
  std::printf("TTFT %d-token prompt: cold %.1f ms; with %d cached: %.1f ms\n",
              ttft_prompt, Median(cold) * 1e3, ttft_prefix, Median(warm) * 1e3);
  const double floor_cold =
      PrefillFloorSeconds(e.config(), 0, ttft_prompt, gemm_tflops);
  const double floor_warm = PrefillFloorSeconds(
      e.config(), ttft_prefix, ttft_prompt - ttft_prefix, gemm_tflops);
  std::printf(
      "TTFT GEMM-bound floor (FLOPs / %.0f TFLOP/s): cold %.1f ms, floor / "
      "TTFT %.2f; with %d cached %.2f ms, floor / TTFT %.2f\n",
      gemm_tflops, floor_cold * 1e3, floor_cold / Median(cold), ttft_prefix,
      floor_warm * 1e3, floor_warm / Median(warm));
}

int Main() {
  // Line-buffered even into a log file: a run cut short by a timeout keeps
  // every line printed so far.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Ceilings first, before the executor takes the device memory.
  absl::StatusOr<gpu::DeviceCeilings> ceilings = gpu::MeasureDeviceCeilings();
  Check(ceilings.status(), "ceilings");
  std::printf(
      "ceilings: d2d copy %.0f GB/s (read + write, 2 GiB), bf16 GEMM "
      "%.0f TFLOP/s (8192^3 cuBLAS, random data)\n",
      ceilings->copy_gbps, ceilings->gemm_tflops);
  const std::string dir = absl::GetFlag(FLAGS_model_dir);
  std::vector<int> batches;
  for (absl::string_view p :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(p, &v) && v > 0) batches.push_back(v);
  }
  const int max_b = std::max(*std::max_element(batches.begin(), batches.end()),
                             absl::GetFlag(FLAGS_profile_batch));
  const int ctx = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_decode_steps);
  const int ttft_prompt = absl::GetFlag(FLAGS_ttft_prompt);

  GpuModelExecutorOptions o;
  o.model_dir = dir;
  o.dtype = DType::kBF16;
  o.page_size = 16;
  o.max_tokens_per_step = std::max(8192, ttft_prompt);
  o.max_batch_size = std::max(256, max_b);
  o.max_context_len = std::max(2 * ctx, ttft_prompt + 16);
  o.fuse_rms_norm = absl::GetFlag(FLAGS_fuse_rms_norm);
  auto t0 = Clock::now();
  auto created = GpuModelExecutor::Create(o);
  Check(created.status(), "create");
  GpuModelExecutor& e = **created;
  const model::ModelConfig& c = e.config();
  std::printf(
      "model %s: %d layers, hidden %d, heads %d/%d, head_dim %d, "
      "inter %d, vocab %d; weights %.2f GB; load %.1f s; pool %lld "
      "slots; attention %s\n",
      dir.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
      c.num_key_value_heads, c.head_dim, c.intermediate_size, c.vocab_size,
      e.weight_bytes() / 1e9, Seconds(t0),
      static_cast<long long>(e.capacity_slots()),
      e.uses_tensor_core_attention() ? "tensor-core" : "generic");

  DecodeSetup d;
  d.copy_gbps = absl::GetFlag(FLAGS_copy_gbps) > 0
                    ? absl::GetFlag(FLAGS_copy_gbps)
                    : ceilings->copy_gbps;
  d.gemm_tflops = absl::GetFlag(FLAGS_gemm_tflops) > 0
                      ? absl::GetFlag(FLAGS_gemm_tflops)
                      : ceilings->gemm_tflops;
  d.ctx = ctx;
  d.steps = steps;
  d.stride = (ctx + steps + 64 + 15) / 16 * 16;
  d.small_rows_default = o.small_batch_gemm_max_rows;
  d.kv_bytes_per_token =
      2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2;
  d.params = static_cast<double>(e.weight_bytes()) / 2;
  t0 = Clock::now();
  PrefillContexts(e, max_b, ctx, d.stride, o.max_tokens_per_step);
  std::printf("prefilled %d x %d tokens in %.2f s\n", max_b, ctx, Seconds(t0));
  // Slots of the TTFT and profiled prefills: past the decode contexts.
  const int64_t prefill_base = int64_t{max_b} * d.stride + 64;
  if (const int pp = absl::GetFlag(FLAGS_profile_prefill); pp > 0) {
    std::printf("profile: prefill of %d tokens %.3f ms (unprofiled)\n", pp,
                TimePrefill(e, prefill_base, 0, pp) * 1e3);
    Check(gpu::StartProfilerRange(), "profiler");
    TimePrefill(e, prefill_base, 0, pp);
    Check(gpu::StopProfilerRange(), "profiler");
    return 0;
  }
  if (const int pb = absl::GetFlag(FLAGS_profile_batch); pb > 0) {
    ProfileOneStep(e, pb, d);
    return 0;
  }
  std::vector<Row> rows;
  for (int B : batches) rows.push_back(MeasureBatch(e, B, d));

  CpuNumbers cpu;
  if (absl::GetFlag(FLAGS_cpu))
    cpu = MeasureCpu(dir, ctx, d.stride, c.vocab_size);

  PrintTables(rows, ctx, o.small_batch_gemm_max_rows);
  if (absl::GetFlag(FLAGS_ttft)) {
    PrintTtft(e, prefill_base, d.gemm_tflops);
  }
  if (cpu.decode_ms > 0) {
    std::printf(
        "CPU backend (fp32, %d threads): B=1 decode step %.1f ms "
        "(%.2f tok/s), prefill %.0f tok/s\n",
        absl::GetFlag(FLAGS_cpu_threads), cpu.decode_ms, 1e3 / cpu.decode_ms,
        cpu.prefill_tok_s);
  }
  std::printf("\nGEMM autotuning choices (gpu_gemm_tuner.h):\n%s",
              e.gemm_tuning().c_str());
  PrintRoofline(rows, d, e.weight_bytes() / 1e9);
  return 0;
}

}  // namespace
}  // namespace radixkv::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return radixkv::worker::Main();
}
