#include "worker/request_stream.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

GenerateEvent Token(int32_t id, bool finished = false) {
  GenerateEvent event;
  event.token_ids.push_back(id);
  event.finished = finished;
  return event;
}

// Pops every event on each notification, like the Worker service's reactor.
class Collector : public RequestStream::Listener {
 public:
  explicit Collector(RequestStream* stream) : stream_(stream) {}
  void OnEventPushed() override {
    ++notifications;
    GenerateEvent event;
    while (stream_->TryPop(&event)) tokens.push_back(event.token_ids.at(0));
  }
  RequestStream* stream_;
  int notifications = 0;
  std::vector<int32_t> tokens;
};

TEST(RequestStreamTest, PopsInPushOrder) {
  RequestStream stream("r");
  EXPECT_EQ(stream.request_id(), "r");
  GenerateEvent event;
  EXPECT_FALSE(stream.TryPop(&event));
  EXPECT_FALSE(stream.Pop(&event, absl::ZeroDuration()));
  stream.Push(Token(5));
  stream.Push(Token(6, /*finished=*/true));
  ASSERT_TRUE(stream.TryPop(&event));
  EXPECT_EQ(event.token_ids, std::vector<int32_t>{5});
  ASSERT_TRUE(stream.Pop(&event, absl::ZeroDuration()));
  EXPECT_EQ(event.token_ids, std::vector<int32_t>{6});
  EXPECT_TRUE(event.finished);
  EXPECT_FALSE(stream.TryPop(&event));
}

TEST(RequestStreamTest, ListenerIsNotifiedOfQueuedAndNewEvents) {
  RequestStream stream("r");
  stream.Push(Token(1));
  stream.Push(Token(2));
  Collector collector(&stream);
  // Installed with events queued: notified once at once.
  stream.SetListener(&collector);
  EXPECT_EQ(collector.notifications, 1);
  EXPECT_EQ(collector.tokens, (std::vector<int32_t>{1, 2}));
  stream.Push(Token(3));
  EXPECT_EQ(collector.notifications, 2);
  EXPECT_EQ(collector.tokens, (std::vector<int32_t>{1, 2, 3}));
  stream.SetListener(nullptr);
  stream.Push(Token(4));
  EXPECT_EQ(collector.notifications, 2);
  GenerateEvent event;
  ASSERT_TRUE(stream.TryPop(&event));
  EXPECT_EQ(event.token_ids, std::vector<int32_t>{4});
}

TEST(RequestStreamTest, NoNotificationAfterTheListenerIsRemoved) {
  // A pusher thread races the removal: once SetListener(nullptr) returned,
  // the listener is never called again (its owner may free it).
  for (int round = 0; round < 50; ++round) {
    RequestStream stream("r");
    auto collector = std::make_unique<Collector>(&stream);
    stream.SetListener(collector.get());
    std::thread pusher([&] {
      for (int i = 0; i < 200; ++i) stream.Push(Token(i));
    });
    stream.SetListener(nullptr);
    collector.reset();  // Freed while the pusher may still push.
    pusher.join();
  }
}

}  // namespace
}  // namespace radixkv::worker
