#include "router/attempt_outcome.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace radixkv::router {
namespace {

// Errors of the request itself: retrying elsewhere cannot help.
bool IsRequestError(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// The worker's scheduler answers this while it has no registration: another
// attempt there fails the same way until it registers again.
constexpr absl::string_view kNotRegistered =
    "not registered with the cache service";

}  // namespace

AttemptDecision DecideAttempt(const AttemptResult& r) {
  AttemptDecision d;
  const absl::StatusCode code = r.status.code();
  if (r.aborted) {
    d.verdict = AttemptVerdict::kAborted;
  } else if (!r.status.ok() && r.deadline_passed) {
    d.verdict = AttemptVerdict::kDeadlineExceeded;
  } else if (r.client_gone) {
    d.verdict = AttemptVerdict::kClientCancelled;
  } else if (r.status.ok()) {
    d.verdict = AttemptVerdict::kSucceeded;
  } else if (r.shutting_down) {
    d.verdict = AttemptVerdict::kShutdown;
  } else if (r.forwarded) {
    d.verdict = AttemptVerdict::kFailedAfterTokens;
    d.mark_worker_failed = code != absl::StatusCode::kResourceExhausted;
  } else if (IsRequestError(code) &&
             !(code == absl::StatusCode::kAlreadyExists &&
               r.worker_tried_before)) {
    d.verdict = AttemptVerdict::kRequestError;
  } else if (code == absl::StatusCode::kResourceExhausted) {
    d.exclude_worker = true;
    d.resource_exhausted = true;
  } else {
    d.mark_worker_failed = true;
    d.exclude_worker = absl::StrContains(r.status.message(), kNotRegistered);
  }
  return d;
}

std::string StatusCodeLabel(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

}  // namespace radixkv::router
