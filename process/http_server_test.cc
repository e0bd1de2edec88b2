#include "process/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace radixkv::process {
namespace {

// A blocking loopback client speaking just enough HTTP/1.1 for the tests.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ =
        connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv = {10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawClient() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool Send(const std::string& data) {
    return connected_ && write(fd_, data.data(), data.size()) ==
                             static_cast<ssize_t>(data.size());
  }
  // The last read saw the server close the connection.
  bool eof() const { return eof_; }
  // Reads until `needle` appears in what was read (or EOF / 10 s).
  std::string ReadUntil(const std::string& needle) {
    while (!absl::StrContains(buffer_, needle)) {
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      eof_ = n == 0;
      if (n <= 0) break;
      buffer_.append(chunk, n);
    }
    return buffer_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffer_;
};

std::unique_ptr<HttpServer> StartServer(HttpServer::Handler handler,
                                        HttpServerOptions options = {}) {
  auto server = HttpServer::Start(options, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(HttpServerTest, RepliesWithTheRequestSeen) {
  auto server = StartServer([](std::shared_ptr<HttpExchange> ex) {
    ex->Reply(200, "text/plain",
              absl::StrCat(ex->method(), " ", ex->path(), " [", ex->body(),
                           "] auth=", ex->header("AUTHORIZATION")),
              {{"X-Test", "1"}});
  });
  RawClient c(server->port());
  ASSERT_TRUE(
      c.Send("POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nAuthorization: "
             "Bearer k\r\nContent-Length: 5\r\n\r\nhello"));
  const std::string reply = c.ReadUntil("auth=Bearer k");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "X-Test: 1")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "POST /v1/completions [hello]"))
      << reply;
}

TEST(HttpServerTest, OversizedBodyIsRefusedBeforeTheHandler) {
  std::atomic<int> handled{0};
  HttpServerOptions options;
  options.max_body_bytes = 16;
  auto server = StartServer(
      [&](std::shared_ptr<HttpExchange> ex) {
        ++handled;
        ex->Reply(200, "text/plain", "ok");
      },
      options);
  RawClient c(server->port());
  ASSERT_TRUE(c.Send(
      absl::StrCat("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n",
                   std::string(100, 'x'))));
  const std::string reply = c.ReadUntil("\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 413")) << reply;
  EXPECT_EQ(handled.load(), 0);
}

TEST(HttpServerTest, IdleConnectionIsClosed) {
  HttpServerOptions options;
  options.idle_timeout = absl::Seconds(1);
  auto server = StartServer(
      [&](std::shared_ptr<HttpExchange> ex) {
        ex->Reply(200, "text/plain", "ok");
      },
      options);
  RawClient fresh(server->port());
  fresh.ReadUntil("never");
  EXPECT_TRUE(fresh.eof()) << "no request";
  RawClient c(server->port());
  ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
  c.ReadUntil("never");
  EXPECT_TRUE(c.eof()) << "after a reply";
}

// A keep-alive connection serves its next request after a pause (the idle
// timeout is the default 120 s): a streamed response whose chunks come
// 100 ms apart, then a complete one, then another, on one socket.
TEST(HttpServerTest, KeepAliveConnectionStaysOpenBetweenRequests) {
  std::vector<std::thread> workers;
  auto server = StartServer([&](std::shared_ptr<HttpExchange> ex) {
    if (ex->path() != "/s") {
      return ex->Reply(200, "text/plain", absl::StrCat("done ", ex->path()));
    }
    workers.emplace_back([ex] {
      ex->StartStream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) {
        absl::SleepFor(absl::Milliseconds(100));
        ex->SendChunk(absl::StrCat("data: ", i, "\n\n"));
      }
      ex->EndStream();
    });
  });
  RawClient c(server->port());
  ASSERT_TRUE(c.Send("GET /s HTTP/1.1\r\nHost: h\r\n\r\n"));
  std::string reply = c.ReadUntil("0\r\n\r\n");
  EXPECT_TRUE(absl::StrContains(reply, "data: 2")) << reply;
  for (const std::string path : {"/a", "/b"}) {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(
        c.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: h\r\n\r\n")));
    const std::string needle = absl::StrCat("done ", path);
    reply = c.ReadUntil(needle);
    EXPECT_FALSE(c.eof()) << path << ": " << reply;
    EXPECT_TRUE(absl::StrContains(reply, needle)) << reply;
  }
  for (auto& t : workers) t.join();
}

// Chunks are acknowledged once written; the stream outlives the idle
// timeout while it is in progress; answers come from another thread.
TEST(HttpServerTest, StreamsChunksFromAnotherThread) {
  HttpServerOptions options;
  options.idle_timeout = absl::Seconds(1);
  std::vector<std::thread> workers;
  std::atomic<int> acked{0};
  auto server = StartServer(
      [&](std::shared_ptr<HttpExchange> ex) {
        workers.emplace_back([ex, &acked] {
          ex->StartStream(200, "text/event-stream");
          for (int i = 0; i < 3; ++i) {
            absl::Notification sent;
            ex->SendChunk(absl::StrCat("data: ", i, "\n\n"), [&](bool ok) {
              if (ok) ++acked;
              sent.Notify();
            });
            sent.WaitForNotification();
            absl::SleepFor(absl::Milliseconds(1500));  // > the idle timeout
          }
          ex->EndStream();
        });
      },
      options);
  RawClient c(server->port());
  ASSERT_TRUE(c.Send("GET /s HTTP/1.1\r\nHost: h\r\n\r\n"));
  const std::string reply = c.ReadUntil("0\r\n\r\n");
  EXPECT_TRUE(absl::StrContains(reply, "Transfer-Encoding: chunked")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "data: 2")) << reply;
  EXPECT_EQ(acked.load(), 3);
  for (auto& t : workers) t.join();
  // Idle again after the response: closed after the idle timeout.
  const std::string after = c.ReadUntil("never sent");
  EXPECT_EQ(after, reply);
  EXPECT_TRUE(c.eof()) << "closed after the idle timeout";
}

// A client that disconnects mid-stream is reported once, and later chunks
// are acknowledged as not sent.
TEST(HttpServerTest, ClientGoneMidStreamIsReported) {
  std::shared_ptr<HttpExchange> held;
  absl::Notification started, gone;
  auto server = StartServer([&](std::shared_ptr<HttpExchange> ex) {
    held = ex;
    ex->StartStream(200, "text/event-stream");
    ex->SendChunk("data: first\n\n");
    ex->OnClientGone([&] { gone.Notify(); });
    started.Notify();
  });
  {
    RawClient c(server->port());
    ASSERT_TRUE(c.Send("GET /s HTTP/1.1\r\nHost: h\r\n\r\n"));
    c.ReadUntil("first");
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  ASSERT_TRUE(gone.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(held->client_gone());
  absl::Notification acked;
  bool ok = true;
  held->SendChunk("data: late\n\n", [&](bool sent) {
    ok = sent;
    acked.Notify();
  });
  ASSERT_TRUE(acked.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ok);
  held->EndStream();  // frees the detached request
}

// A client that stops reading is disconnected after the write timeout: the
// stream's pending chunk is acknowledged as not sent, nothing piles up.
TEST(HttpServerTest, ClientThatStopsReadingIsDisconnected) {
  HttpServerOptions options;
  options.write_timeout = absl::Seconds(1);
  std::thread writer;
  absl::Notification gone;
  std::atomic<int> sent_ok{0};
  auto server = StartServer(
      [&](std::shared_ptr<HttpExchange> ex) {
        ex->OnClientGone([&] { gone.Notify(); });
        writer = std::thread([ex, &sent_ok] {
          ex->StartStream(200, "text/event-stream");
          const std::string big(1 << 20, 'x');
          for (int i = 0; i < 1000; ++i) {  // far more than socket buffers
            absl::Notification acked;
            bool ok = false;
            ex->SendChunk(big, [&](bool sent) {
              ok = sent;
              acked.Notify();
            });
            acked.WaitForNotification();
            if (!ok) break;
            ++sent_ok;
          }
          ex->EndStream();
        });
      },
      options);
  RawClient c(server->port());
  ASSERT_TRUE(c.Send("GET /s HTTP/1.1\r\nHost: h\r\n\r\n"));
  // Never reads.
  ASSERT_TRUE(gone.WaitForNotificationWithTimeout(absl::Seconds(30)));
  writer.join();
  EXPECT_LT(sent_ok.load(), 1000);
}

int Threads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Open streams cost no thread: 400 held at once on the one loop thread.
TEST(HttpServerTest, HeldStreamsCostNoThreadEach) {
  std::vector<std::shared_ptr<HttpExchange>> held;
  auto server = StartServer([&](std::shared_ptr<HttpExchange> ex) {
    ex->StartStream(200, "text/event-stream");
    ex->SendChunk("data: hi\n\n");
    held.push_back(ex);
  });
  const int before = Threads();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 400; ++i) {
    clients.push_back(std::make_unique<RawClient>(server->port()));
    ASSERT_TRUE(clients.back()->Send("GET /s HTTP/1.1\r\nHost: h\r\n\r\n"));
  }
  for (auto& c : clients) {
    ASSERT_TRUE(absl::StrContains(c->ReadUntil("data: hi"), "data: hi"));
  }
  EXPECT_LE(Threads() - before, 2);
  server->Post([&] {
    for (auto& ex : held) ex->EndStream();
  });
}

}  // namespace
}  // namespace radixkv::process
