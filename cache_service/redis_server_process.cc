#include "cache_service/redis_server_process.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace radixkv::cache_service {

int PickFreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<std::unique_ptr<RedisServerProcess>> RedisServerProcess::Start(
    const std::string& dir, int port, const std::string& redis_server_binary) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  std::unique_ptr<RedisServerProcess> out(new RedisServerProcess());
  for (int attempt = 0; attempt < 5; ++attempt) {
    out->port_ = port > 0 ? port : PickFreeLoopbackPort();
    std::vector<std::string> args = {redis_server_binary,
                                     "--port",
                                     absl::StrCat(out->port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "yes",
                                     "--daemonize",
                                     "no",
                                     "--logfile",
                                     dir + "/redis.log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // posix_spawn, not fork: no pthread_atfork handlers (gRPC's) run in the
    // child of a multi-threaded test.
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) !=
        0) {
      return absl::UnavailableError("posix_spawn redis-server failed");
    }
    out->pid_ = pid;
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        out->pid_ = -1;
        break;  // exited (port taken?): retry with another port
      }
      timeval tv{0, 200000};
      redisContext* c = redisConnectWithTimeout("127.0.0.1", out->port_, tv);
      if (c != nullptr && c->err == 0) {
        void* reply = redisCommand(c, "PING");
        bool ok = reply != nullptr &&
                  static_cast<redisReply*>(reply)->type == REDIS_REPLY_STATUS;
        if (reply != nullptr) freeReplyObject(reply);
        redisFree(c);
        if (ok) return out;
      } else if (c != nullptr) {
        redisFree(c);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (out->pid_ > 0) {
      kill(out->pid_, SIGKILL);
      waitpid(out->pid_, nullptr, 0);
      out->pid_ = -1;
    }
  }
  return absl::UnavailableError(
      absl::StrCat("cannot start ", redis_server_binary, " in ", dir));
}

RedisServerProcess::~RedisServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string RedisServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

}  // namespace radixkv::cache_service
