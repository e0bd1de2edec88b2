#include "router/worker_failure_marks.h"

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(WorkerFailureMarksTest, AvoidedForTheCooldownOnly) {
  WorkerFailureMarks marks(absl::Seconds(2));
  EXPECT_FALSE(marks.IsAvoided("w", 1, kT0));
  marks.MarkFailed("w", 1, kT0);
  EXPECT_TRUE(marks.IsAvoided("w", 1, kT0));
  EXPECT_TRUE(marks.IsAvoided("w", 1, kT0 + absl::Milliseconds(1999)));
  EXPECT_FALSE(marks.IsAvoided("w", 1, kT0 + absl::Seconds(2)));
  EXPECT_FALSE(marks.IsAvoided("other", 1, kT0));
}

TEST(WorkerFailureMarksTest, ANewEpochIsANewProcessAndStartsUnmarked) {
  WorkerFailureMarks marks(absl::Seconds(2));
  marks.MarkFailed("w", 1, kT0);
  // Restarted within the cooldown: registered again with epoch 2.
  EXPECT_FALSE(marks.IsAvoided("w", 2, kT0 + absl::Milliseconds(100)));
  // The old epoch stays avoided (a stale Match may still name it).
  EXPECT_TRUE(marks.IsAvoided("w", 1, kT0 + absl::Milliseconds(100)));
  // The new process fails too: its own mark replaces the old one.
  marks.MarkFailed("w", 2, kT0 + absl::Seconds(1));
  EXPECT_TRUE(marks.IsAvoided("w", 2, kT0 + absl::Seconds(2)));
  EXPECT_FALSE(marks.IsAvoided("w", 1, kT0 + absl::Seconds(2)));
}

TEST(WorkerFailureMarksTest, ARepeatedFailureExtendsTheCooldown) {
  WorkerFailureMarks marks(absl::Seconds(2));
  marks.MarkFailed("w", 3, kT0);
  marks.MarkFailed("w", 3, kT0 + absl::Seconds(1));
  EXPECT_TRUE(marks.IsAvoided("w", 3, kT0 + absl::Milliseconds(2500)));
  EXPECT_FALSE(marks.IsAvoided("w", 3, kT0 + absl::Seconds(3)));
}

}  // namespace
}  // namespace radixkv::router
