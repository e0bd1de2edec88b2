// What one worker attempt of a Generate request means for the request: the
// router's retry rules as a pure function (in the spirit of Envoy's
// RetryState, kept apart from the code that streams), so that each rule is
// tested on its own.
#ifndef RADIXKV_ROUTER_ATTEMPT_OUTCOME_H_
#define RADIXKV_ROUTER_ATTEMPT_OUTCOME_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace radixkv::router {

// How an attempt ended, as the router saw it.
struct AttemptResult {
  // The worker stream's final status.
  absl::Status status;
  // At least one chunk of this attempt reached the client.
  bool forwarded = false;
  // This request already failed on the same worker (an earlier attempt).
  bool worker_tried_before = false;
  // Router.Abort was called for the request.
  bool aborted = false;
  // The client went away (cancelled, disconnected, a write failed).
  bool client_gone = false;
  // The client's deadline has passed.
  bool deadline_passed = false;
  // The router's drain timeout cut the request.
  bool shutting_down = false;
};

// What the request does next.
enum class AttemptVerdict {
  kSucceeded,          // the worker finished the request: OK to the client
  kAborted,            // CANCELLED "was aborted"
  kClientCancelled,    // CANCELLED, the client is gone
  kDeadlineExceeded,   // DEADLINE_EXCEEDED: not the worker's failure
  kShutdown,           // UNAVAILABLE "the router is shutting down"
  kFailedAfterTokens,  // UNAVAILABLE naming the worker: output was sent
  kRequestError,       // the worker's status as is: retrying cannot help
  kRetry,              // try another worker (if attempts remain)
};

struct AttemptDecision {
  AttemptVerdict verdict = AttemptVerdict::kRetry;
  // The worker process is avoided by other requests for the cooldown
  // (WorkerFailureMarks).
  bool mark_worker_failed = false;
  // This request must not be placed on the worker again, even when no other
  // worker is live: it refused the request for a reason another attempt
  // there would meet again (no memory for the prompt, a full queue, not
  // registered with the cache service).
  bool exclude_worker = false;
  // The worker refused for capacity (RESOURCE_EXHAUSTED): when every
  // attempt failed this way, the request ends RESOURCE_EXHAUSTED.
  bool resource_exhausted = false;
};

// Decides from `result`, in this order: aborted, deadline passed (no retry
// and no blame once the client's deadline is gone: the worker stream's own
// DEADLINE_EXCEEDED may arrive before the router sees its call cancelled),
// client gone, OK, shutting down, failure after forwarded output (marks the
// worker unless RESOURCE_EXHAUSTED), a request error (INVALID_ARGUMENT,
// ALREADY_EXISTS unless it is this request's own earlier attempt still
// registered on a worker it tried before, OUT_OF_RANGE, PERMISSION_DENIED,
// UNAUTHENTICATED, CANCELLED), else a retry: RESOURCE_EXHAUSTED excludes
// the worker for this request without marking it; "not registered with the
// cache service" excludes and marks it; any other failure marks it.
AttemptDecision DecideAttempt(const AttemptResult& result);

// The snake_case name of a status code for metric labels and logs
// ("resource_exhausted").
std::string StatusCodeLabel(absl::StatusCode code);

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_ATTEMPT_OUTCOME_H_
