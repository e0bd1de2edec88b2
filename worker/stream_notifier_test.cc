// StreamNotifier runs each posted stream's listener on its own thread,
// every posted stream before it stops, and never reorders a stream's events.
#include "worker/stream_notifier.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// Takes every queued event when notified, recording ids and threads.
class Recorder : public RequestStream::Listener {
 public:
  explicit Recorder(RequestStream* stream) : stream_(stream) {}
  void OnEventPushed() override {
    absl::MutexLock lock(&mu_);
    GenerateEvent e;
    while (stream_->TryPop(&e)) ids_.push_back(e.token_ids.at(0));
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<int32_t> ids() {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  std::vector<std::thread::id> threads() {
    absl::MutexLock lock(&mu_);
    return threads_;
  }

 private:
  RequestStream* stream_;
  absl::Mutex mu_;
  std::vector<int32_t> ids_;
  std::vector<std::thread::id> threads_;
};

GenerateEvent Token(int32_t id) {
  GenerateEvent e;
  e.token_ids = {id};
  return e;
}

TEST(StreamNotifierTest, ListenersRunOnItsThreadInAppendOrder) {
  auto stream = std::make_shared<RequestStream>("r");
  Recorder recorder(stream.get());
  stream->SetListener(&recorder);
  {
    StreamNotifier notifier;
    for (int32_t i = 0; i < 100; ++i) {
      stream->Append(Token(i));
      // Posted once per two appends: notifications merge, events do not.
      if (i % 2 == 1) notifier.Post({stream, stream});
    }
  }  // the destructor notifies what is still posted
  std::vector<int32_t> want(100);
  for (int32_t i = 0; i < 100; ++i) want[i] = i;
  EXPECT_EQ(recorder.ids(), want);
  for (std::thread::id t : recorder.threads()) {
    EXPECT_NE(t, std::this_thread::get_id());
  }
  stream->SetListener(nullptr);
}

TEST(StreamNotifierTest, AStreamWithoutListenerKeepsItsEvents) {
  auto stream = std::make_shared<RequestStream>("r");
  {
    StreamNotifier notifier;
    stream->Append(Token(7));
    notifier.Post({stream});
  }
  GenerateEvent e;
  ASSERT_TRUE(stream->Pop(&e, absl::ZeroDuration()));
  EXPECT_EQ(e.token_ids.at(0), 7);
}

}  // namespace
}  // namespace radixkv::worker
