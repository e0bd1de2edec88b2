#include "model/tokenizer/pipeline.h"

namespace radixkv::model {
namespace {

// Buffers above this capacity are released when returned to the pool.
constexpr size_t kKeepCapacity = size_t{1} << 20;

struct ScratchPool {
  std::vector<std::unique_ptr<std::string>> buffers;
  size_t used = 0;
};

ScratchPool& ThreadPool() {
  thread_local ScratchPool pool;
  return pool;
}

}  // namespace

ScratchString::ScratchString() {
  ScratchPool& pool = ThreadPool();
  if (pool.used == pool.buffers.size()) {
    pool.buffers.push_back(std::make_unique<std::string>());
  }
  buffer_ = pool.buffers[pool.used++].get();
  buffer_->clear();
}

ScratchString::~ScratchString() {
  if (buffer_->capacity() > kKeepCapacity) std::string().swap(*buffer_);
  --ThreadPool().used;
}

}  // namespace radixkv::model
