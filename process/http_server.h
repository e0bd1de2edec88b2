// HttpServer: an HTTP/1.1 server on libevent's evhttp (Debian libevent-dev).
// One event-loop thread serves every connection, so an open response
// stream (server-sent events) costs memory, not a thread. Handlers run on the
// loop thread and must not block; work that finishes elsewhere (a gRPC
// callback) answers through HttpExchange, whose methods may be called from
// any thread (they are posted to the loop).
#ifndef RADIXKV_PROCESS_HTTP_SERVER_H_
#define RADIXKV_PROCESS_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct evhttp_request;

namespace radixkv::process {

class HttpServer;
// The event loop of an HttpServer (implementation detail, http_server.cc).
struct HttpServerLoop;

// One request and its response. Thread-safe: every method may be called
// from any thread; replies are posted to the loop thread in call order.
// Exactly one of Reply or StartStream ... EndStream answers a request; a
// second answer is ignored.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  struct Header {
    std::string name, value;
  };

  // The request, as received (read-only after construction).
  const std::string& method() const { return method_; }
  // The path without the query ("/v1/completions").
  const std::string& path() const { return path_; }
  const std::string& body() const { return body_; }
  // The value of request header `name` (case-insensitive), "" if absent.
  std::string header(const std::string& name) const;

  // A complete response with `status`, `content_type` and `body`.
  void Reply(int status, const std::string& content_type, std::string body,
             std::vector<Header> headers = {});
  // Starts a chunked response (Transfer-Encoding: chunked).
  void StartStream(int status, const std::string& content_type,
                   std::vector<Header> headers = {});
  // Sends one chunk of a started stream; `sent` (may be empty) runs on the
  // loop thread once the chunk was written to the socket, or with false
  // when the client is gone.
  void SendChunk(std::string data, std::function<void(bool)> sent = {});
  void EndStream();
  // `on_close` runs (once, on the loop thread) when the client disconnects
  // before the response ended; at once if it already has.
  void OnClientGone(std::function<void()> on_close);
  bool client_gone() const;

  ~HttpExchange();

 private:
  friend class HttpServer;
  HttpExchange(std::shared_ptr<HttpServerLoop> loop, evhttp_request* request);
  // Loop thread only.
  void CloseFromLoop();
  void Post(std::function<void()> fn);

  const std::shared_ptr<HttpServerLoop> loop_;
  evhttp_request* request_;  // loop thread only; null once answered
  std::string method_, path_, body_;
  std::vector<Header> headers_;
  // Loop-thread state.
  bool answered_ = false;
  bool streaming_ = false;
  std::atomic<bool> gone_{false};
  std::function<void()> on_close_;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0 = any free port
  // Larger request bodies get 413 before any handler runs.
  size_t max_body_bytes = 8 << 20;
  size_t max_headers_bytes = 64 << 10;
  // An idle keep-alive connection (no request, no response in progress)
  // is closed after this long.
  absl::Duration idle_timeout = absl::Seconds(120);
  // While a response is in progress the connection is not read (a stream
  // may wait minutes for its first token), but a client that stops taking
  // the response for this long is disconnected.
  absl::Duration write_timeout = absl::Seconds(60);
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;

  // Binds and starts the loop thread. `handler` gets every request.
  // UNAVAILABLE when the address cannot be bound; INTERNAL when libevent
  // fails to initialise.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, Handler handler);
  // Stops accepting, closes every connection and joins the loop thread.
  ~HttpServer();

  int port() const { return port_; }
  // Runs `fn` on the loop thread (thread-safe; in call order; dropped once
  // the server is stopped).
  void Post(std::function<void()> fn);

  // Loop thread: marks `exchange` as abandoned by its client.
  static void CloseExchange(HttpExchange& exchange) {
    exchange.CloseFromLoop();
  }

 private:
  explicit HttpServer(Handler handler);
  static void OnRequest(evhttp_request* request, void* self);
  void Dispatch(evhttp_request* request);

  Handler handler_;
  std::shared_ptr<HttpServerLoop> loop_;
  int port_ = 0;
};

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_HTTP_SERVER_H_
