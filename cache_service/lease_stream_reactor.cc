#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cache_service/cache_service_impl.h"
#include "cache_service/cache_service_mutation.h"
#include "cache_service/rpc_apply.h"

namespace radixkv::cache_service {

namespace pb = ::radixkv::v1;

// One LeaseStream reactor per stream. One read is outstanding at a time; each
// request is run by RunMutation (the unary RPCs' code) as soon as it is read,
// so the operations of a stream are applied in arrival order. Its response gets
// a slot at the back of `pending_`; the slot becomes ready when RunMutation's
// `done` runs (inline in memory mode, on the journal's writer thread once
// durable in Redis mode). Responses are written from the front of
// `pending_`, one write at a time, so they go out in request order. Reading
// pauses while kMaxPendingPerStream responses are unsent (bounded memory
// per stream). Lifetime: the reactor deletes itself when gRPC has called
// OnDone and no operation's `done` is still outstanding (`refs_`).
class CacheServiceImpl::LeaseStreamReactor final
    : public grpc::ServerBidiReactor<pb::LeaseStreamRequest,
                                     pb::LeaseStreamResponse> {
 public:
  static constexpr size_t kMaxPendingPerStream = 1024;

  static grpc::Status ShuttingDown() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the cache service is shutting down; operations of "
                        "this stream without a response were not applied");
  }

  explicit LeaseStreamReactor(CacheServiceImpl* service) : service_(service) {
    bool draining;
    {
      absl::MutexLock lock(&service_->streams_mu_);
      service_->streams_.insert(this);
      draining = service_->draining_streams_;
    }
    if (draining) {
      {
        absl::MutexLock lock(&mu_);
        draining_ = true;
        finished_ = true;
      }
      Finish(ShuttingDown());
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      reading_ = true;
    }
    StartRead(&request_);
  }

  ~LeaseStreamReactor() override {
    absl::MutexLock lock(&service_->streams_mu_);
    service_->streams_.erase(this);
  }

  // Keeps the reactor alive for a DrainAndUnref() (called under the
  // service's streams_mu_); false when it is already being destroyed.
  bool TryRef() {
    absl::MutexLock lock(&mu_);
    if (refs_ == 0) return false;
    ++refs_;
    return true;
  }

  // See CacheServiceImpl::DrainLeaseStreams; drops TryRef's reference.
  void DrainAndUnref() {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
    Unref();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // half-close by the client, or the stream broke
      Actions actions;
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        read_closed_ = true;
        actions = NextActionsLocked();
      }
      Run(actions);
      return;
    }
    // reading_ stays true until Dispatch is done with request_, so no other
    // thread starts the next read into it meanwhile.
    Pending* pending = nullptr;
    Actions stop_actions;
    {
      absl::MutexLock lock(&mu_);
      if (broken_ || draining_) {  // apply nothing more
        reading_ = false;
        stop_actions = NextActionsLocked();
      } else {
        pending_.push_back(std::make_unique<Pending>());
        pending = pending_.back().get();
        ++refs_;
      }
    }
    if (pending == nullptr) {
      Run(stop_actions);
      return;
    }
    pending->response.set_request_id(request_.request_id());
    Dispatch(pending);
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_.reset();
      write_in_flight_ = false;
      if (!ok) broken_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnCancel() override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      actions = NextActionsLocked();
    }
    Run(actions);
  }

  void OnDone() override { Unref(); }

 private:
  struct Pending {
    pb::LeaseStreamResponse response;
    bool ready = false;
  };
  // What to do after releasing mu_ (gRPC calls are made without it).
  struct Actions {
    pb::LeaseStreamResponse* write = nullptr;
    bool buffer_hint = false;
    bool read = false;
    bool finish = false;
    grpc::Status finish_status;
  };

  void Dispatch(Pending* pending) {
    pb::LeaseStreamResponse& r = pending->response;
    CacheServiceImpl& s = *service_;
    MutationDone done = [this, pending](const absl::Status& status) {
      Complete(pending, status);
    };
    switch (request_.op_case()) {
      case pb::LeaseStreamRequest::kAcquire:
        s.RunMutation(CacheRpc::kAcquire, JournalOp::kAcquire,
                      request_.acquire(), r.mutable_acquire(), &ApplyAcquire,
                      s.ValidateAcquire(request_.acquire()), std::move(done));
        return;
      case pb::LeaseStreamRequest::kGrow:
        s.RunMutation(CacheRpc::kGrow, JournalOp::kGrow, request_.grow(),
                      r.mutable_grow(), &ApplyGrow, absl::OkStatus(),
                      std::move(done));
        return;
      case pb::LeaseStreamRequest::kFork:
        s.RunMutation(CacheRpc::kFork, JournalOp::kFork, request_.fork(),
                      r.mutable_fork(), &ApplyFork, absl::OkStatus(),
                      std::move(done));
        return;
      case pb::LeaseStreamRequest::kCommit:
        s.RunMutation(CacheRpc::kCommit, JournalOp::kCommit, request_.commit(),
                      r.mutable_commit(), &AdmitAndApplyCommit,
                      s.ValidateCommit(request_.commit()), std::move(done));
        return;
      case pb::LeaseStreamRequest::kRelease:
        s.RunMutation(CacheRpc::kRelease, JournalOp::kRelease,
                      request_.release(), r.mutable_release(), &ApplyRelease,
                      absl::OkStatus(), std::move(done));
        return;
      case pb::LeaseStreamRequest::OP_NOT_SET:
        break;
    }
    done(absl::InvalidArgumentError(
        "LeaseStreamRequest has no operation set (one of acquire, grow, "
        "fork, commit, release)"));
  }

  // RunMutation's verdict for `pending` (any thread).
  void Complete(Pending* pending, const absl::Status& status) {
    if (!status.ok()) {
      pending->response.clear_result();
      pending->response.set_status_code(static_cast<int32_t>(status.code()));
      pending->response.set_status_message(std::string(status.message()));
    }
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      pending->ready = true;
      actions = NextActionsLocked();
    }
    Run(actions);
    Unref();
  }

  // Decides the next write, read and finish from the current state.
  Actions NextActionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions a;
    if (finished_) return a;
    if (broken_) {
      // Cancelled or a write failed: finish once no write is in flight
      // (operations still journaling complete later and are dropped).
      if (!write_in_flight_) {
        finished_ = true;
        a.finish = true;
        a.finish_status =
            grpc::Status(grpc::StatusCode::CANCELLED, "lease stream cancelled");
      }
      return a;
    }
    if (!write_in_flight_ && !pending_.empty() && pending_.front()->ready) {
      writing_ = std::move(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
      a.write = &writing_->response;
      // More responses ready behind it: let gRPC coalesce them into one
      // flush (the next write follows as soon as this one is queued).
      a.buffer_hint = !pending_.empty() && pending_.front()->ready;
    }
    if (!reading_ && !read_closed_ && !draining_ &&
        pending_.size() < kMaxPendingPerStream) {
      reading_ = true;
      a.read = true;
    }
    if ((read_closed_ || draining_) && pending_.empty() && !write_in_flight_) {
      // A read still pending when draining completes with ok=false after
      // Finish; a message it got is not applied.
      finished_ = true;
      a.finish = true;
      a.finish_status = read_closed_ ? grpc::Status::OK : ShuttingDown();
    }
    return a;
  }

  void Run(const Actions& a) {
    if (a.write != nullptr) {
      grpc::WriteOptions options;
      if (a.buffer_hint) options.set_buffer_hint();
      StartWrite(a.write, options);
    }
    if (a.read) StartRead(&request_);
    if (a.finish) Finish(a.finish_status);
  }

  void Unref() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  CacheServiceImpl* const service_;
  // Written by gRPC's read; used by Dispatch until the next StartRead.
  pb::LeaseStreamRequest request_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Pending> writing_ ABSL_GUARDED_BY(mu_);
  // 1 for gRPC (until OnDone) + 1 per operation whose done has not run.
  int refs_ ABSL_GUARDED_BY(mu_) = 1;
  // A read is in flight, or its message is being dispatched.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void CacheServiceImpl::DrainLeaseStreams() {
  std::vector<LeaseStreamReactor*> live;
  {
    absl::MutexLock lock(&streams_mu_);
    draining_streams_ = true;
    for (LeaseStreamReactor* stream : streams_) {
      if (stream->TryRef()) live.push_back(stream);
    }
  }
  // Without streams_mu_: a last Unref deletes the reactor, whose destructor
  // takes it.
  for (LeaseStreamReactor* stream : live) stream->DrainAndUnref();
}

grpc::ServerBidiReactor<pb::LeaseStreamRequest, pb::LeaseStreamResponse>*
CacheServiceImpl::LeaseStream(grpc::CallbackServerContext* /*context*/) {
  return new LeaseStreamReactor(this);
}

}  // namespace radixkv::cache_service
