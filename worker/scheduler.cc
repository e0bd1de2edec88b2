#include "worker/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/lease_maintenance.h"
#include "worker/sample_fork.h"
#include "worker/sampler.h"
#include "worker/sequence.h"
#include "worker/stream_notifier.h"
#include "worker/worker_metrics.h"

namespace radixkv::worker {

namespace {

// A waiting request sharing at least this many prompt tokens with a running
// sequence whose prompt is not in the tree yet waits for its keep_lease
// Commit (a few steps) instead of computing the same prefix again
// (SGLang's in-batch prefix caching check).
constexpr int64_t kMinSharedPrefillTokens = 64;
int64_t NowMillis() { return absl::ToUnixMillis(absl::Now()); }

std::string OutcomeName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return "error";
  }
}

absl::Status ValidateOptions(const SchedulerOptions& options) {
  if (options.worker_id.empty() || options.worker_id.size() > 128) {
    return absl::InvalidArgumentError("worker_id must be 1..128 bytes");
  }
  if (options.max_running_requests < 1) {
    return absl::InvalidArgumentError("max_running_requests must be >= 1");
  }
  if (options.max_waiting_requests < 0) {
    return absl::InvalidArgumentError("max_waiting_requests must be >= 0");
  }
  if (options.max_prefill_tokens < 1) {
    return absl::InvalidArgumentError("max_prefill_tokens must be >= 1");
  }
  if (options.grow_tokens < 0 || options.grow_tokens > 65536) {
    return absl::InvalidArgumentError("grow_tokens must be in [0, 65536]");
  }
  return absl::OkStatus();
}

GenerateRequestLimits LimitsOf(const SchedulerOptions& options,
                               const ModelExecutor& executor) {
  GenerateRequestLimits limits;
  limits.model_name = options.model_name;
  limits.vocab_size = executor.config().vocab_size;
  limits.max_position_embeddings = executor.config().max_position_embeddings;
  limits.capacity_slots = executor.capacity_slots();
  limits.page_size = executor.page_size();
  limits.max_new_tokens_limit = options.max_new_tokens_limit;
  return limits;
}

CacheSessionOptions SessionOptionsOf(const SchedulerOptions& options,
                                     const ModelExecutor& executor) {
  CacheSessionOptions session;
  session.worker_id = options.worker_id;
  session.advertise_address = options.advertise_address;
  session.metrics_address = options.metrics_address;
  session.model_name = options.model_name;
  session.epoch = options.epoch;
  session.heartbeat_interval = options.heartbeat_interval;
  session.capacity_slots = executor.capacity_slots();
  session.page_size = executor.page_size();
  session.vocab_size = executor.config().vocab_size;
  return session;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    SchedulerOptions options, ModelExecutor* executor, KvCacheClient* cache,
    const model::LoadedTokenizer* tokenizer, WorkerMetrics* metrics) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError("executor is required");
  }
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  if (options.grow_tokens == 0) {
    options.grow_tokens = std::max<int32_t>(executor->page_size(), 32);
  }
  if (options.reserve_tokens < 0) options.reserve_tokens = options.grow_tokens;
  if (options.reserve_tokens > 65536) {
    return absl::InvalidArgumentError("reserve_tokens must be <= 65536");
  }
  if (options.grow_low_watermark <= 0) {
    options.grow_low_watermark = std::max(1, options.grow_tokens / 2);
  }
  if (options.epoch <= 0) options.epoch = NowMillis();
  auto scheduler = std::unique_ptr<Scheduler>(
      new Scheduler(std::move(options), executor, cache, tokenizer, metrics));
  if (scheduler->session_ != nullptr) {
    absl::Status registered = scheduler->session_->RegisterWithService(false);
    if (!registered.ok()) {
      spdlog::warn("cache service registration failed (retrying): {}",
                   registered.ToString());
    }
  }
  if (scheduler->options_.start_thread) {
    scheduler->notifier_ = std::make_unique<StreamNotifier>();
    scheduler->scheduler_thread_ =
        std::thread([s = scheduler.get()] { s->SchedulerLoop(); });
  }
  if (scheduler->session_ != nullptr) scheduler->session_->StartHeartbeats();
  return scheduler;
}

Scheduler::Scheduler(SchedulerOptions options, ModelExecutor* executor,
                     KvCacheClient* cache,
                     const model::LoadedTokenizer* tokenizer,
                     WorkerMetrics* metrics)
    : options_(std::move(options)),
      executor_(executor),
      cache_(cache),
      tokenizer_(tokenizer != nullptr ? tokenizer->tokenizer.get() : nullptr),
      metrics_(metrics),
      page_size_(executor->page_size()),
      capacity_slots_(executor->capacity_slots()),
      vocab_size_(executor->config().vocab_size),
      limits_(LimitsOf(options_, *executor)),
      output_(MergeEosTokenIds(
          executor->config().eos_token_ids,
          tokenizer != nullptr
              ? absl::Span<const int32_t>(tokenizer->files.eos_token_ids)
              : absl::Span<const int32_t>())) {
  if (cache_ != nullptr) {
    session_ = std::make_unique<CacheSession>(
        SessionOptionsOf(options_, *executor), cache_);
  }
}

Scheduler::~Scheduler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (session_ != nullptr) session_->StopHeartbeats();
  // Nothing runs any more: give back every lease and end every stream.
  TakeInbox();
  auto end_all = [this](Sequence* seq) {
    EndLease(seq, /*commit=*/false);
    GenerateEvent event;
    event.finished = true;
    event.status = absl::UnavailableError("worker shutting down");
    seq->stream->Push(std::move(event));
  };
  for (auto& seq : running_) end_all(seq.get());
  for (auto& seq : waiting_.RemoveIf([](const Sequence&) { return true; })) {
    end_all(seq.get());
  }
  running_.clear();
  queued_.store(0);
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Submit(
    const v1::GenerateRequest& request) {
  // Validation first: nothing is queued and no memory is taken on error.
  absl::StatusOr<ParsedGenerateRequest> parsed =
      ParseGenerateRequest(request, limits_, tokenizer_);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::unique_ptr<Sequence>> seq =
      NewSequence(*std::move(parsed));
  if (!seq.ok()) return seq.status();
  return Enqueue(*std::move(seq), request.request_id());
}

absl::StatusOr<std::unique_ptr<Sequence>> Scheduler::NewSequence(
    ParsedGenerateRequest parsed) const {
  auto seq = std::make_unique<Sequence>();
  seq->cache_salt = std::move(parsed.cache_salt);
  seq->priority = parsed.priority;
  seq->disable_prefix_cache = parsed.disable_prefix_cache;
  seq->return_text = parsed.return_text;
  seq->num_samples = parsed.num_samples;
  seq->prompt_len = static_cast<int32_t>(parsed.prompt.size());
  seq->arrival = absl::Now();
  const bool has_stop_strings = !parsed.sampling.stop_strings.empty();
  if (tokenizer_ != nullptr && (seq->return_text || has_stop_strings)) {
    // Special tokens produce no text, as vLLM's skip_special_tokens=True.
    absl::StatusOr<model::IncrementalDetokenizer> detokenizer =
        model::IncrementalDetokenizer::Create(tokenizer_, parsed.prompt,
                                              /*skip_special_tokens=*/true);
    if (!detokenizer.ok()) return detokenizer.status();
    seq->detokenizer = std::make_unique<model::IncrementalDetokenizer>(
        *std::move(detokenizer));
  }
  if (has_stop_strings) {
    seq->stop_checker =
        std::make_unique<StopChecker>(parsed.sampling.stop_strings);
  }
  seq->tokens = std::move(parsed.prompt);
  seq->sampling = std::move(parsed.sampling);
  if (seq->sampling.prompt_logprobs >= 0) {
    seq->prompt_logprobs.resize(seq->prompt_len - 1);
  }
  return seq;
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Enqueue(
    std::unique_ptr<Sequence> seq, std::string id) {
  absl::MutexLock lock(&mu_);
  if (cache_ == nullptr) {
    return absl::UnavailableError(
        "no cache service configured (--cache_service); cannot allocate KV");
  }
  if (!session_->registered()) {
    return absl::UnavailableError("not registered with the cache service");
  }
  if (draining_ || stop_) return absl::UnavailableError("worker is draining");
  if (id.empty()) {
    id = absl::StrCat(options_.worker_id, "-", session_->epoch(), "-",
                      next_request_number_++);
  }
  if (in_flight_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id '", id, "' is already in flight"));
  }
  // Only Submit increments queued_ (the preemptions' requeues aside), and
  // it holds mu_: the check and the increment are one step.
  const int64_t queued = queued_.load();
  if (queued >= options_.max_waiting_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", options_.worker_id, " has ", queued,
                     " requests waiting, the limit --max_waiting_requests=",
                     options_.max_waiting_requests));
  }
  if (seq->sampling.seed == 0) seq->sampling.seed = absl::HashOf(id);
  seq->sampler = std::make_unique<Sampler>(seq->sampling);
  seq->request_id = id;
  seq->stream = std::make_shared<RequestStream>(id);
  auto stream = seq->stream;
  in_flight_.insert(id);
  if (seq->num_samples > 1 && seq->prompt_len == 1) {
    // Nothing to fork at: n one-token leases.
    for (auto& sample : SplitIntoSamples(*seq)) {
      queued_.fetch_add(1);
      submitted_.push_back(std::move(sample));
    }
    return stream;
  }
  queued_.fetch_add(1);
  submitted_.push_back(std::move(seq));
  return stream;
}

bool Scheduler::Abort(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (!in_flight_.contains(request_id)) return false;
  // Exactly one of concurrent Aborts of a request gets true.
  if (!aborting_.insert(request_id).second) return false;
  abort_requests_.push_back(request_id);
  return true;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  if (session_ != nullptr) {
    stats.epoch = session_->registered_epoch();
    stats.registered = session_->registered();
  }
  return stats;
}

bool Scheduler::Idle() const {
  absl::MutexLock lock(&mu_);
  return in_flight_.empty() && !busy_;
}

void Scheduler::Drain(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  auto wait_idle = [this](absl::Time until) {
    while (absl::Now() < until) {
      if (!options_.start_thread) Step();
      if (Idle()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return Idle();
  };
  if (!wait_idle(deadline)) {
    std::vector<std::string> ids;
    {
      absl::MutexLock lock(&mu_);
      ids.assign(in_flight_.begin(), in_flight_.end());
    }
    spdlog::warn("drain deadline passed; aborting {} requests", ids.size());
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& id : ids) {
        if (in_flight_.contains(id)) shutdown_aborts_.push_back(id);
      }
    }
    wait_idle(absl::Now() + absl::Seconds(5));
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (session_ != nullptr) {
    session_->StopHeartbeats();
    session_->Deregister();
  }
}

void Scheduler::SchedulerLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Leases reported lost matter only to requests in flight.
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || !submitted_.empty() || !abort_requests_.empty() ||
               !in_flight_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&has_work), absl::Milliseconds(100));
      if (stop_) return;
    }
    if (!Step()) {
      // Work exists but none could progress (e.g. waiting for memory or a
      // re-registration): back off briefly instead of spinning.
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
}

bool Scheduler::Step() {
  // radixkv_worker_iteration_seconds: the whole step when it ran a batch.
  const absl::Time iteration_start = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    busy_ = true;
  }
  TakeInbox();
  ApplyAborts();
  ApplyLostLeases();

  // Prefill tokens still owed by admitted sequences come first.
  int32_t budget = options_.max_prefill_tokens;
  bool stalled = false;
  // A generating sequence that has a slot for this step's token but not for
  // the next one: its Grow must not be deferred.
  bool grow_due = false;
  for (const auto& seq : running_) {
    const int64_t slots = static_cast<int64_t>(seq->kv_indices.size());
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (seq->in_prefill()) {
      const int64_t end = seq->compute_end();
      budget -= static_cast<int32_t>(std::min<int64_t>(
          budget, std::max<int64_t>(0, end - seq->num_computed)));
    } else if (slots < len) {
      stalled = true;
    } else if (slots == len && slots < seq->max_slots_needed()) {
      grow_due = true;
    }
  }
  const size_t admitted_before = running_.size();
  // One lease-maintenance RPC per step (besides admissions' Acquire): a
  // Grow that a generating sequence waits for comes first; otherwise a
  // keep_lease Commit of a completed prefill, issued before admission so
  // that arrivals sharing the prompt match it, unless some sequence would
  // lack a slot next step; otherwise a Grow ahead of need. Deferring an
  // early Grow is safe (the sequence still has a slot for its next token)
  // and does not stall anyone.
  bool maintained = false;
  if (!stalled) {
    if (!grow_due) maintained = CommitCompletedPrefill();
    // Admit only while no running sequence waits for memory (no
    // thrashing).
    Admit(&budget);
  }
  // Parents whose prompt is computed become their n samples (the samples'
  // first Grows are part of the fork).
  maintained |= ForkParents();
  bool progressed = maintained || running_.size() != admitted_before;
  if (!maintained) progressed |= GrowOne();
  const bool ran_batch = RunBatch(options_.max_prefill_tokens);
  progressed |= ran_batch;
  PublishLoad();
  {
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
  if (ran_batch && metrics_ != nullptr) {
    metrics_->ObserveIteration(
        absl::ToDoubleSeconds(absl::Now() - iteration_start));
  }
  return progressed;
}

void Scheduler::TakeInbox() {
  std::vector<std::unique_ptr<Sequence>> submitted;
  bool draining;
  {
    absl::MutexLock lock(&mu_);
    submitted.swap(submitted_);
    draining = draining_;
  }
  // Higher priority first; FIFO within a priority. Preempted sequences were
  // put at the front and stay ahead of new arrivals of their priority.
  for (auto& seq : submitted) waiting_.PushBack(std::move(seq));
  if (draining) {
    // Never admitted: fail fast so the router can place them elsewhere.
    // Preempted sequences have streamed tokens already; they stay queued and
    // finish here (or are aborted at the drain deadline).
    for (auto& seq : waiting_.RemoveIf(
             [](const Sequence& w) { return !w.admitted_once; })) {
      queued_.fetch_sub(1);
      Fail(seq.get(), absl::UnavailableError("worker is draining"));
    }
  }
}

void Scheduler::ApplyAborts() {
  std::vector<std::string> aborts;
  std::vector<std::string> shutdown_aborts;
  {
    absl::MutexLock lock(&mu_);
    aborts.swap(abort_requests_);
    shutdown_aborts.swap(shutdown_aborts_);
  }
  const size_t num_client_aborts = aborts.size();
  aborts.insert(aborts.end(), shutdown_aborts.begin(), shutdown_aborts.end());
  for (size_t i = 0; i < aborts.size(); ++i) {
    const std::string& id = aborts[i];
    // A client abort is CANCELLED; the drain deadline ends requests with
    // UNAVAILABLE so that a router may still retry one that streamed no
    // token yet.
    const bool shutdown = i >= num_client_aborts;
    // Every sample of the request (n > 1: several sequences, waiting and
    // running).
    while (std::unique_ptr<Sequence> waiting = waiting_.Remove(id)) {
      queued_.fetch_sub(1);
      EndAborted(waiting.get(), shutdown);
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->request_id == id) {
        EndAborted(it->get(), shutdown);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Scheduler::EndAborted(Sequence* seq, bool shutdown) {
  End(seq,
      shutdown ? absl::UnavailableError(absl::StrCat(
                     "worker ", options_.worker_id, " is shutting down"))
               : absl::CancelledError("aborted"),
      v1::FINISH_REASON_ABORT);
}

void Scheduler::ApplyLostLeases() {
  if (session_ == nullptr) return;
  const CacheSession::LostLeases lost = session_->TakeLostLeases();
  std::vector<Sequence*> victims;
  for (const auto& seq : running_) {
    bool gone = seq->has_lease && seq->lease_epoch < lost.invalid_before_epoch;
    gone |= std::find(lost.lease_ids.begin(), lost.lease_ids.end(),
                      seq->lease_id) != lost.lease_ids.end();
    if (gone) victims.push_back(seq.get());
  }
  for (Sequence* seq : victims) {
    spdlog::warn("lease {} of request {} was lost; recomputing", seq->lease_id,
                 seq->request_id);
    seq->has_lease = false;  // Nothing to give back.
    Preempt(seq);
  }
}

void Scheduler::Admit(int32_t* prefill_budget) {
  // Without a cache service nothing is ever queued (Submit refuses).
  if (waiting_.empty() || session_ == nullptr) return;
  const int64_t epoch = session_->epoch();
  while (!waiting_.empty() && *prefill_budget > 0) {
    Sequence* seq = waiting_.front();
    // A parent becomes n running sequences; one larger than the whole
    // batch runs alone.
    const int64_t joins =
        static_cast<int64_t>(running_.size()) + seq->num_samples;
    if (joins > options_.max_running_requests && !running_.empty()) break;
    if (WaitsForSharedPrefill(*seq)) break;
    const int64_t reserve = AdmissionReserve(
        *seq, static_cast<int64_t>(running_.size()), options_.reserve_tokens);
    absl::StatusOr<v1::AcquireResponse> lease =
        cache_->Acquire(AcquireRequestFor(*seq, options_.worker_id, epoch,
                                          options_.model_name, reserve));
    if (!lease.ok() &&
        lease.status().code() == absl::StatusCode::kResourceExhausted) {
      // Submit rejected every request that cannot fit the empty pool, so
      // this one fits once running sequences (or expiring leases) free
      // memory: it waits, preempted ones included, instead of failing.
      break;
    }
    const absl::Status admitted =
        lease.ok() ? ApplyAcquire(*lease, epoch, reserve, seq)
                   : AcquireFailure(lease.status());
    std::unique_ptr<Sequence> taken = waiting_.PopFront();
    queued_.fetch_sub(1);
    if (!admitted.ok()) {
      Fail(taken.get(), admitted);
      continue;
    }
    OnAdmitted(seq, prefill_budget);
    running_.push_back(std::move(taken));
  }
}

absl::Status Scheduler::AcquireFailure(const absl::Status& rpc) {
  const absl::StatusCode code = rpc.code();
  if (code == absl::StatusCode::kInvalidArgument) return rpc;
  if (code == absl::StatusCode::kNotFound ||
      code == absl::StatusCode::kFailedPrecondition) {
    // The service dropped this worker (or forgot it): the heartbeat
    // thread registers a fresh epoch, as after a failed heartbeat.
    session_->MarkForgotten();
  }
  return absl::UnavailableError(
      absl::StrCat("cache service: ", rpc.ToString()));
}

void Scheduler::OnAdmitted(Sequence* seq, int32_t* prefill_budget) {
  seq->prefill_committed = false;
  seq->admission_order = ++admission_counter_;
  const int64_t prefix_len = seq->num_computed;
  if (!seq->admitted_once) {
    seq->admitted_once = true;
    seq->cached_tokens = static_cast<int32_t>(prefix_len);
    if (metrics_ != nullptr) metrics_->AddPrefillTokensReused(prefix_len);
    absl::MutexLock lock(&mu_);
    stats_.prompt_tokens += seq->prompt_len;
    stats_.prefill_tokens_reused += prefix_len;
  }
  *prefill_budget -= static_cast<int32_t>(
      std::min<int64_t>(*prefill_budget, seq->acquired_len - prefix_len));
}

bool Scheduler::WaitsForSharedPrefill(const Sequence& candidate) const {
  if (!candidate.reuses_prefix()) return false;
  const int64_t threshold =
      std::max<int64_t>(kMinSharedPrefillTokens, 2 * page_size_);
  for (const auto& seq : running_) {
    if (!seq->has_lease || seq->prefill_committed ||
        seq->disable_prefix_cache || seq->cache_salt != candidate.cache_salt) {
      continue;
    }
    // Tokens of the candidate that `seq` is computing and will insert.
    const int64_t n = std::min<int64_t>(
        seq->acquired_len, static_cast<int64_t>(candidate.tokens.size()) - 1);
    if (n < threshold) continue;
    const auto mismatch =
        std::mismatch(candidate.tokens.begin(), candidate.tokens.begin() + n,
                      seq->tokens.begin());
    if (mismatch.first - candidate.tokens.begin() >= threshold) return true;
  }
  return false;
}

bool Scheduler::CommitCompletedPrefill() {
  Sequence* target = PickPrefillCommit(running_);
  if (target == nullptr) return false;
  target->prefill_committed = true;  // Tried once per admission.
  absl::StatusOr<v1::CommitResponse> committed =
      cache_->Commit(CommitRequestFor(*target, /*keep_lease=*/true));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.prefill_commit_rpcs;
  }
  if (!committed.ok()) {
    if (committed.status().code() == absl::StatusCode::kNotFound) {
      target->has_lease = false;  // Expired: recompute.
      Preempt(target);
      return true;
    }
    // Only sharing is lost; the lease is unchanged (the final Commit
    // inserts the tokens).
    spdlog::warn("keep_lease commit of lease {} (request {}) failed: {}",
                 target->lease_id, target->request_id,
                 committed.status().ToString());
    return true;
  }
  absl::StatusOr<int64_t> remapped = ApplyPrefillCommit(*committed, target);
  if (!remapped.ok()) {
    Fail(target, remapped.status());
    RemoveRunning(target);
    return true;
  }
  absl::MutexLock lock(&mu_);
  stats_.prefill_commit_remapped_slots += *remapped;
  return true;
}

bool Scheduler::GrowOne() {
  const GrowPlan plan =
      PlanGrow(running_, options_.grow_tokens, options_.grow_low_watermark);
  Sequence* target = plan.target;
  if (target == nullptr) return false;
  v1::GrowRequest request;
  request.set_lease_id(target->lease_id);
  request.set_num_tokens(static_cast<int32_t>(plan.num_tokens));
  absl::StatusOr<v1::GrowResponse> grown = cache_->Grow(request);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.grow_rpcs;
  }
  if (grown.ok()) {
    ApplyGrow(*grown, target);
    return true;
  }
  const absl::StatusCode code = grown.status().code();
  if (code == absl::StatusCode::kResourceExhausted) {
    if (!plan.urgent) return true;  // Try again when it becomes urgent.
    // Submit checked that every request fits the empty pool, so even a lone
    // sequence is preempted (its KV committed, evictable) and readmitted
    // rather than failed.
    Preempt(PickPreemptionVictim(running_));
    return true;
  }
  if (code == absl::StatusCode::kNotFound) {
    target->has_lease = false;  // Expired: recompute.
    Preempt(target);
    return true;
  }
  Fail(target, absl::UnavailableError(
                   absl::StrCat("cache service: ", grown.status().ToString())));
  RemoveRunning(target);
  return true;
}

void Scheduler::Preempt(Sequence* victim) {
  spdlog::info("preempting request {} ({} tokens computed)", victim->request_id,
               victim->num_computed);
  // Committing keeps the computed KV in the tree (evictable), so the
  // readmission can reuse whatever survives.
  EndLease(victim, /*commit=*/!victim->disable_prefix_cache);
  victim->num_computed = 0;
  victim->acquired_len = 0;
  victim->kv_indices.clear();
  victim->pending_copies.clear();
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->get() == victim) {
      // Ahead of every waiting request of its priority or lower.
      queued_.fetch_add(1);
      waiting_.PushFront(std::move(*it));
      running_.erase(it);
      break;
    }
  }
  if (metrics_ != nullptr) metrics_->AddPreemption();
  absl::MutexLock lock(&mu_);
  ++stats_.preemptions;
}

bool Scheduler::RunBatch(int32_t prefill_budget) {
  const BatchPlan plan = PlanBatch(running_, prefill_budget);
  if (plan.stalled > 0) {
    absl::MutexLock lock(&mu_);
    stats_.stalled_sequence_steps += plan.stalled;
  }
  if (plan.entries.empty()) return false;

  const absl::Time start = absl::Now();
  const ForwardBatch batch = BuildForwardBatch(plan.entries);
  // The executor samples: on the device for the GPU backend (only B token
  // ids leave the device), through the request's host Sampler for the CPU
  // backend (ModelExecutor's default).
  std::vector<SequenceSampling> sampling = BuildSequenceSampling(plan.entries);
  // Logprob outputs of the rows that ask for them.
  std::vector<SampledToken> sampled(sampling.size());
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (sampling[i].logprobs > 0) sampling[i].sampled = &sampled[i];
  }
  std::vector<int32_t> token_ids;
  const absl::Time forward_start = absl::Now();
  absl::Status forward = executor_->ForwardSample(batch, sampling, &token_ids);
  if (metrics_ != nullptr) {
    metrics_->ObserveForward(
        absl::ToDoubleSeconds(absl::Now() - forward_start));
  }
  if (forward.ok()) {
    forward = CheckSampledTokens(token_ids, sampling, vocab_size_);
  }
  if (!forward.ok()) {
    spdlog::error("forward failed: {}", forward.ToString());
    for (const BatchEntry& e : plan.entries) {
      Fail(e.seq, absl::InternalError(
                      absl::StrCat("forward failed: ", forward.message())));
      RemoveRunning(e.seq);
    }
    return true;
  }
  const int64_t decode_tokens =
      ProcessOutputs(plan, sampling, token_ids, sampled);
  const double step_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (metrics_ != nullptr) {
    metrics_->ObserveStep(step_seconds,
                          static_cast<int32_t>(plan.entries.size()),
                          plan.prefill_tokens, decode_tokens);
  }
  return true;
}

int64_t Scheduler::ProcessOutputs(const BatchPlan& plan,
                                  absl::Span<const SequenceSampling> sampling,
                                  absl::Span<const int32_t> token_ids,
                                  absl::Span<const SampledToken> sampled) {
  int64_t decode_tokens = 0;
  std::vector<std::pair<Sequence*, v1::FinishReason>> finished;
  // Sequences whose end ends their request (the last of its samples).
  std::vector<Sequence*> requests_done;
  std::vector<std::pair<Sequence*, GenerateEvent>> events;
  std::vector<Sequence*> failed;
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    Sequence& seq = *plan.entries[i].seq;
    seq.pending_copies.clear();
    seq.num_computed += plan.entries[i].chunk;
    if (!sampling[i].needs_token) continue;
    if (token_ids[i] == kSamplingFailedToken) {
      // One sequence's logits went non-finite: fail it alone.
      Fail(&seq, absl::InternalError(
                     "sampling failed: the logits of this sequence are not "
                     "finite"));
      failed.push_back(&seq);
      continue;
    }
    GenerateEvent event = output_.AppendToken(&seq, token_ids[i], now);
    event.sample_index = seq.sample_index;
    if (sampling[i].logprobs > 0) {
      event.logprobs.push_back(ToTokenLogprobs(sampled[i]));
    }
    TakePromptLogprobs(&seq, &event);
    ++decode_tokens;
    ObserveTokenLatency(&seq, now);
    if (event.finished) {
      finished.emplace_back(&seq, event.finish_reason);
      event.more_samples = !EndSample(&seq, absl::OkStatus());
      if (!event.more_samples) {
        requests_done.push_back(&seq);
        if (seq.group != nullptr) event.status = seq.group->status;
      }
    }
    events.emplace_back(&seq, std::move(event));
  }
  for (Sequence* seq : failed) RemoveRunning(seq);
  // Counters first, so that a client reading GetStats right after its last
  // token sees this step.
  {
    absl::MutexLock lock(&mu_);
    ++stats_.steps;
    stats_.prefill_tokens_computed += plan.prefill_tokens;
    stats_.decode_tokens += decode_tokens;
    stats_.requests_finished += static_cast<int64_t>(requests_done.size());
    for (Sequence* seq : requests_done) {
      in_flight_.erase(seq->request_id);
      aborting_.erase(seq->request_id);
    }
  }
  // Tokens of continuing sequences go out first; a finished sequence is
  // committed before its last event, so that a client's next turn (placed
  // by the router from CacheService.Match) already finds its prefix.
  std::vector<std::pair<std::shared_ptr<RequestStream>, GenerateEvent>> last;
  std::vector<std::shared_ptr<RequestStream>> touched;
  touched.reserve(events.size());
  for (auto& [seq, event] : events) {
    touched.push_back(seq->stream);
    if (event.finished) {
      last.emplace_back(seq->stream, std::move(event));
    } else {
      seq->stream->Append(std::move(event));
    }
  }
  for (auto& [seq, reason] : finished) Finish(seq, reason);  // Frees seq.
  for (auto& [stream, event] : last) stream->Append(std::move(event));
  NotifyStreams(std::move(touched));
  return decode_tokens;
}

void Scheduler::NotifyStreams(
    std::vector<std::shared_ptr<RequestStream>> streams) {
  if (notifier_ != nullptr) {
    notifier_->Post(std::move(streams));
    return;
  }
  for (const std::shared_ptr<RequestStream>& stream : streams) {
    stream->Notify();
  }
}

void Scheduler::ObserveTokenLatency(Sequence* seq, absl::Time now) {
  if (metrics_ != nullptr) {
    if (seq->num_generated == 1) {
      metrics_->ObserveTimeToFirstToken(
          absl::ToDoubleSeconds(now - seq->arrival));
    } else {
      metrics_->ObserveTimePerOutputToken(
          absl::ToDoubleSeconds(now - seq->last_token_time));
    }
  }
  seq->last_token_time = now;
}

void Scheduler::Finish(Sequence* seq, v1::FinishReason reason) {
  // Everything written goes into the radix tree (unless the request opted
  // out of the prefix cache).
  EndLease(seq, /*commit=*/!seq->disable_prefix_cache);
  if (metrics_ != nullptr) metrics_->AddRequestFinished(OutcomeName(reason));
  RemoveRunning(seq);
}

void Scheduler::Fail(Sequence* seq, absl::Status status) {
  spdlog::warn("request {} failed: {}", seq->request_id, status.ToString());
  End(seq, std::move(status), v1::FINISH_REASON_UNSPECIFIED);
}

void Scheduler::End(Sequence* seq, absl::Status status,
                    v1::FinishReason reason) {
  const bool aborted = reason == v1::FINISH_REASON_ABORT;
  EndLease(seq, /*commit=*/false);
  if (!EndSample(seq, aborted ? absl::OkStatus() : status)) {
    // Other samples of the request go on: a failure ends them too (the
    // request has one status), an abort reaches them by the request id.
    if (!aborted) {
      absl::MutexLock lock(&mu_);
      if (aborting_.insert(seq->request_id).second) {
        abort_requests_.push_back(seq->request_id);
      }
    }
    return;
  }
  if (seq->group != nullptr && !seq->group->status.ok()) {
    status = seq->group->status;
  }
  seq->stream->Push(EndEvent(*seq, std::move(status), reason, absl::Now()));
  if (metrics_ != nullptr) {
    metrics_->AddRequestFinished(aborted ? "abort" : "error");
  }
  absl::MutexLock lock(&mu_);
  in_flight_.erase(seq->request_id);
  aborting_.erase(seq->request_id);
  ++(aborted ? stats_.requests_aborted : stats_.requests_failed);
}

bool Scheduler::EndSample(Sequence* seq, const absl::Status& status) {
  if (seq->group == nullptr) return true;
  SampleGroup& group = *seq->group;
  if (!status.ok() && group.status.ok()) group.status = status;
  return --group.live == 0;
}

bool Scheduler::ForkParents() {
  std::vector<Sequence*> parents;
  for (const auto& seq : running_) {
    if (ReadyToFork(*seq)) parents.push_back(seq.get());
  }
  for (Sequence* parent : parents) ForkParent(parent);
  return !parents.empty();
}

void Scheduler::ForkParent(Sequence* parent) {
  absl::StatusOr<v1::ForkResponse> forked =
      cache_->Fork(ForkRequestFor(*parent));
  if (!forked.ok()) {
    const absl::StatusCode code = forked.status().code();
    if (code == absl::StatusCode::kResourceExhausted) return;  // Next step.
    if (code == absl::StatusCode::kNotFound) {
      parent->has_lease = false;  // Expired: recompute.
      Preempt(parent);
      return;
    }
    Fail(parent, absl::UnavailableError(absl::StrCat(
                     "cache service: ", forked.status().ToString())));
    RemoveRunning(parent);
    return;
  }
  absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> children =
      MakeForkChildren(*parent, *forked);
  if (!children.ok()) {
    for (const v1::ForkResponse::Child& c : forked->children()) {
      v1::ReleaseRequest release;
      release.set_lease_id(c.lease_id());
      (void)cache_->Release(release);
    }
    Fail(parent, children.status());
    RemoveRunning(parent);
    return;
  }
  // The children hold the shared pages; the parent's own slots (its
  // reserve and the last prompt position) go back.
  EndLease(parent, /*commit=*/false);
  std::vector<Sequence*> grown;
  auto it = std::find_if(running_.begin(), running_.end(),
                         [parent](const auto& s) { return s.get() == parent; });
  it = running_.erase(it);
  for (auto& child : *children) {
    grown.push_back(child.get());
    it = std::next(running_.insert(it, std::move(child)));
  }
  // Each child's first Grow copies the shared partial page (copy-on-write)
  // before the child writes its last prompt token.
  for (Sequence* child : grown) GrowForkedChild(child);
}

void Scheduler::GrowForkedChild(Sequence* child) {
  v1::GrowRequest request;
  request.set_lease_id(child->lease_id);
  request.set_num_tokens(static_cast<int32_t>(
      std::clamp<int64_t>(child->max_slots_needed() -
                              static_cast<int64_t>(child->kv_indices.size()),
                          1, options_.grow_tokens)));
  absl::StatusOr<v1::GrowResponse> grown = cache_->Grow(request);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.grow_rpcs;
  }
  // Without memory now, the child waits for GrowOne like any sequence
  // whose lease is full (it has no slot, so nothing is written).
  if (grown.ok()) {
    ApplyGrow(*grown, child);
  } else if (grown.status().code() == absl::StatusCode::kNotFound) {
    child->has_lease = false;
    Preempt(child);
  }
}

void Scheduler::EndLease(Sequence* seq, bool commit) {
  if (!seq->has_lease) return;
  seq->has_lease = false;
  if (commit && seq->acquired_len > 0 &&
      seq->num_computed >= seq->acquired_len) {
    absl::StatusOr<v1::CommitResponse> response =
        cache_->Commit(CommitRequestFor(*seq, /*keep_lease=*/false));
    if (response.ok()) return;
    spdlog::warn("commit of lease {} failed ({}); releasing", seq->lease_id,
                 response.status().ToString());
    if (response.status().code() == absl::StatusCode::kNotFound) return;
  }
  v1::ReleaseRequest request;
  request.set_lease_id(seq->lease_id);
  absl::StatusOr<v1::ReleaseResponse> response = cache_->Release(request);
  if (!response.ok() &&
      response.status().code() != absl::StatusCode::kNotFound) {
    // The service expires the lease after its TTL (we stop renewing it).
    spdlog::warn("release of lease {} failed: {}", seq->lease_id,
                 response.status().ToString());
  }
}

void Scheduler::RemoveRunning(Sequence* seq) {
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->get() == seq) {
      running_.erase(it);
      return;
    }
  }
}

void Scheduler::PublishLoad() {
  int64_t outstanding = 0;
  int64_t held_slots = 0;
  std::vector<uint64_t> leases;
  for (const auto& seq : running_) {
    outstanding += static_cast<int64_t>(seq->tokens.size()) -
                   seq->num_computed + seq->sampling.max_new_tokens -
                   seq->num_generated;
    held_slots += static_cast<int64_t>(seq->kv_indices.size());
    if (seq->has_lease) leases.push_back(seq->lease_id);
  }
  outstanding += waiting_.outstanding_tokens();
  if (metrics_ != nullptr) {
    metrics_->SetQueueDepth(static_cast<int32_t>(waiting_.size()),
                            static_cast<int32_t>(running_.size()));
  }
  v1::WorkerLoad load;
  {
    absl::MutexLock lock(&mu_);
    stats_.load.set_running_requests(static_cast<int32_t>(running_.size()));
    stats_.load.set_waiting_requests(static_cast<int32_t>(queued_.load()));
    stats_.load.set_outstanding_tokens(outstanding);
    stats_.load.set_available_slots(
        std::max<int64_t>(0, capacity_slots_ - held_slots));
    load = stats_.load;
  }
  if (session_ != nullptr) session_->SetLoad(load, std::move(leases));
}

}  // namespace radixkv::worker
