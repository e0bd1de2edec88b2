// WaitingQueue: the requests a worker accepted that wait for admission to
// the running batch, in admission order: higher GenerateRequest.priority
// first, FIFO within a priority, and a preempted sequence ahead of every
// waiting request of its priority (it has streamed tokens already).
//
// Every operation but RemoveIf costs O(log n) or less (n = waiting
// requests), so a scheduler step that admits or aborts k requests costs
// O(k log n), never O(n): thousands of waiting requests do not slow the
// steps of the running batch down. Not thread-safe (the scheduler thread
// owns it).
#ifndef RADIXKV_WORKER_WAITING_QUEUE_H_
#define RADIXKV_WORKER_WAITING_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "worker/sequence.h"

namespace radixkv::worker {

class WaitingQueue {
 public:
  // Behind every waiting request of its priority or higher (an arrival).
  // The request_id must not be waiting already.
  void PushBack(std::unique_ptr<Sequence> seq);
  // Ahead of every waiting request of its priority or lower (a preempted
  // sequence; the latest one preempted goes first).
  void PushFront(std::unique_ptr<Sequence> seq);

  // The next request to admit; nullptr when empty.
  Sequence* front() const;
  // Removes and returns front() (nullptr when empty).
  std::unique_ptr<Sequence> PopFront();
  // Removes and returns the request `request_id`; nullptr if not waiting.
  std::unique_ptr<Sequence> Remove(const std::string& request_id);
  // Removes every request for which `pred` is true and returns them in
  // admission order. O(n): for the drain and the destructor, not for steps.
  std::vector<std::unique_ptr<Sequence>> RemoveIf(
      const std::function<bool(const Sequence&)>& pred);

  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  // Sum of Sequence::outstanding_tokens_from_scratch() over the waiting
  // requests (a waiting request's value does not change while it waits).
  int64_t outstanding_tokens() const { return outstanding_tokens_; }

 private:
  struct Key {
    int32_t priority;
    // Position within the priority: arrivals count up, preempted
    // sequences count down from 0.
    int64_t order;
    bool operator<(const Key& other) const {
      if (priority != other.priority) return priority > other.priority;
      return order < other.order;
    }
  };
  struct Entry {
    std::unique_ptr<Sequence> seq;
    int64_t outstanding_tokens;
  };

  void Insert(Key key, std::unique_ptr<Sequence> seq);
  std::unique_ptr<Sequence> Erase(std::map<Key, Entry>::iterator it);

  std::map<Key, Entry> queue_;
  absl::flat_hash_map<std::string, Key> by_id_;
  int64_t next_back_ = 0;
  int64_t next_front_ = 0;
  int64_t outstanding_tokens_ = 0;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_WAITING_QUEUE_H_
