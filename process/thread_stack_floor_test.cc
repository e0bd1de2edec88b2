#include <pthread.h>

#include <cstddef>

#include "gtest/gtest.h"

namespace {

TEST(ThreadStackFloorTest, RaisesSmallRequestsAndKeepsLargeOnes) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  size_t size = 0;
  // CivetWeb's request (Debian's USE_STACK_SIZE).
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 102400), 0);
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  EXPECT_EQ(size, size_t{1} << 20);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t{8} << 20), 0);
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  EXPECT_EQ(size, size_t{8} << 20);
  ASSERT_EQ(pthread_attr_destroy(&attr), 0);
}

TEST(ThreadStackFloorTest, ASmallRequestStillStartsAThread) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 102400), 0);
  pthread_t thread;
  ASSERT_EQ(
      pthread_create(
          &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr),
      0);
  EXPECT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

}  // namespace
