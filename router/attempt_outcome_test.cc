#include "router/attempt_outcome.h"

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

AttemptResult Failed(absl::Status status) {
  AttemptResult r;
  r.status = std::move(status);
  return r;
}

TEST(AttemptOutcomeTest, StopReasonsComeFirstInOrder) {
  AttemptResult r = Failed(absl::UnavailableError("x"));
  r.aborted = r.client_gone = r.deadline_passed = r.shutting_down = true;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kAborted);
  r.aborted = false;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kDeadlineExceeded);
  r.deadline_passed = false;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kClientCancelled);
  r.client_gone = false;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kShutdown);
  // A stop reason never blames the worker.
  r.shutting_down = false;
  r.deadline_passed = true;
  EXPECT_FALSE(DecideAttempt(r).mark_worker_failed);
}

TEST(AttemptOutcomeTest, OkSucceedsEvenWhenTheDeadlinePassedAfterwards) {
  AttemptResult r;
  r.deadline_passed = true;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kSucceeded);
  r.shutting_down = true;
  EXPECT_EQ(DecideAttempt(r).verdict, AttemptVerdict::kSucceeded);
}

TEST(AttemptOutcomeTest, FailureAfterOutputIsFinalAndBlamesTheWorker) {
  AttemptResult r = Failed(absl::InternalError("crash"));
  r.forwarded = true;
  AttemptDecision d = DecideAttempt(r);
  EXPECT_EQ(d.verdict, AttemptVerdict::kFailedAfterTokens);
  EXPECT_TRUE(d.mark_worker_failed);
  r.status = absl::ResourceExhaustedError("preempted, no memory");
  d = DecideAttempt(r);
  EXPECT_EQ(d.verdict, AttemptVerdict::kFailedAfterTokens);
  EXPECT_FALSE(d.mark_worker_failed);
}

TEST(AttemptOutcomeTest, RequestErrorsAreReturnedAsIs) {
  for (absl::Status s :
       {absl::InvalidArgumentError("top_p"), absl::AlreadyExistsError("id"),
        absl::OutOfRangeError("x"), absl::PermissionDeniedError("x"),
        absl::UnauthenticatedError("x"), absl::CancelledError("x")}) {
    const AttemptDecision d = DecideAttempt(Failed(s));
    EXPECT_EQ(d.verdict, AttemptVerdict::kRequestError) << s;
    EXPECT_FALSE(d.mark_worker_failed) << s;
  }
}

TEST(AttemptOutcomeTest, OwnEarlierAttemptStillRegisteredIsRetried) {
  AttemptResult r = Failed(absl::AlreadyExistsError("in flight"));
  r.worker_tried_before = true;
  const AttemptDecision d = DecideAttempt(r);
  EXPECT_EQ(d.verdict, AttemptVerdict::kRetry);
  EXPECT_TRUE(d.mark_worker_failed);
  EXPECT_FALSE(d.exclude_worker);
}

TEST(AttemptOutcomeTest, RetriesExcludeOrMarkByReason) {
  AttemptDecision d =
      DecideAttempt(Failed(absl::ResourceExhaustedError("queue full")));
  EXPECT_EQ(d.verdict, AttemptVerdict::kRetry);
  EXPECT_TRUE(d.exclude_worker);
  EXPECT_TRUE(d.resource_exhausted);
  EXPECT_FALSE(d.mark_worker_failed);

  d = DecideAttempt(Failed(absl::UnavailableError(
      "worker w: not registered with the cache service")));
  EXPECT_EQ(d.verdict, AttemptVerdict::kRetry);
  EXPECT_TRUE(d.exclude_worker);
  EXPECT_TRUE(d.mark_worker_failed);
  EXPECT_FALSE(d.resource_exhausted);

  for (absl::Status s :
       {absl::UnavailableError("keepalive watchdog timeout"),
        absl::InternalError("x"), absl::DeadlineExceededError("x"),
        absl::NotFoundError("unknown lease")}) {
    d = DecideAttempt(Failed(s));
    EXPECT_EQ(d.verdict, AttemptVerdict::kRetry) << s;
    EXPECT_TRUE(d.mark_worker_failed) << s;
    EXPECT_FALSE(d.exclude_worker) << s;
  }
}

TEST(AttemptOutcomeTest, StatusCodeLabels) {
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kResourceExhausted),
            "resource_exhausted");
  EXPECT_EQ(StatusCodeLabel(absl::StatusCode::kInvalidArgument),
            "invalid_argument");
}

}  // namespace
}  // namespace radixkv::router
