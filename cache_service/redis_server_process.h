// A real redis-server child process for tests: started on 127.0.0.1 with its
// own free port and data directory (`--save '' --appendonly yes`), killed by
// the destructor. Tests never depend on a Redis started outside the test.
#ifndef RADIXKV_CACHE_SERVICE_REDIS_SERVER_PROCESS_H_
#define RADIXKV_CACHE_SERVICE_REDIS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace radixkv::cache_service {

// Returns a TCP port on 127.0.0.1 that was free a moment ago.
int PickFreeLoopbackPort();

class RedisServerProcess {
 public:
  // Starts `redis_server_binary` with its data in `dir` (created if missing;
  // an existing appendonly file there is loaded) on `port` (0 = a free one)
  // and waits up to 10 s until it answers PING. UNAVAILABLE otherwise.
  static absl::StatusOr<std::unique_ptr<RedisServerProcess>> Start(
      const std::string& dir, int port = 0,
      const std::string& redis_server_binary = "/usr/bin/redis-server");

  // SIGKILLs the server and reaps it.
  ~RedisServerProcess();

  int port() const { return port_; }
  // The server's process id (tests SIGSTOP/SIGCONT it to stall Redis).
  pid_t pid() const { return pid_; }
  // "127.0.0.1:<port>", the form of the cache service's --redis flag.
  std::string address() const;

 private:
  RedisServerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_REDIS_SERVER_PROCESS_H_
