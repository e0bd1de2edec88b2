// ChildProcess CPU priorities: the scheduling class and nice value a child
// runs with, read back from /proc/<pid>/stat.
#include "tools/local_cluster/local_cluster.h"

#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

struct SchedState {
  int nice = 0;
  int policy = -1;
};

// Fields 19 (nice) and 41 (policy) of /proc/<pid>/stat (proc(5)); the
// command name (field 2) is in parentheses and may contain spaces.
SchedState ReadSchedState(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string stat = buffer.str();
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  // fields[0] is field 3 (state).
  SchedState s;
  s.nice = std::stoi(fields.at(19 - 3));
  s.policy = std::stoi(fields.at(41 - 3));
  return s;
}

// Starts `sleep 30` with `priority` and returns its scheduling state.
SchedState StartAndRead(ChildCpuPriority priority) {
  auto child =
      ChildProcess::Start("sleep", {"/usr/bin/sleep", "30"}, "", priority);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {};
  // The child sets its class and nice value before exec; wait for the exec.
  for (int i = 0; i < 200; ++i) {
    std::ifstream comm(absl::StrCat("/proc/", (*child)->pid(), "/comm"));
    std::string name;
    std::getline(comm, name);
    if (name == "sleep") break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  SchedState s = ReadSchedState((*child)->pid());
  (*child)->Kill(9);
  return s;
}

// The cluster's ports are picked together: all distinct, all bindable.
TEST(PickFreePortsTest, PortsOfOnePickAreDistinct) {
  for (int round = 0; round < 20; ++round) {
    std::vector<int> ports = PickFreePorts(16);
    ASSERT_EQ(ports.size(), 16u);
    for (int p : ports) EXPECT_GT(p, 0);
    std::sort(ports.begin(), ports.end());
    EXPECT_EQ(std::adjacent_find(ports.begin(), ports.end()), ports.end())
        << "a port was handed out twice in round " << round;
  }
}

// A second cluster on a --base_port whose ports are taken must not start
// anything: its cache service would open the first cluster's Redis journal
// (fencing the first cache service) while its health checks were answered
// by the first cluster's processes.
TEST(LocalClusterTest, TakenBasePortFailsBeforeStartingAnything) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int held = ntohs(addr.sin_port);
  EXPECT_FALSE(LoopbackPortFree(held));

  LocalClusterOptions options;
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.run_dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/taken_port");
  options.bin_dir = "/nonexistent";  // nothing may be started
  options.base_port = held;          // redis at +0
  auto cluster = LocalCluster::Start(options);
  ::close(fd);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kFailedPrecondition)
      << cluster.status();
  EXPECT_NE(cluster.status().message().find(absl::StrCat("port ", held)),
            std::string::npos)
      << cluster.status();
}

TEST(CpuSchedulingClassTest, ParsesNamesAndRejectsOthers) {
  for (const char* name : {"normal", "batch", "idle"}) {
    auto c = ParseCpuSchedulingClass(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_EQ(CpuSchedulingClassName(*c), name);
  }
  EXPECT_EQ(ParseCpuSchedulingClass("fifo").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCpuSchedulingClass("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChildProcessTest, RunsWithTheRequestedSchedulingClassAndNice) {
  const SchedState parent = ReadSchedState(getpid());
  const SchedState normal = StartAndRead({});
  EXPECT_EQ(normal.policy, parent.policy);
  EXPECT_EQ(normal.nice, parent.nice);

  const SchedState idle =
      StartAndRead({.scheduling_class = CpuSchedulingClass::kIdle});
  EXPECT_EQ(idle.policy, SCHED_IDLE);

  const SchedState batch = StartAndRead(
      {.nice_increment = 5, .scheduling_class = CpuSchedulingClass::kBatch});
  EXPECT_EQ(batch.policy, SCHED_BATCH);
  EXPECT_EQ(batch.nice, std::min(parent.nice + 5, 19));
}

TEST(ChildProcessTest, RejectsANegativeNiceIncrement) {
  auto child = ChildProcess::Start("sleep", {"/usr/bin/sleep", "30"}, "",
                                   {.nice_increment = -1});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);
}

// What the launcher prints for a child that died (--serve reports it at once
// through LocalCluster::TakeExitedProcesses, and every stop through Stop()).
TEST(DescribeWaitStatusTest, ExitCodesAndSignalsOfRealChildren) {
  auto exits = ChildProcess::Start("sh", {"/bin/sh", "-c", "exit 3"}, "");
  ASSERT_TRUE(exits.ok()) << exits.status();
  auto status = (*exits)->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(DescribeWaitStatus(*status), "exit code 3");

  auto aborts =
      ChildProcess::Start("sh", {"/bin/sh", "-c", "kill -ABRT $$"}, "");
  ASSERT_TRUE(aborts.ok()) << aborts.status();
  status = (*aborts)->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(DescribeWaitStatus(*status), "killed by signal 6 (Aborted)");

  auto sleeps = ChildProcess::Start("sleep", {"/usr/bin/sleep", "30"}, "");
  ASSERT_TRUE(sleeps.ok()) << sleeps.status();
  EXPECT_EQ(DescribeWaitStatus((*sleeps)->Stop(absl::Seconds(10))),
            "killed by signal 15 (Terminated)");
  EXPECT_EQ(DescribeWaitStatus(-1), "not reaped");
}

}  // namespace
}  // namespace radixkv::router
