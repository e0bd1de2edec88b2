#include "cache_service/forked_snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace radixkv::cache_service {
namespace {

// Stream from the child: 8 bytes little-endian length, then the blob.
constexpr size_t kHeaderBytes = 8;

// Child side: writes all of `data`; false on any error (EPIPE: the parent
// is gone).
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void RunChild(int fd, const ForkedSnapshotter::SerializeFn& fn,
                           int nice_increment, absl::Duration delay,
                           SnapshotFault fault) {
  // Default dispositions, unblocked: die on SIGTERM/SIGINT of the process
  // group and on SIGPIPE once the parent is gone.
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, SIGTERM);
  sigaddset(&unblock, SIGINT);
  sigaddset(&unblock, SIGPIPE);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  if (nice_increment != 0) setpriority(PRIO_PROCESS, 0, nice_increment);
  if (delay > absl::ZeroDuration()) {
    const timespec ts = absl::ToTimespec(delay);
    nanosleep(&ts, nullptr);
  }
  std::string blob = fn();
  if (fault == SnapshotFault::kChildCrashes) kill(getpid(), SIGKILL);
  char header[kHeaderBytes];
  uint64_t size = blob.size();
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    header[i] = static_cast<char>(size >> (8 * i));
  }
  const bool ok = WriteAll(fd, header, kHeaderBytes) &&
                  WriteAll(fd, blob.data(), blob.size());
  _exit(ok ? 0 : 1);
}

// CPU time of the calling thread, ms.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 +
         static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

ForkedSnapshotter::ForkedSnapshotter(RedisJournal* journal,
                                     ForkedSnapshotOptions options)
    : journal_(journal), options_(std::move(options)) {
  faults_left_ = options_.fault_for_testing == SnapshotFault::kNone
                     ? 0
                     : options_.fault_count_for_testing;
  collector_ = std::thread([this] { CollectorLoop(); });
}

ForkedSnapshotter::~ForkedSnapshotter() {
  {
    absl::MutexLock lock(&mu_);
    // A snapshot about to finish is worth its wait: its commit shortens the
    // next start-up's replay.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; };
    mu_.AwaitWithTimeout(absl::Condition(&idle), options_.shutdown_grace);
    stopping_ = true;
    // The collector polls stopping_ while it waits for the child and kills
    // it; a snapshot already in WriteSnapshot finishes (bounded by the
    // journal's I/O timeout).
  }
  if (collector_.joinable()) collector_.join();
}

bool ForkedSnapshotter::busy() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

ForkedSnapshotStats ForkedSnapshotter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status ForkedSnapshotter::WaitIdle() const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; };
  mu_.Await(absl::Condition(&idle));
  return stats_.last_status;
}

absl::Status ForkedSnapshotter::Start(SerializeFn serialize) {
  SnapshotFault fault = SnapshotFault::kNone;
  {
    absl::MutexLock lock(&mu_);
    if (busy_ || stopping_) {
      return absl::FailedPreconditionError(
          "a background snapshot is already running");
    }
    if (faults_left_ > 0) {
      --faults_left_;
      fault = options_.fault_for_testing;
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe2 for a snapshot: ", std::strerror(errno)));
  }
  const SnapshotPoint point = journal_->snapshot_point();
  const double cpu_before = ThreadCpuMs();
  const absl::Time before = absl::Now();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    RunChild(fds[1], serialize, options_.child_nice,
             options_.child_delay_for_testing, fault);
  }
  const absl::Time after = absl::Now();
  const double fork_cpu_ms = ThreadCpuMs() - cpu_before;
  close(fds[1]);
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    return absl::InternalError(
        absl::StrCat("fork for a snapshot: ", std::strerror(error)));
  }
  const double fork_ms = absl::ToDoubleMilliseconds(after - before);
  absl::MutexLock lock(&mu_);
  busy_ = true;
  has_job_ = true;
  job_ = Job{pid,
             fds[0],
             point,
             before,
             fault == SnapshotFault::kStagingKeyExpires,
             fork_ms,
             fork_cpu_ms};
  ++stats_.started;
  stats_.last_fork_ms = fork_ms;
  stats_.max_fork_ms = std::max(stats_.max_fork_ms, fork_ms);
  stats_.total_fork_ms += fork_ms;
  stats_.max_fork_cpu_ms = std::max(stats_.max_fork_cpu_ms, fork_cpu_ms);
  stats_.total_fork_cpu_ms += fork_cpu_ms;
  return absl::OkStatus();
}

void ForkedSnapshotter::CollectorLoop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return has_job_ || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (!has_job_) return;  // stopping, nothing in flight
      job = job_;
      has_job_ = false;
    }
    int64_t bytes = 0;
    absl::Status status = Collect(job, &bytes);
    const double duration_ms =
        absl::ToDoubleMilliseconds(absl::Now() - job.started);
    if (status.ok()) {
      spdlog::info(
          "background snapshot: {} bytes covering journal sequence {} "
          "committed in {:.1f} ms; fork() held the service mutex {:.3f} ms "
          "({:.3f} ms CPU)",
          bytes, job.point.covered_sequence, duration_ms, job.fork_ms,
          job.fork_cpu_ms);
    } else {
      spdlog::warn(
          "background snapshot dropped (the journal keeps every record): {}",
          status.ToString());
    }
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      ++stats_.succeeded;
      stats_.last_bytes = bytes;
      stats_.last_covered_sequence = job.point.covered_sequence;
    } else {
      ++stats_.failed;
    }
    stats_.last_duration_ms = duration_ms;
    stats_.last_status = status;
    busy_ = false;
  }
}

absl::Status ForkedSnapshotter::Collect(const Job& job, int64_t* bytes) {
  const absl::Time deadline = job.started + options_.timeout;
  std::string data;
  uint64_t expected = 0;
  bool have_header = false;
  absl::Status read_status;
  char buffer[1 << 16];
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        read_status = absl::AbortedError("shutting down");
        break;
      }
    }
    if (absl::Now() > deadline) {
      read_status = absl::DeadlineExceededError(
          absl::StrCat("snapshot child did not finish within ",
                       absl::FormatDuration(options_.timeout)));
      break;
    }
    pollfd pfd{job.fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, 50);
    if (ready < 0 && errno != EINTR) {
      read_status = absl::InternalError(
          absl::StrCat("poll on the snapshot pipe: ", std::strerror(errno)));
      break;
    }
    if (ready <= 0) continue;
    const ssize_t n = read(job.fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      read_status = absl::InternalError(
          absl::StrCat("read of the snapshot pipe: ", std::strerror(errno)));
      break;
    }
    if (n == 0) break;  // EOF: the child exited (or crashed)
    data.append(buffer, static_cast<size_t>(n));
    if (!have_header && data.size() >= kHeaderBytes) {
      for (size_t i = 0; i < kHeaderBytes; ++i) {
        expected |= static_cast<uint64_t>(static_cast<unsigned char>(data[i]))
                    << (8 * i);
      }
      have_header = true;
      data.reserve(kHeaderBytes + expected);
    }
  }
  close(job.fd);
  if (!read_status.ok()) kill(job.pid, SIGKILL);
  int wait_status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(job.pid, &wait_status, 0);
  } while (reaped < 0 && errno == EINTR);
  if (!read_status.ok()) return read_status;
  if (reaped == job.pid && WIFSIGNALED(wait_status)) {
    return absl::InternalError(absl::StrCat("snapshot child killed by signal ",
                                            WTERMSIG(wait_status)));
  }
  if (reaped == job.pid &&
      (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0)) {
    return absl::InternalError(
        absl::StrCat("snapshot child exited with ", WEXITSTATUS(wait_status)));
  }
  if (!have_header || data.size() != kHeaderBytes + expected) {
    return absl::DataLossError(
        absl::StrCat("snapshot stream truncated: ", data.size(), " bytes"));
  }
  *bytes = static_cast<int64_t>(expected);
  return journal_->WriteSnapshot(
      std::string_view(data).substr(kHeaderBytes), job.point,
      job.expire_staging ? absl::Milliseconds(1) : absl::ZeroDuration());
}

}  // namespace radixkv::cache_service
