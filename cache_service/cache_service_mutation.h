// Internal to the cache_service_impl target: the definition of
// CacheServiceImpl::RunMutation, the path every state-changing operation
// takes (unary handlers and LeaseStream alike).
#ifndef RADIXKV_CACHE_SERVICE_CACHE_SERVICE_MUTATION_H_
#define RADIXKV_CACHE_SERVICE_CACHE_SERVICE_MUTATION_H_

#include <new>
#include <utility>

#include "absl/time/time.h"
#include "cache_service/cache_service_impl.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {

template <typename Request, typename Response>
void CacheServiceImpl::RunMutation(
    CacheRpc rpc, JournalOp op, const Request& request, Response* response,
    absl::Status (*apply)(CacheState&, const Request&, int64_t, Response*),
    absl::Status validation, MutationDone done) {
  const absl::Time start = absl::Now();
  absl::Status status = std::move(validation);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    const absl::Time locked = absl::Now();
    // How long this mutation holds mu_ (Match waits for it), us.
    auto log_hold = [&] {
      if (!spdlog::should_log(spdlog::level::debug)) return;
      spdlog::debug("{} held mu_ from {} us for {} us (waited {} us)",
                    CacheRpcName(rpc), absl::ToUnixMicros(locked),
                    absl::ToInt64Microseconds(absl::Now() - locked),
                    absl::ToInt64Microseconds(locked - start));
    };
    status = Available();
    if (status.ok()) {
      const int64_t now_ms = NowLocked();
      try {
        status = apply(state_, request, now_ms, response);
      } catch (const std::bad_alloc&) {
        status = OutOfMemoryLocked(rpc);
      }
      if (status.ok() && journal_ != nullptr) {
        // Acknowledged by the journal's callback once durable.
        JournalThenDoneLocked(rpc, start, op, now_ms, request, std::move(done));
        log_hold();
        return;
      }
    }
    log_hold();
  }
  if (!status.ok()) response->Clear();
  Observe(rpc, start, status);
  done(status);
}

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_CACHE_SERVICE_MUTATION_H_
