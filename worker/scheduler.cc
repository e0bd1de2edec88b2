#include "worker/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "proto/generate_request_checks.h"
#include "proto/prompt_text_limit.h"
#include "spdlog/spdlog.h"
#include "worker/model/sampler.h"
#include "worker/sequence.h"
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

}  // namespace

std::string FormatDurationForLog(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return absl::FormatDuration(d);
  }
  const absl::Duration unit = absl::AbsDuration(d) < absl::Milliseconds(1)
                                  ? absl::Microseconds(1)
                                  : absl::Milliseconds(1);
  return absl::FormatDuration(absl::Floor(d + unit / 2, unit));
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    SchedulerOptions options, ModelExecutor* executor, KvCacheClient* cache,
    const Tokenizer* tokenizer, WorkerMetrics* metrics) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError("executor is required");
  }
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
  if (cache != nullptr) {
    absl::Status registered = scheduler->RegisterWithService(false);
    if (!registered.ok()) {
      spdlog::warn("cache service registration failed (retrying): {}",
                   registered.ToString());
    }
  }
  if (scheduler->options_.start_thread) {
    scheduler->scheduler_thread_ =
        std::thread([s = scheduler.get()] { s->SchedulerLoop(); });
  }
  if (cache != nullptr) {
    scheduler->heartbeat_thread_ =
        std::thread([s = scheduler.get()] { s->HeartbeatLoop(); });
  }
  return scheduler;
}

Scheduler::Scheduler(SchedulerOptions options, ModelExecutor* executor,
                     KvCacheClient* cache, const Tokenizer* tokenizer,
                     WorkerMetrics* metrics)
    : options_(std::move(options)),
      executor_(executor),
      cache_(cache),
      tokenizer_(tokenizer),
      metrics_(metrics),
      page_size_(executor->page_size()),
      capacity_slots_(executor->capacity_slots()),
      vocab_size_(executor->config().vocab_size) {
  absl::MutexLock lock(&mu_);
  epoch_ = options_.epoch;
}

Scheduler::~Scheduler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
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

absl::Status Scheduler::RegisterWithService(bool fresh_epoch) {
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    if (fresh_epoch) epoch_ = std::max(NowMillis(), epoch_ + 1);
    epoch = epoch_;
  }
  v1::RegisterRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_address(options_.advertise_address);
  request.set_capacity_slots(capacity_slots_);
  request.set_page_size(page_size_);
  request.set_model(options_.model_name);
  request.set_epoch(epoch);
  request.set_vocab_size(vocab_size_);
  request.set_metrics_address(options_.metrics_address);
  absl::StatusOr<v1::RegisterResponse> response = cache_->Register(request);
  if (!response.ok()) return response.status();
  absl::MutexLock lock(&mu_);
  registered_ = true;
  absl::Duration interval = options_.heartbeat_interval;
  if (interval <= absl::ZeroDuration()) {
    // The service's cadence, else a quarter of its timeout.
    interval = response->heartbeat_interval_ms() > 0
                   ? absl::Milliseconds(response->heartbeat_interval_ms())
               : response->heartbeat_timeout_ms() > 0
                   ? absl::Milliseconds(response->heartbeat_timeout_ms()) / 4
                   : absl::Seconds(1);
  }
  if (response->lease_ttl_ms() > 0) {
    interval =
        std::min(interval, absl::Milliseconds(response->lease_ttl_ms()) / 3);
  }
  heartbeat_interval_ = std::max(interval, absl::Milliseconds(10));
  if (fresh_epoch) invalid_before_epoch_ = epoch;
  fresh_epoch_needed_ = false;
  stats_.epoch = epoch;
  stats_.registered = true;
  spdlog::info(
      "registered with the cache service as {} epoch {} "
      "({} slots, page_size {}, heartbeat every {})",
      options_.worker_id, epoch, capacity_slots_, page_size_,
      FormatDurationForLog(heartbeat_interval_));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Submit(
    const v1::GenerateRequest& request) {
  // --- Validation: nothing is queued and no memory is taken on error. ---
  if (!request.model().empty() && request.model() != options_.model_name) {
    // Echoed only when short: the status message travels in gRPC metadata
    // (8 KiB default limit on clients; a 100 kB name turned INVALID_ARGUMENT
    // into RESOURCE_EXHAUSTED).
    constexpr size_t kMaxEchoedModelBytes = 256;
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown model ",
        request.model().size() <= kMaxEchoedModelBytes
            ? absl::StrCat("'", request.model(), "'")
            : absl::StrCat("of ", request.model().size(), " bytes"),
        " (this worker serves '", options_.model_name, "')"));
  }
  if (absl::Status valid = v1::CheckModelIndependentFields(request);
      !valid.ok()) {
    return valid;
  }
  const v1::SamplingParams& sp = request.sampling();
  SamplingParams sampling;
  sampling.temperature = sp.temperature();
  sampling.top_k = sp.top_k();
  sampling.top_p = sp.top_p() == 0.0f ? 1.0f : sp.top_p();
  sampling.max_new_tokens = sp.max_new_tokens();
  sampling.ignore_eos = sp.ignore_eos();
  if (sp.top_k() > vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be in [0, vocab_size=", vocab_size_, "]"));
  }
  for (int32_t id : sp.stop_token_ids()) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop token id ", id, " outside [0, ", vocab_size_, ")"));
    }
    sampling.stop_token_ids.push_back(id);
  }
  sampling.stop_strings.assign(sp.stop().begin(), sp.stop().end());
  if (absl::Status valid =
          ValidateSamplingParams(sampling, options_.max_new_tokens_limit);
      !valid.ok()) {
    return valid;
  }
  if ((sp.stop_size() > 0 || request.return_text()) && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(
        "stop strings and return_text need a tokenizer; none is loaded");
  }
  std::vector<int32_t> prompt;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) {
        return absl::InvalidArgumentError("empty prompt");
      }
      if (tokenizer_ == nullptr) {
        return absl::InvalidArgumentError(
            "text prompts need a tokenizer; send token_ids");
      }
      const int64_t max_text_bytes =
          v1::MaxPromptTextBytes(executor_->config().max_position_embeddings);
      if (static_cast<int64_t>(request.text().size()) > max_text_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt text of ", request.text().size(),
            " bytes exceeds the limit of ", max_text_bytes, " bytes (",
            v1::kMaxPromptBytesPerPosition, " bytes x the model's context of ",
            executor_->config().max_position_embeddings, " positions)"));
      }
      absl::StatusOr<std::vector<int32_t>> ids =
          tokenizer_->Encode(request.text(), /*add_bos=*/true);
      if (!ids.ok()) return ids.status();
      prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      prompt.assign(request.token_ids().ids().begin(),
                    request.token_ids().ids().end());
      break;
    default:
      return absl::InvalidArgumentError("empty prompt (set text or token_ids)");
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", id, " outside [0, ", vocab_size_, ")"));
    }
  }
  const int64_t max_positions = executor_->config().max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) + sampling.max_new_tokens >
      max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) + max_new_tokens (",
                     sampling.max_new_tokens,
                     ") exceeds the model's context of ", max_positions));
  }
  // Slots the request can ever hold (the last generated token never gets
  // KV), in whole pages: more than the pool can never be served, so it is
  // rejected now instead of failing after streaming part of its output.
  const int64_t needed_slots =
      static_cast<int64_t>(prompt.size()) + sampling.max_new_tokens - 1;
  const int64_t needed_pages = (needed_slots + page_size_ - 1) / page_size_;
  if (needed_pages * page_size_ > capacity_slots_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prompt (", prompt.size(), " tokens) + max_new_tokens (",
                     sampling.max_new_tokens, ") cannot fit the KV pool of ",
                     capacity_slots_, " slots (page_size ", page_size_,
                     ") even when it is empty"));
  }

  auto seq = std::make_unique<Sequence>();
  seq->cache_salt = request.cache_salt();
  seq->priority = request.priority();
  seq->disable_prefix_cache = request.disable_prefix_cache();
  seq->return_text = request.return_text();
  seq->prompt_len = static_cast<int32_t>(prompt.size());
  seq->arrival = absl::Now();
  if (tokenizer_ != nullptr && (seq->return_text || sp.stop_size() > 0)) {
    seq->detokenizer =
        std::make_unique<IncrementalDetokenizer>(tokenizer_, prompt);
  }
  if (sp.stop_size() > 0) {
    seq->stop_checker = std::make_unique<StopChecker>(sampling.stop_strings);
  }
  seq->tokens = std::move(prompt);

  absl::MutexLock lock(&mu_);
  if (cache_ == nullptr) {
    return absl::UnavailableError(
        "no cache service configured (--cache_service); cannot allocate KV");
  }
  if (!registered_) {
    return absl::UnavailableError("not registered with the cache service");
  }
  if (draining_ || stop_) return absl::UnavailableError("worker is draining");
  std::string id = request.request_id();
  if (id.empty()) {
    id = absl::StrCat(options_.worker_id, "-", epoch_, "-",
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
  queued_.fetch_add(1);
  sampling.seed = sp.seed() != 0 ? sp.seed() : absl::HashOf(id);
  seq->sampling = sampling;
  seq->sampler = std::make_unique<Sampler>(sampling);
  seq->request_id = id;
  seq->stream = std::make_shared<RequestStream>(id);
  auto stream = seq->stream;
  in_flight_.insert(id);
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
  absl::MutexLock lock(&mu_);
  return stats_;
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
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  bool registered;
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    registered = registered_;
    epoch = epoch_;
  }
  if (cache_ != nullptr && registered) {
    v1::DeregisterRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_epoch(epoch);
    absl::StatusOr<v1::DeregisterResponse> response =
        cache_->Deregister(request);
    if (response.ok()) {
      spdlog::info("deregistered from the cache service ({} leases released)",
                   response->released_leases());
      absl::MutexLock lock(&mu_);
      registered_ = false;
      stats_.registered = false;
    } else {
      spdlog::warn("deregister failed: {}", response.status().ToString());
    }
  }
}

void Scheduler::SchedulerLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || !submitted_.empty() || !abort_requests_.empty() ||
               !lost_leases_.empty() || !in_flight_.empty();
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

void Scheduler::HeartbeatLoop() {
  while (true) {
    absl::Duration interval;
    bool registered;
    bool fresh_epoch;
    {
      absl::MutexLock lock(&mu_);
      interval = registered_ ? heartbeat_interval_ : absl::Seconds(1);
      auto stopping = [this]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) return;
      registered = registered_;
      fresh_epoch = fresh_epoch_needed_;
    }
    if (!registered) {
      absl::Status status = RegisterWithService(fresh_epoch);
      if (!status.ok()) {
        spdlog::warn("cache service registration failed: {}",
                     status.ToString());
      }
      continue;
    }
    SendHeartbeat();
  }
}

void Scheduler::SendHeartbeat() {
  v1::HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  absl::Duration deadline;
  {
    absl::MutexLock lock(&mu_);
    deadline = heartbeat_interval_;
    request.set_epoch(epoch_);
    *request.mutable_load() = stats_.load;
    for (uint64_t id : held_leases_) request.add_lease_ids(id);
  }
  absl::StatusOr<v1::HeartbeatResponse> response =
      cache_->Heartbeat(request, deadline);
  if (response.ok()) {
    if (response->lost_lease_ids_size() > 0) {
      absl::MutexLock lock(&mu_);
      for (uint64_t id : response->lost_lease_ids()) lost_leases_.push_back(id);
    }
    return;
  }
  const absl::StatusCode code = response.status().code();
  if (code == absl::StatusCode::kNotFound ||
      code == absl::StatusCode::kFailedPrecondition) {
    // The service forgot this worker (restart without journal, timeout):
    // every lease is gone. Re-register with a fresh epoch; the scheduler
    // requeues the sequences whose leases predate it.
    spdlog::warn("heartbeat: {}; re-registering with a fresh epoch",
                 response.status().ToString());
    absl::Status status = RegisterWithService(true);
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      registered_ = false;
      stats_.registered = false;
      fresh_epoch_needed_ = true;
    }
    return;
  }
  spdlog::warn("heartbeat failed: {}", response.status().ToString());
}

bool Scheduler::Step() {
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
      budget -= static_cast<int32_t>(
          std::min<int64_t>(budget, len - seq->num_computed));
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
  bool progressed = maintained || running_.size() != admitted_before;
  if (!maintained) progressed |= GrowOne();
  progressed |= RunBatch(options_.max_prefill_tokens);
  PublishLoad();
  {
    absl::MutexLock lock(&mu_);
    busy_ = false;
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
    auto finish_abort = [this, shutdown](Sequence* seq) {
      EndLease(seq, /*commit=*/false);
      GenerateEvent event;
      event.finished = true;
      event.finish_reason = v1::FINISH_REASON_ABORT;
      event.status =
          shutdown ? absl::UnavailableError(absl::StrCat(
                         "worker ", options_.worker_id, " is shutting down"))
                   : absl::CancelledError("aborted");
      event.usage.set_prompt_tokens(seq->prompt_len);
      event.usage.set_cached_tokens(seq->cached_tokens);
      event.usage.set_completion_tokens(seq->num_generated);
      event.elapsed_s = absl::ToDoubleSeconds(absl::Now() - seq->arrival);
      seq->stream->Push(std::move(event));
      if (metrics_ != nullptr) metrics_->AddRequestFinished("abort");
      absl::MutexLock lock(&mu_);
      in_flight_.erase(seq->request_id);
      aborting_.erase(seq->request_id);
      ++stats_.requests_aborted;
    };
    if (std::unique_ptr<Sequence> waiting = waiting_.Remove(id)) {
      queued_.fetch_sub(1);
      finish_abort(waiting.get());
      continue;
    }
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if ((*it)->request_id == id) {
        finish_abort(it->get());
        running_.erase(it);
        break;
      }
    }
  }
}

void Scheduler::ApplyLostLeases() {
  std::vector<uint64_t> lost;
  int64_t invalid_before;
  {
    absl::MutexLock lock(&mu_);
    lost.swap(lost_leases_);
    invalid_before = invalid_before_epoch_;
  }
  std::vector<Sequence*> victims;
  for (const auto& seq : running_) {
    bool gone = seq->has_lease && seq->lease_epoch < invalid_before;
    gone |= std::find(lost.begin(), lost.end(), seq->lease_id) != lost.end();
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
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    epoch = epoch_;
  }
  while (!waiting_.empty() &&
         static_cast<int32_t>(running_.size()) <
             options_.max_running_requests &&
         *prefill_budget > 0) {
    Sequence* seq = waiting_.front();
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (WaitsForSharedPrefill(*seq)) break;
    // Decode room: like Grow, 2 x the batch it joins, so that sequences
    // admitted together run out at staggered steps and the one Grow per
    // step keeps up; never more than the request can still use.
    const int64_t room = std::min<int64_t>(
        65536,
        std::max<int64_t>(options_.reserve_tokens,
                          2 * (static_cast<int64_t>(running_.size()) + 1)));
    // A preempted sequence readmitted alone takes every slot it can still
    // need (it fits the empty pool, Submit checked), so that it never
    // depends on a Grow (rounded up to the service's chunk) again.
    const bool alone_again = seq->admitted_once && running_.empty();
    const int64_t reserve = std::clamp<int64_t>(seq->max_slots_needed() - len,
                                                0, alone_again ? 65536 : room);
    v1::AcquireRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_epoch(epoch);
    request.set_model(options_.model_name);
    request.set_cache_salt(seq->cache_salt);
    request.mutable_tokens()->Assign(seq->tokens.begin(), seq->tokens.end());
    request.set_priority(seq->priority);
    request.set_reserve_tokens(static_cast<int32_t>(reserve));
    request.set_request_id(seq->request_id);
    request.set_disable_match(seq->disable_prefix_cache);
    absl::StatusOr<v1::AcquireResponse> lease = cache_->Acquire(request);
    if (!lease.ok()) {
      const absl::StatusCode code = lease.status().code();
      if (code == absl::StatusCode::kResourceExhausted) {
        // Submit rejected every request that cannot fit the empty pool, so
        // this one fits once running sequences (or expiring leases) free
        // memory: it waits, preempted ones included, instead of failing.
        break;
      }
      std::unique_ptr<Sequence> failed = waiting_.PopFront();
      queued_.fetch_sub(1);
      if (code == absl::StatusCode::kInvalidArgument) {
        Fail(failed.get(), lease.status());
      } else {
        if (code == absl::StatusCode::kNotFound ||
            code == absl::StatusCode::kFailedPrecondition) {
          // The service dropped this worker (or forgot it): the heartbeat
          // thread registers a fresh epoch, as after a failed heartbeat.
          absl::MutexLock lock(&mu_);
          registered_ = false;
          stats_.registered = false;
          fresh_epoch_needed_ = true;
        }
        Fail(failed.get(), absl::UnavailableError(absl::StrCat(
                               "cache service: ", lease.status().ToString())));
      }
      continue;
    }
    if (lease->kv_indices_size() != len + reserve || lease->prefix_len() < 0 ||
        lease->prefix_len() >= len) {
      std::unique_ptr<Sequence> failed = waiting_.PopFront();
      queued_.fetch_sub(1);
      failed->has_lease = true;
      failed->lease_id = lease->lease_id();
      Fail(failed.get(),
           absl::InternalError(absl::StrCat(
               "cache service returned an inconsistent lease: ",
               lease->kv_indices_size(), " slots for ", len, " + ", reserve,
               " tokens, prefix_len ", lease->prefix_len())));
      continue;
    }
    seq->has_lease = true;
    seq->lease_id = lease->lease_id();
    seq->lease_epoch = epoch;
    seq->acquired_len = len;
    seq->kv_indices.assign(lease->kv_indices().begin(),
                           lease->kv_indices().end());
    seq->pending_copies.clear();
    for (const v1::CopyOp& op : lease->copy_ops()) {
      seq->pending_copies.push_back(
          PageCopy{op.src_page(), op.dst_page(), op.num_tokens()});
    }
    seq->num_computed = lease->prefix_len();
    seq->prefill_committed = false;
    seq->admission_order = ++admission_counter_;
    if (!seq->admitted_once) {
      seq->admitted_once = true;
      seq->cached_tokens = static_cast<int32_t>(lease->prefix_len());
      if (metrics_ != nullptr) {
        metrics_->AddPrefillTokensReused(lease->prefix_len());
      }
      absl::MutexLock lock(&mu_);
      stats_.prompt_tokens += seq->prompt_len;
      stats_.prefill_tokens_reused += lease->prefix_len();
    }
    *prefill_budget -= static_cast<int32_t>(
        std::min<int64_t>(*prefill_budget, len - lease->prefix_len()));
    running_.push_back(waiting_.PopFront());
    queued_.fetch_sub(1);
  }
}

bool Scheduler::WaitsForSharedPrefill(const Sequence& candidate) const {
  if (candidate.disable_prefix_cache) return false;
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
  // The oldest admitted sequence whose prompt is computed but not yet in the
  // tree (SGLang's cache_unfinished_req, here after the last prompt chunk
  // because a Commit covers at least the lease's prompt).
  Sequence* target = nullptr;
  for (const auto& seq : running_) {
    if (!seq->has_lease || seq->prefill_committed ||
        seq->disable_prefix_cache || seq->in_prefill() ||
        seq->acquired_len <= 0 || !seq->pending_copies.empty()) {
      continue;
    }
    if (target == nullptr || seq->admission_order < target->admission_order) {
      target = seq.get();
    }
  }
  if (target == nullptr) return false;
  target->prefill_committed = true;  // Tried once per admission.
  v1::CommitRequest request;
  request.set_lease_id(target->lease_id);
  request.set_keep_lease(true);
  // Every position with KV: the prompt and any tokens decoded since.
  request.mutable_tokens()->Assign(
      target->tokens.begin(), target->tokens.begin() + target->num_computed);
  absl::StatusOr<v1::CommitResponse> committed = cache_->Commit(request);
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
  if (committed->kv_indices_size() !=
      static_cast<int64_t>(target->kv_indices.size())) {
    Fail(target, absl::InternalError(absl::StrCat(
                     "cache service returned a remapped table of ",
                     committed->kv_indices_size(), " slots for a lease of ",
                     target->kv_indices.size())));
    RemoveRunning(target);
    return true;
  }
  // Duplicated pages now point at the tree's copy of the same tokens (the
  // lease's own copies were freed): read them from there from now on.
  int64_t remapped = 0;
  for (int i = 0; i < committed->kv_indices_size(); ++i) {
    if (target->kv_indices[i] != committed->kv_indices(i)) {
      target->kv_indices[i] = committed->kv_indices(i);
      ++remapped;
    }
  }
  absl::MutexLock lock(&mu_);
  stats_.prefill_commit_remapped_slots += remapped;
  return true;
}

bool Scheduler::GrowOne() {
  // Urgent: a generating sequence without a slot for its next token.
  // Otherwise: the generating sequence with the least headroom, if below
  // the low watermark (grow ahead so that most steps need no RPC).
  // One Grow per step must keep up with every generating sequence taking one
  // slot per step: grow by at least 2x their number (and start growing at
  // half that headroom), so that in steady state no sequence waits.
  int64_t generating = 0;
  for (const auto& seq : running_) generating += seq->in_prefill() ? 0 : 1;
  const int64_t chunk = std::min<int64_t>(
      65536, std::max<int64_t>(options_.grow_tokens, 2 * generating));
  const int64_t watermark =
      std::max<int64_t>(options_.grow_low_watermark, chunk / 2);
  Sequence* target = nullptr;
  bool urgent = false;
  int64_t best_headroom = 0;
  for (const auto& seq : running_) {
    if (seq->in_prefill()) continue;
    const int64_t slots = static_cast<int64_t>(seq->kv_indices.size());
    if (slots >= seq->max_slots_needed()) continue;
    const int64_t headroom = slots - static_cast<int64_t>(seq->tokens.size());
    if (headroom < 0) {
      if (!urgent || seq->admission_order < target->admission_order) {
        target = seq.get();
        urgent = true;
      }
    } else if (!urgent && headroom < watermark &&
               (target == nullptr || headroom < best_headroom)) {
      target = seq.get();
      best_headroom = headroom;
    }
  }
  if (target == nullptr) return false;
  const int64_t want = std::min<int64_t>(
      chunk, target->max_slots_needed() -
                 static_cast<int64_t>(target->kv_indices.size()));
  v1::GrowRequest request;
  request.set_lease_id(target->lease_id);
  request.set_num_tokens(static_cast<int32_t>(want));
  absl::StatusOr<v1::GrowResponse> grown = cache_->Grow(request);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.grow_rpcs;
  }
  if (grown.ok()) {
    if (grown->first_remapped_position() >= 0) {
      const int64_t first = grown->first_remapped_position();
      for (int i = 0; i < grown->remapped_kv_indices_size(); ++i) {
        if (first + i < static_cast<int64_t>(target->kv_indices.size())) {
          target->kv_indices[first + i] = grown->remapped_kv_indices(i);
        }
      }
    }
    target->kv_indices.insert(target->kv_indices.end(),
                              grown->kv_indices().begin(),
                              grown->kv_indices().end());
    for (const v1::CopyOp& op : grown->copy_ops()) {
      target->pending_copies.push_back(
          PageCopy{op.src_page(), op.dst_page(), op.num_tokens()});
    }
    return true;
  }
  const absl::StatusCode code = grown.status().code();
  if (code == absl::StatusCode::kResourceExhausted) {
    if (!urgent) return true;  // Try again when it becomes urgent.
    // Submit checked that every request fits the empty pool, so even a lone
    // sequence is preempted (its KV committed, evictable) and readmitted
    // rather than failed. Preempt the lowest-priority sequence, the newest
    // among equals (it has made the least progress).
    Sequence* victim = running_.front().get();
    for (const auto& seq : running_) {
      if (seq->priority < victim->priority ||
          (seq->priority == victim->priority &&
           seq->admission_order > victim->admission_order)) {
        victim = seq.get();
      }
    }
    Preempt(victim);
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
  struct Entry {
    Sequence* seq;
    int32_t chunk;
    bool prefill;
  };
  std::vector<Entry> entries;
  int64_t stalled = 0;
  for (const auto& seq : running_) {
    const int64_t remaining =
        static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    const bool prefill = seq->in_prefill();
    int64_t chunk = prefill ? std::min<int64_t>(remaining, prefill_budget)
                            : std::min<int64_t>(remaining, 1);
    if (chunk <= 0) continue;
    if (static_cast<int64_t>(seq->kv_indices.size()) <
        seq->num_computed + chunk) {
      ++stalled;  // Waits for a Grow.
      continue;
    }
    if (prefill) prefill_budget -= static_cast<int32_t>(chunk);
    entries.push_back({seq.get(), static_cast<int32_t>(chunk), prefill});
  }
  if (stalled > 0) {
    absl::MutexLock lock(&mu_);
    stats_.stalled_sequence_steps += stalled;
  }
  if (entries.empty()) return false;

  const absl::Time start = absl::Now();
  ForwardBatch batch;
  batch.is_decode = std::all_of(entries.begin(), entries.end(),
                                [](const Entry& e) { return e.chunk == 1; });
  batch.qo_indptr.push_back(0);
  batch.kv_indptr.push_back(0);
  int64_t prefill_tokens = 0;
  for (const Entry& e : entries) {
    Sequence& seq = *e.seq;
    const int64_t begin = seq.num_computed;
    for (int64_t p = begin; p < begin + e.chunk; ++p) {
      batch.input_ids.push_back(seq.tokens[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.out_cache_loc.push_back(seq.kv_indices[p]);
    }
    const int64_t context = batch.is_decode ? begin + 1 : begin;
    batch.kv_indices.insert(batch.kv_indices.end(), seq.kv_indices.begin(),
                            seq.kv_indices.begin() + context);
    batch.qo_indptr.push_back(batch.qo_indptr.back() + e.chunk);
    batch.kv_indptr.push_back(batch.kv_indptr.back() +
                              static_cast<int32_t>(context));
    batch.copy_ops.insert(batch.copy_ops.end(), seq.pending_copies.begin(),
                          seq.pending_copies.end());
    if (e.prefill) prefill_tokens += e.chunk;
  }
  // One token per sequence whose prompt is fully computed after this step;
  // prefill chunks that leave part of the prompt need none (no draw, no
  // random number consumed). The executor samples: on the device for the
  // GPU backend (only B token ids leave the device), through the request's
  // host Sampler for the CPU backend (ModelExecutor's default).
  std::vector<SequenceSampling> sampling(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Sequence& seq = *entries[i].seq;
    SequenceSampling& s = sampling[i];
    s.needs_token = seq.num_computed + entries[i].chunk >=
                    static_cast<int64_t>(seq.tokens.size());
    s.temperature = seq.sampling.temperature;
    s.top_k = seq.sampling.top_k;
    s.top_p = seq.sampling.top_p;
    s.seed = seq.sampling.seed;
    s.step = static_cast<uint64_t>(seq.num_generated);
    s.host_sampler = seq.sampler.get();
  }
  std::vector<int32_t> token_ids;
  absl::Status forward = executor_->ForwardSample(batch, sampling, &token_ids);
  if (forward.ok() && token_ids.size() != entries.size()) {
    forward = absl::InternalError(absl::StrCat("executor returned ",
                                               token_ids.size(), " tokens for ",
                                               entries.size(), " sequences"));
  }
  for (size_t i = 0; forward.ok() && i < entries.size(); ++i) {
    const int32_t t = token_ids[i];
    if (sampling[i].needs_token && t != kSamplingFailedToken &&
        (t < 0 || t >= vocab_size_)) {
      forward = absl::InternalError(absl::StrCat("executor sampled token ", t,
                                                 " outside the vocabulary of ",
                                                 vocab_size_));
    }
  }
  if (!forward.ok()) {
    spdlog::error("forward failed: {}", forward.ToString());
    for (const Entry& e : entries) {
      Fail(e.seq, absl::InternalError(
                      absl::StrCat("forward failed: ", forward.message())));
      RemoveRunning(e.seq);
    }
    return true;
  }

  int64_t decode_tokens = 0;
  std::vector<std::pair<Sequence*, v1::FinishReason>> finished;
  std::vector<std::pair<Sequence*, GenerateEvent>> events;
  std::vector<Sequence*> failed;
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < entries.size(); ++i) {
    Sequence& seq = *entries[i].seq;
    seq.pending_copies.clear();
    seq.num_computed += entries[i].chunk;
    if (!sampling[i].needs_token) continue;
    const int32_t token = token_ids[i];
    if (token == kSamplingFailedToken) {
      // One sequence's logits went non-finite: fail it alone.
      Fail(&seq, absl::InternalError(
                     "sampling failed: the logits of this sequence are not "
                     "finite"));
      failed.push_back(&seq);
      continue;
    }
    seq.tokens.push_back(token);
    ++seq.num_generated;
    ++decode_tokens;
    if (metrics_ != nullptr) {
      if (seq.num_generated == 1) {
        metrics_->ObserveTimeToFirstToken(
            absl::ToDoubleSeconds(now - seq.arrival));
      } else {
        metrics_->ObserveTimePerOutputToken(
            absl::ToDoubleSeconds(now - seq.last_token_time));
      }
    }
    seq.last_token_time = now;

    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    const auto& stops = seq.sampling.stop_token_ids;
    const auto& eos = executor_->config().eos_token_ids;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      reason = v1::FINISH_REASON_STOP;
    } else if (!seq.sampling.ignore_eos &&
               (std::find(eos.begin(), eos.end(), token) != eos.end() ||
                (eos.empty() && tokenizer_ != nullptr &&
                 token == tokenizer_->eos_id()))) {
      reason = v1::FINISH_REASON_EOS;
    }
    std::string text;
    if (seq.detokenizer != nullptr) {
      absl::StatusOr<std::string> delta = seq.detokenizer->Append(token);
      std::string d = delta.ok() ? *delta : std::string();
      if (seq.stop_checker != nullptr) {
        StopChecker::Result r = seq.stop_checker->Append(d);
        text = std::move(r.emit);
        if (r.stopped && reason == v1::FINISH_REASON_UNSPECIFIED) {
          reason = v1::FINISH_REASON_STOP;
        }
      } else {
        text = std::move(d);
      }
    }
    if (reason == v1::FINISH_REASON_UNSPECIFIED &&
        seq.num_generated >= seq.sampling.max_new_tokens) {
      reason = v1::FINISH_REASON_LENGTH;
    }
    if (reason != v1::FINISH_REASON_UNSPECIFIED && seq.detokenizer != nullptr &&
        (seq.stop_checker == nullptr || !seq.stop_checker->stopped())) {
      absl::StatusOr<std::string> tail = seq.detokenizer->Flush();
      if (tail.ok()) {
        if (seq.stop_checker != nullptr) {
          StopChecker::Result r = seq.stop_checker->Append(*tail);
          text += r.emit;
          if (!r.stopped) text += seq.stop_checker->Flush();
        } else {
          text += *tail;
        }
      }
    }
    GenerateEvent event;
    event.token_ids.push_back(token);
    if (seq.return_text) event.text = std::move(text);
    event.usage.set_prompt_tokens(seq.prompt_len);
    event.usage.set_cached_tokens(seq.cached_tokens);
    event.usage.set_completion_tokens(seq.num_generated);
    event.elapsed_s = absl::ToDoubleSeconds(now - seq.arrival);
    if (reason != v1::FINISH_REASON_UNSPECIFIED) {
      event.finished = true;
      event.finish_reason = reason;
      finished.emplace_back(&seq, reason);
    }
    events.emplace_back(&seq, std::move(event));
  }
  for (Sequence* seq : failed) RemoveRunning(seq);
  // Counters first, so that a client reading GetStats right after its last
  // token sees this step.
  {
    absl::MutexLock lock(&mu_);
    ++stats_.steps;
    stats_.prefill_tokens_computed += prefill_tokens;
    stats_.decode_tokens += decode_tokens;
    stats_.requests_finished += static_cast<int64_t>(finished.size());
    for (const auto& [seq, reason] : finished) {
      in_flight_.erase(seq->request_id);
      aborting_.erase(seq->request_id);
    }
  }
  // Tokens of continuing sequences go out first; a finished sequence is
  // committed before its last event, so that a client's next turn (placed
  // by the router from CacheService.Match) already finds its prefix.
  std::vector<std::pair<std::shared_ptr<RequestStream>, GenerateEvent>> last;
  for (auto& [seq, event] : events) {
    if (event.finished) {
      last.emplace_back(seq->stream, std::move(event));
    } else {
      seq->stream->Push(std::move(event));
    }
  }
  for (auto& [seq, reason] : finished) Finish(seq, reason);  // Frees seq.
  for (auto& [stream, event] : last) stream->Push(std::move(event));

  const double step_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (metrics_ != nullptr) {
    metrics_->ObserveStep(step_seconds, static_cast<int32_t>(entries.size()),
                          prefill_tokens, decode_tokens);
  }
  return true;
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
  EndLease(seq, /*commit=*/false);
  GenerateEvent event;
  event.finished = true;
  event.status = std::move(status);
  event.usage.set_prompt_tokens(seq->prompt_len);
  event.usage.set_cached_tokens(seq->cached_tokens);
  event.usage.set_completion_tokens(seq->num_generated);
  event.elapsed_s = absl::ToDoubleSeconds(absl::Now() - seq->arrival);
  seq->stream->Push(std::move(event));
  if (metrics_ != nullptr) metrics_->AddRequestFinished("error");
  absl::MutexLock lock(&mu_);
  in_flight_.erase(seq->request_id);
  aborting_.erase(seq->request_id);
  ++stats_.requests_failed;
}

void Scheduler::EndLease(Sequence* seq, bool commit) {
  if (!seq->has_lease) return;
  seq->has_lease = false;
  if (commit && seq->acquired_len > 0 &&
      seq->num_computed >= seq->acquired_len) {
    v1::CommitRequest request;
    request.set_lease_id(seq->lease_id);
    request.mutable_tokens()->Assign(seq->tokens.begin(),
                                     seq->tokens.begin() + seq->num_computed);
    absl::StatusOr<v1::CommitResponse> response = cache_->Commit(request);
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
  absl::MutexLock lock(&mu_);
  stats_.load.set_running_requests(static_cast<int32_t>(running_.size()));
  stats_.load.set_waiting_requests(static_cast<int32_t>(queued_.load()));
  stats_.load.set_outstanding_tokens(outstanding);
  stats_.load.set_available_slots(
      std::max<int64_t>(0, capacity_slots_ - held_slots));
  held_leases_ = std::move(leases);
}

}  // namespace radixkv::worker
