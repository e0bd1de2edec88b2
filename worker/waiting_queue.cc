#include "worker/waiting_queue.h"

#include <utility>

namespace radixkv::worker {

void WaitingQueue::PushBack(std::unique_ptr<Sequence> seq) {
  const Key key{seq->priority, ++next_back_};
  Insert(key, std::move(seq));
}

void WaitingQueue::PushFront(std::unique_ptr<Sequence> seq) {
  const Key key{seq->priority, --next_front_};
  Insert(key, std::move(seq));
}

void WaitingQueue::Insert(Key key, std::unique_ptr<Sequence> seq) {
  const int64_t outstanding = seq->outstanding_tokens_from_scratch();
  by_id_[seq->request_id] = key;
  queue_.emplace(key, Entry{std::move(seq), outstanding});
  outstanding_tokens_ += outstanding;
}

Sequence* WaitingQueue::front() const {
  return queue_.empty() ? nullptr : queue_.begin()->second.seq.get();
}

std::unique_ptr<Sequence> WaitingQueue::PopFront() {
  if (queue_.empty()) return nullptr;
  return Erase(queue_.begin());
}

std::unique_ptr<Sequence> WaitingQueue::Remove(const std::string& request_id) {
  auto id = by_id_.find(request_id);
  if (id == by_id_.end()) return nullptr;
  return Erase(queue_.find(id->second));
}

std::vector<std::unique_ptr<Sequence>> WaitingQueue::RemoveIf(
    const std::function<bool(const Sequence&)>& pred) {
  std::vector<std::unique_ptr<Sequence>> removed;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (pred(*it->second.seq)) {
      auto next = std::next(it);
      removed.push_back(Erase(it));
      it = next;
    } else {
      ++it;
    }
  }
  return removed;
}

std::unique_ptr<Sequence> WaitingQueue::Erase(
    std::map<Key, Entry>::iterator it) {
  std::unique_ptr<Sequence> seq = std::move(it->second.seq);
  outstanding_tokens_ -= it->second.outstanding_tokens;
  by_id_.erase(seq->request_id);
  queue_.erase(it);
  return seq;
}

}  // namespace radixkv::worker
