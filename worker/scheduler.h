// Scheduler: the worker's continuous-batching loop (docs/architecture.md "One
// request", steps 3-5; SGLang's scheduler / vLLM's continuous batching).
//
// One scheduler thread owns every sequence. Each step it
//   1. applies aborts and leases the cache service reported lost,
//   2. admits waiting requests (higher GenerateRequest.priority first, FIFO
//      within a priority) while memory allows (CacheService.Acquire ->
//      lease {prefix_len, kv_indices, copy_ops}); a request sharing >= 64
//      prompt tokens with a running prompt not yet inserted into the tree
//      waits for that insertion (step 4) instead of computing them again,
//   3. picks the batch: every running sequence that is generating (one token
//      each) plus prefill chunks of admitted prompts under a per-step budget
//      of max_prefill_tokens (chunked prefill),
//   4. issues at most ONE lease-maintenance RPC per step (besides the
//      admissions' Acquire): a Grow a generating sequence waits for, else a
//      keep_lease Commit of a sequence whose prompt is now computed (SGLang's
//      insertion of unfinished requests: later arrivals sharing the prompt
//      match it while it is still generating; the lease stays locked and
//      its table is remapped to the tree's slots), else an early Grow.
//      Leases grow by
//      grow_tokens slots at a time (plus reserve_tokens at Acquire), so most
//      steps need none; a sequence whose lease is full waits for its Grow;
//      when Grow finds no memory, the lowest-priority (then newest) running
//      sequence is preempted (its lease committed or released, the sequence
//      requeued ahead of its priority and recomputed on readmission),
//   5. runs one ModelExecutor::ForwardSample (copy ops first; the executor
//      samples: on the device for the GPU backend), streams
//      token/text deltas (appended on this thread; their gRPC writes run on
//      the StreamNotifier thread, stream_notifier.h), and on finish (EOS, stop id/string,
//      max_new_tokens) commits the lease so the tokens enter the radix tree.
// A heartbeat thread (CacheSession) reports load to the cache service and
// renews leases. The pieces: request checks (generate_request_parser.h),
// the waiting queue (waiting_queue.h), lease decisions and updates
// (lease_maintenance.h), the forward batch (batch_builder.h), finish
// reasons and text (output_processor.h), the session with the cache service
// (cache_session.h); the scheduler orchestrates them.
//
// Threading: Submit/Abort/Stats are thread-safe and may be called from gRPC
// handler threads; results flow back through each request's RequestStream.
#ifndef RADIXKV_WORKER_SCHEDULER_H_
#define RADIXKV_WORKER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/tokenizer/load_tokenizer.h"
#include "radixkv/v1/common.pb.h"
#include "radixkv/v1/worker.pb.h"
#include "worker/batch_builder.h"
#include "worker/cache_client.h"
#include "worker/cache_session.h"
#include "worker/generate_request_parser.h"
#include "worker/model_executor.h"
#include "worker/output_processor.h"
#include "worker/request_stream.h"
#include "worker/waiting_queue.h"

namespace radixkv::worker {

class StreamNotifier;
class WorkerMetrics;

// Configuration of a Scheduler. Token counts in tokens, slot counts in slots.
struct SchedulerOptions {
  // Registered with the cache service; identifies the worker's pool.
  std::string worker_id = "worker-0";
  // host:port routers dial (RegisterRequest.address).
  std::string advertise_address;
  std::string metrics_address;
  // Model name served; GenerateRequest.model must be empty or equal.
  std::string model_name = "radixkv-demo-llama";
  // Fresh per process start (e.g. wall time in ms); 0 = now in ms.
  int64_t epoch = 0;
  // Sequences in the running batch at most.
  int32_t max_running_requests = 32;
  // Requests accepted and not yet running (queued for admission) at most;
  // beyond: RESOURCE_EXHAUSTED.
  int32_t max_waiting_requests = 1024;
  // Per-step budget of prefill tokens (chunked prefill). Decode tokens of
  // generating sequences do not count against it.
  int32_t max_prefill_tokens = 512;
  // Slots reserved beyond the prompt at Acquire (first decode steps), at
  // least; 2 x (running sequences + 1) when that is larger. -1 =
  // grow_tokens.
  int32_t reserve_tokens = -1;
  // Slots requested per Grow (rounded up to pages by the service), at
  // least; grows are 2 x (generating sequences) when that is larger, so
  // that one Grow per step keeps up with the batch. 0 = max(page_size, 32).
  int32_t grow_tokens = 0;
  // A running sequence with fewer free slots than this is grown ahead of
  // need when no sequence needs a Grow urgently. 0 = grow_tokens / 2.
  int32_t grow_low_watermark = 0;
  // Heartbeat period (also the heartbeat's deadline); 0 = the service's
  // RegisterResponse.heartbeat_interval_ms.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // Upper bound of GenerateRequest.sampling.max_new_tokens.
  int32_t max_new_tokens_limit = 65536;
  // Run the step loop on a background thread (false: tests drive Step()).
  bool start_thread = true;
};

// Counters of the scheduler (WorkerStatsResponse without the identity).
struct SchedulerStats {
  v1::WorkerLoad load;
  int64_t epoch = 0;
  bool registered = false;
  int64_t prompt_tokens = 0;
  int64_t prefill_tokens_computed = 0;
  int64_t prefill_tokens_reused = 0;
  int64_t decode_tokens = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  int64_t requests_failed = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t grow_rpcs = 0;
  // keep_lease Commits of completed prefills (unfinished requests inserted
  // into the tree) and the lease slots they remapped to the tree's copies.
  int64_t prefill_commit_rpcs = 0;
  int64_t prefill_commit_remapped_slots = 0;
  // Generating sequences left out of a step because their lease had no slot
  // for the next token yet (waiting for a Grow), summed over steps.
  int64_t stalled_sequence_steps = 0;
};

class Scheduler {
 public:
  // `cache` may be nullptr: the worker then serves health but rejects every
  // Generate with UNAVAILABLE. `tokenizer` (model::LoadTokenizer of the
  // checkpoint) may be nullptr (text prompts and stop strings are then
  // INVALID_ARGUMENT); its folder's eos ids join config.json's
  // (MergeEosTokenIds). `metrics` may be nullptr. All
  // pointers must outlive the scheduler. Registers with the cache service
  // (a failure is retried by the heartbeat thread; Generate answers
  // UNAVAILABLE meanwhile).
  // Errors: INVALID_ARGUMENT for inconsistent options.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      SchedulerOptions options, ModelExecutor* executor, KvCacheClient* cache,
      const model::LoadedTokenizer* tokenizer, WorkerMetrics* metrics);

  // Stops the threads; leases still held are released (best effort).
  ~Scheduler();

  // Validates and queues a request. Errors (nothing queued, no memory taken):
  // INVALID_ARGUMENT (model mismatch, empty prompt, token ids outside
  // [0, vocab_size), max_new_tokens outside [1, limit] or prompt +
  // max_new_tokens beyond max_position_embeddings, invalid sampling values,
  // bad request_id / priority / cache_salt), ALREADY_EXISTS (request_id in
  // flight), RESOURCE_EXHAUSTED (prompt + max_new_tokens cannot fit the
  // empty pool; or max_waiting_requests requests are accepted and not yet
  // running: "worker <id> has N requests waiting, the limit
  // --max_waiting_requests=N"), INVALID_ARGUMENT for text longer than
  // MaxPromptTextBytes (checked before tokenizing),
  // UNAVAILABLE (no cache service, not registered, or draining).
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(
      const v1::GenerateRequest& request);

  // Aborts a queued or running request (its lease is released; its stream
  // gets a final event with status CANCELLED). Returns false if unknown or
  // already being aborted: of concurrent Aborts of one request exactly one
  // returns true.
  bool Abort(const std::string& request_id);

  // Snapshot of counters and load.
  SchedulerStats Stats() const;

  // Stops admitting (Submit answers UNAVAILABLE), fails waiting requests
  // with UNAVAILABLE, lets running ones finish until `deadline`, ends the
  // rest with UNAVAILABLE "worker <id> is shutting down" (a router retries
  // those that streamed no token), then deregisters from the cache service.
  // Returns when done.
  void Drain(absl::Time deadline);

  // Runs one scheduling step on the calling thread (only when
  // start_thread is false). Returns true if any work was done.
  bool Step();

  // True when nothing is queued, running or pending.
  bool Idle() const;

  const SchedulerOptions& options() const { return options_; }
  const ModelExecutor& executor() const { return *executor_; }

 private:
  Scheduler(SchedulerOptions options, ModelExecutor* executor,
            KvCacheClient* cache, const model::LoadedTokenizer* tokenizer,
            WorkerMetrics* metrics);

  void SchedulerLoop();

  // Submit parts.
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(
      ParsedGenerateRequest parsed) const;
  // Checks the worker's state and the bounds, names and queues `seq`.
  absl::StatusOr<std::shared_ptr<RequestStream>> Enqueue(
      std::unique_ptr<Sequence> seq, std::string id);

  // Step parts (scheduler thread only).
  void TakeInbox();
  void ApplyAborts();
  // Ends an aborted request: CANCELLED, or UNAVAILABLE "worker <id> is
  // shutting down" for the drain deadline (`shutdown`).
  void EndAborted(Sequence* seq, bool shutdown);
  void ApplyLostLeases();
  void Admit(int32_t* prefill_budget);
  // The status a failed Acquire ends its request with.
  absl::Status AcquireFailure(const absl::Status& rpc);
  // Bookkeeping of a sequence whose Acquire succeeded.
  void OnAdmitted(Sequence* seq, int32_t* prefill_budget);
  // Inserts one completed prefill into the tree with a keep_lease Commit and
  // applies the remapped table. Returns true if an RPC was made.
  bool CommitCompletedPrefill();
  // True when `candidate` shares a long prompt prefix with a running
  // sequence whose prompt is not yet in the tree: admitting it now would
  // compute that prefix twice, so it waits for the keep_lease Commit.
  bool WaitsForSharedPrefill(const Sequence& candidate) const;
  bool GrowOne();
  void Preempt(Sequence* victim);
  // Plans, runs (one ForwardSample) and applies one batch. Returns true if
  // the batch was non-empty, i.e. ForwardSample was called.
  bool RunBatch(int32_t prefill_budget);
  // Applies a forward's sampled tokens: sequences advance, tokens stream,
  // finished ones end. Returns the tokens generated.
  int64_t ProcessOutputs(const BatchPlan& plan,
                         absl::Span<const SequenceSampling> sampling,
                         absl::Span<const int32_t> token_ids,
                         absl::Span<const SampledToken> sampled);
  // Forks every parent whose prompt is computed (sample_fork.h); returns
  // true if any was.
  bool ForkParents();
  void ForkParent(Sequence* parent);
  void GrowForkedChild(Sequence* child);
  // Counts the end of one sample of `seq`'s request (`status`: its
  // failure, if any). True when it ends the request (n = 1, or the last
  // live sample).
  bool EndSample(Sequence* seq, const absl::Status& status);
  // Runs the listeners of a step's streams: on the notifier thread (so
  // that gRPC writes overlap the next forward), inline without one.
  void NotifyStreams(std::vector<std::shared_ptr<RequestStream>> streams);
  void ObserveTokenLatency(Sequence* seq, absl::Time now);
  void Finish(Sequence* seq, v1::FinishReason reason);
  void Fail(Sequence* seq, absl::Status status);
  // Ends a request without a token (its lease released): the final event
  // with `status`; ABORT counts as aborted, anything else as failed.
  void End(Sequence* seq, absl::Status status, v1::FinishReason reason);
  void EndLease(Sequence* seq, bool commit);
  void RemoveRunning(Sequence* seq);
  void PublishLoad();

  const SchedulerOptions options_;
  ModelExecutor* const executor_;
  KvCacheClient* const cache_;
  const model::Tokenizer* const tokenizer_;  // may be nullptr
  WorkerMetrics* const metrics_;
  const int32_t page_size_;
  const int64_t capacity_slots_;
  const int32_t vocab_size_;
  const GenerateRequestLimits limits_;
  const OutputProcessor output_;
  // nullptr without a cache service.
  std::unique_ptr<CacheSession> session_;

  mutable absl::Mutex mu_;
  // Inbox from other threads.
  std::vector<std::unique_ptr<Sequence>> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> abort_requests_ ABSL_GUARDED_BY(mu_);
  // Ids with an Abort pending (an Abort of one already here returns false).
  absl::flat_hash_set<std::string> aborting_ ABSL_GUARDED_BY(mu_);
  // Ids ended by the drain deadline (UNAVAILABLE, not CANCELLED).
  std::vector<std::string> shutdown_aborts_ ABSL_GUARDED_BY(mu_);
  // Every request id in flight (inbox, waiting or running).
  absl::flat_hash_set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  // Without the session's epoch and registration (Stats adds them).
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_request_number_ ABSL_GUARDED_BY(mu_) = 0;
  // Requests accepted and not yet running: submitted_ + waiting_, exactly.
  // Submit checks and increments it under mu_ (so concurrent Submits never
  // pass the bound together); the scheduler thread decrements it when a
  // request is admitted or ends while queued, and increments it when it
  // requeues a preempted one (which may pass the bound: it was accepted).
  std::atomic<int64_t> queued_{0};

  // Scheduler-thread state.
  WaitingQueue waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  uint64_t admission_counter_ = 0;

  // Runs stream listeners off the scheduler thread (with start_thread;
  // null otherwise). Destroyed after the destructor's body, so the final
  // events pushed there are still delivered.
  std::unique_ptr<StreamNotifier> notifier_;
  std::thread scheduler_thread_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_SCHEDULER_H_
