// ApiKeys: the bearer keys a router accepts, read from a file of one key
// per line (blank lines and lines starting with '#' are skipped; a
// Kubernetes Secret mounted as a file fits). Keys are compared in constant
// time and never appear in a message, a log line or a metric.
#ifndef RADIXKV_ROUTER_API_KEYS_H_
#define RADIXKV_ROUTER_API_KEYS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace radixkv::router {

// Longest key and most keys a file may hold.
inline constexpr size_t kMaxApiKeyBytes = 512;
inline constexpr size_t kMaxApiKeys = 10000;

// Thread-safe.
class ApiKeys {
 public:
  // Reads `path`. NOT_FOUND when it cannot be read; INVALID_ARGUMENT (line
  // number, never the key) for a key with whitespace or control bytes
  // inside, longer than kMaxApiKeyBytes, more than kMaxApiKeys keys, or no
  // key at all.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  // Reads the file again (SIGHUP); on error the keys stay as they were and
  // the error is returned.
  absl::Status Reload();

  // OK when `authorization` (an HTTP Authorization header or gRPC
  // "authorization" metadata value) is "Bearer <key>" with a known key;
  // UNAUTHENTICATED otherwise, with a message that says what is missing.
  absl::Status Check(absl::string_view authorization) const;

  size_t size() const;

 private:
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<std::vector<std::string>> Read(const std::string& path);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_API_KEYS_H_
