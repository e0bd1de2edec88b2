// GenerateBurst: many concurrent Generate streams from one client thread
// (gRPC's client callback API, no thread per call), to a worker or a
// router, with each call's outcome (status, tokens, latency). For the
// overload fault test and hand measurements (tests/generate_burst_main.cc).
#ifndef RADIXKV_TESTS_GENERATE_BURST_H_
#define RADIXKV_TESTS_GENERATE_BURST_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"

namespace radixkv::tests {

// Starts one streaming call on `reactor` (the stub's async()->Generate).
using StartGenerate =
    std::function<void(grpc::ClientContext*, const v1::GenerateRequest*,
                       grpc::ClientReadReactor<v1::GenerateResponse>*)>;
StartGenerate ToWorker(v1::Worker::Stub* stub);
StartGenerate ToRouter(v1::Router::Stub* stub);

class GenerateBurst {
 public:
  struct Outcome {
    grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
    std::string message;
    int tokens = 0;
    // From the start of the call to its end.
    absl::Duration latency;
    // From the start of the call to its first token (InfiniteDuration when
    // none came).
    absl::Duration first_token = absl::InfiniteDuration();
  };

  // Starts every request at once, each with `deadline` from its start;
  // `start` is called once per request, round-robin over `starts`.
  GenerateBurst(std::vector<StartGenerate> starts,
                std::vector<v1::GenerateRequest> requests,
                absl::Duration deadline);
  // Cancels the calls still running and waits for their end.
  ~GenerateBurst();
  GenerateBurst(const GenerateBurst&) = delete;
  GenerateBurst& operator=(const GenerateBurst&) = delete;

  int size() const { return static_cast<int>(calls_.size()); }
  // Calls ended so far, by status code.
  std::map<grpc::StatusCode, int> EndedByCode() const;
  int ended() const;
  // Waits until `pred(EndedByCode())` holds or `timeout` passes; returns
  // whether it holds.
  bool WaitUntil(
      const std::function<bool(const std::map<grpc::StatusCode, int>&)>& pred,
      absl::Duration timeout) const;
  // Waits up to `timeout` for every call to end.
  bool WaitAll(absl::Duration timeout) const;
  // Outcome of every call, in request order (calls still running: UNKNOWN).
  std::vector<Outcome> outcomes() const;

 private:
  class Call;
  void Ended(grpc::StatusCode code);

  mutable absl::Mutex mu_;
  std::map<grpc::StatusCode, int> ended_ ABSL_GUARDED_BY(mu_);
  int num_ended_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<Call>> calls_;
};

}  // namespace radixkv::tests

#endif  // RADIXKV_TESTS_GENERATE_BURST_H_
