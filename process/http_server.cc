#include "process/http_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace radixkv::process {

// The event loop and everything only its thread touches. Shared with the
// exchanges (a post after the server stopped is dropped).
struct HttpServerLoop {
  event_base* base = nullptr;
  evhttp* http = nullptr;
  event* wake = nullptr;
  std::thread thread;

  absl::Mutex mu;
  std::deque<std::function<void()>> queue ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;

  timeval idle_timeout = {};
  timeval write_timeout = {};

  // Loop thread: one per open connection that sent a request.
  struct Connection {
    HttpServerLoop* loop = nullptr;
    evhttp_connection* conn = nullptr;
    // The request being answered (a connection serves its keep-alive
    // requests one after the other).
    std::weak_ptr<HttpExchange> exchange;
    // Chunk callbacks waiting for the connection's output to drain.
    std::deque<std::function<void(bool)>> acks;
    // Armed while the connection waits for its next request, and while a
    // written chunk waits to reach the client: either firing closes it.
    event* idle_timer = nullptr;
    event* write_timer = nullptr;
  };
  absl::flat_hash_map<evhttp_connection*, std::unique_ptr<Connection>>
      connections;

  Connection* Find(evhttp_connection* conn) {
    auto it = connections.find(conn);
    return it == connections.end() ? nullptr : it->second.get();
  }

  void Post(std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu);
      if (stopped) return;
      queue.push_back(std::move(fn));
    }
    event_active(wake, EV_READ, 0);
  }

  void RunPosted() {
    std::deque<std::function<void()>> batch;
    {
      absl::MutexLock lock(&mu);
      batch.swap(queue);
    }
    for (auto& fn : batch) fn();
  }

  void AckChunks(evhttp_connection* conn, bool ok) {
    Connection* c = Find(conn);
    if (c == nullptr) return;
    event_del(c->write_timer);
    std::deque<std::function<void(bool)>> acks = std::move(c->acks);
    c->acks.clear();
    for (auto& ack : acks) ack(ok);
  }
};

namespace {

void OnWake(evutil_socket_t, short, void* arg) {
  static_cast<HttpServerLoop*>(arg)->RunPosted();
}

// The response of `req` is written: its connection waits for the next
// request, under the idle timeout.
void OnResponseComplete(evhttp_request* req, void* arg) {
  auto* loop = static_cast<HttpServerLoop*>(arg);
  evhttp_connection* conn = evhttp_request_get_connection(req);
  if (HttpServerLoop::Connection* c = conn ? loop->Find(conn) : nullptr) {
    event_add(c->idle_timer, &loop->idle_timeout);
  }
}

// An idle or stuck connection: closing it runs OnConnectionClosed.
void OnConnectionTimer(evutil_socket_t, short, void* arg) {
  evhttp_connection_free(static_cast<HttpServerLoop::Connection*>(arg)->conn);
}

void OnChunkWritten(evhttp_connection* conn, void* arg) {
  static_cast<HttpServerLoop*>(arg)->AckChunks(conn, true);
}

void AddHeaders(evhttp_request* req, const std::string& content_type,
                const std::vector<HttpExchange::Header>& headers) {
  evkeyvalq* out = evhttp_request_get_output_headers(req);
  evhttp_add_header(out, "Content-Type", content_type.c_str());
  for (const auto& h : headers) {
    evhttp_add_header(out, h.name.c_str(), h.value.c_str());
  }
}

}  // namespace

HttpExchange::HttpExchange(std::shared_ptr<HttpServerLoop> loop,
                           evhttp_request* request)
    : loop_(std::move(loop)), request_(request) {
  switch (evhttp_request_get_command(request)) {
    case EVHTTP_REQ_GET:
      method_ = "GET";
      break;
    case EVHTTP_REQ_POST:
      method_ = "POST";
      break;
    case EVHTTP_REQ_HEAD:
      method_ = "HEAD";
      break;
    default:
      method_ = "OTHER";
  }
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  path_ = path != nullptr && *path != '\0' ? path : "/";
  evbuffer* in = evhttp_request_get_input_buffer(request);
  body_.resize(evbuffer_get_length(in));
  evbuffer_copyout(in, body_.data(), body_.size());
  const evkeyvalq* headers = evhttp_request_get_input_headers(request);
  for (const evkeyval* h = headers->tqh_first; h != nullptr;
       h = h->next.tqe_next) {
    headers_.push_back({absl::AsciiStrToLower(h->key), h->value});
  }
}

HttpExchange::~HttpExchange() {
  // A request that a client EOF detached and nothing answered is ours.
  if (request_ != nullptr && gone_) evhttp_request_free(request_);
}

void HttpExchange::Post(std::function<void()> fn) {
  loop_->Post(std::move(fn));
}

std::string HttpExchange::header(const std::string& name) const {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const auto& h : headers_) {
    if (h.name == lower) return h.value;
  }
  return "";
}

void HttpExchange::Reply(int status, const std::string& content_type,
                         std::string body, std::vector<Header> headers) {
  Post([self = shared_from_this(), status, content_type, body = std::move(body),
        headers = std::move(headers)] {
    if (self->answered_ || self->request_ == nullptr) return;
    self->answered_ = true;
    evhttp_request* req = std::exchange(self->request_, nullptr);
    evhttp_connection* conn =
        self->gone_ ? nullptr : evhttp_request_get_connection(req);
    if (HttpServerLoop::Connection* c =
            conn != nullptr ? self->loop_->Find(conn) : nullptr) {
      c->exchange.reset();
    }
    AddHeaders(req, content_type, headers);
    evbuffer* buf = evbuffer_new();
    evbuffer_add(buf, body.data(), body.size());
    // Also frees a request whose client is gone (libevent detached it).
    if (conn != nullptr) {
      evhttp_request_set_on_complete_cb(req, OnResponseComplete,
                                        self->loop_.get());
    }
    evhttp_send_reply(req, status, nullptr, buf);
    evbuffer_free(buf);
  });
}

void HttpExchange::StartStream(int status, const std::string& content_type,
                               std::vector<Header> headers) {
  Post([self = shared_from_this(), status, content_type,
        headers = std::move(headers)] {
    if (self->answered_ || self->request_ == nullptr) return;
    self->answered_ = true;
    self->streaming_ = true;
    if (self->gone_) return;
    AddHeaders(self->request_, content_type, headers);
    evhttp_send_reply_start(self->request_, status, nullptr);
  });
}

void HttpExchange::SendChunk(std::string data, std::function<void(bool)> sent) {
  Post([self = shared_from_this(), data = std::move(data),
        sent = std::move(sent)]() mutable {
    if (!self->streaming_ || self->request_ == nullptr || self->gone_) {
      if (sent) sent(false);
      return;
    }
    HttpServerLoop* loop = self->loop_.get();
    evhttp_connection* conn = evhttp_request_get_connection(self->request_);
    if (HttpServerLoop::Connection* c = loop->Find(conn); c && sent) {
      if (c->acks.empty()) event_add(c->write_timer, &loop->write_timeout);
      c->acks.push_back(std::move(sent));
    }
    evbuffer* buf = evbuffer_new();
    evbuffer_add(buf, data.data(), data.size());
    evhttp_send_reply_chunk_with_cb(self->request_, buf, OnChunkWritten, loop);
    evbuffer_free(buf);
  });
}

void HttpExchange::EndStream() {
  Post([self = shared_from_this()] {
    if (!self->streaming_ || self->request_ == nullptr) return;
    evhttp_request* req = std::exchange(self->request_, nullptr);
    if (!self->gone_) {
      evhttp_connection* conn = evhttp_request_get_connection(req);
      if (HttpServerLoop::Connection* c = self->loop_->Find(conn)) {
        c->exchange.reset();
      }
      evhttp_request_set_on_complete_cb(req, OnResponseComplete,
                                        self->loop_.get());
    }
    // Also frees a request whose client is gone (libevent detached it).
    evhttp_send_reply_end(req);
  });
}

void HttpExchange::OnClientGone(std::function<void()> on_close) {
  Post([self = shared_from_this(), on_close = std::move(on_close)] {
    if (self->gone_) return on_close();
    self->on_close_ = std::move(on_close);
  });
}

bool HttpExchange::client_gone() const { return gone_; }

void HttpExchange::CloseFromLoop() {
  gone_ = true;
  // A client EOF detaches the request being answered (the answer frees
  // it); a connection that we close (timeouts, shutdown) frees it with
  // the connection, so nothing may touch it after.
  if (request_ != nullptr && evhttp_request_get_connection(request_)) {
    request_ = nullptr;
  }
  if (std::function<void()> on_close = std::move(on_close_)) on_close();
}

HttpServer::HttpServer(Handler handler)
    : handler_(std::move(handler)), loop_(std::make_shared<HttpServerLoop>()) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, Handler handler) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handler)));
  HttpServerLoop& loop = *server->loop_;
  loop.base = event_base_new();
  if (loop.base == nullptr) return absl::InternalError("event_base_new failed");
  loop.http = evhttp_new(loop.base);
  loop.wake = event_new(loop.base, -1, EV_PERSIST, OnWake, &loop);
  if (loop.http == nullptr || loop.wake == nullptr) {
    return absl::InternalError("evhttp_new failed");
  }
  event_add(loop.wake, nullptr);
  evhttp_set_max_body_size(loop.http,
                           static_cast<ev_ssize_t>(options.max_body_bytes));
  evhttp_set_max_headers_size(
      loop.http, static_cast<ev_ssize_t>(options.max_headers_bytes));
  evhttp_set_timeout(
      loop.http, static_cast<int>(absl::ToInt64Seconds(options.idle_timeout)));
  // The connections' own timers (a zero timeval would close every
  // keep-alive connection right after its response, and a stream as soon as
  // a chunk is not written within one loop iteration).
  loop.idle_timeout = absl::ToTimeval(options.idle_timeout);
  loop.write_timeout = absl::ToTimeval(options.write_timeout);
  evhttp_set_allowed_methods(
      loop.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
  evhttp_set_gencb(loop.http, &HttpServer::OnRequest, server.get());
  evhttp_bound_socket* bound =
      evhttp_bind_socket_with_handle(loop.http, options.address.c_str(),
                                     static_cast<ev_uint16_t>(options.port));
  if (bound == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind HTTP ", options.address, ":", options.port));
  }
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  getsockname(evhttp_bound_socket_get_fd(bound),
              reinterpret_cast<sockaddr*>(&addr), &len);
  server->port_ =
      ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);  // v4 and v6
  loop.thread = std::thread(
      [&loop] { event_base_loop(loop.base, EVLOOP_NO_EXIT_ON_EMPTY); });
  return server;
}

HttpServer::~HttpServer() {
  HttpServerLoop& loop = *loop_;
  {
    absl::MutexLock lock(&loop.mu);
    loop.stopped = true;
  }
  if (loop.thread.joinable()) {
    event_base_loopbreak(loop.base);
    event_active(loop.wake, EV_READ, 0);
    loop.thread.join();
  }
  if (loop.wake != nullptr) event_free(loop.wake);
  if (loop.http != nullptr) evhttp_free(loop.http);
  if (loop.base != nullptr) event_base_free(loop.base);
  // Posts that never ran hold their exchanges, which hold the loop.
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&loop.mu);
    dropped.swap(loop.queue);
  }
}

void HttpServer::Post(std::function<void()> fn) { loop_->Post(std::move(fn)); }

void HttpServer::OnRequest(evhttp_request* request, void* self) {
  static_cast<HttpServer*>(self)->Dispatch(request);
}

namespace {

void OnConnectionClosed(evhttp_connection* conn, void* arg) {
  auto* loop = static_cast<HttpServerLoop*>(arg);
  loop->AckChunks(conn, false);
  auto it = loop->connections.find(conn);
  if (it == loop->connections.end()) return;
  std::unique_ptr<HttpServerLoop::Connection> c = std::move(it->second);
  loop->connections.erase(it);
  event_free(c->idle_timer);
  event_free(c->write_timer);
  if (std::shared_ptr<HttpExchange> exchange = c->exchange.lock()) {
    HttpServer::CloseExchange(*exchange);
  }
}

}  // namespace

void HttpServer::Dispatch(evhttp_request* request) {
  std::shared_ptr<HttpExchange> exchange(new HttpExchange(loop_, request));
  evhttp_connection* conn = evhttp_request_get_connection(request);
  std::unique_ptr<HttpServerLoop::Connection>& c = loop_->connections[conn];
  if (c == nullptr) {
    c = std::make_unique<HttpServerLoop::Connection>();
    c->loop = loop_.get();
    c->conn = conn;
    c->idle_timer = evtimer_new(loop_->base, OnConnectionTimer, c.get());
    c->write_timer = evtimer_new(loop_->base, OnConnectionTimer, c.get());
    evhttp_connection_set_closecb(conn, OnConnectionClosed, loop_.get());
    // A response may wait minutes for its first byte (a queued request):
    // evhttp's own timeout (the idle timeout, for connections that never
    // sent a request) would cut it; the timers above take over.
    static constexpr timeval kResponseTimeout = {86400, 0};
    evhttp_connection_set_timeout_tv(conn, &kResponseTimeout);
  }
  event_del(c->idle_timer);
  c->exchange = exchange;
  handler_(std::move(exchange));
}

}  // namespace radixkv::process
