#include "tools/http_bench/sse_burst.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace radixkv::tools {
namespace {

struct Stream {
  SseOutcome* out = nullptr;
  absl::Time start;
  std::string pending;  // bytes of an event not yet complete
  int* remaining = nullptr;
  event_base* base = nullptr;
  evhttp_connection* connection = nullptr;
  bool ended = false;
};

// One complete "data: ..." event.
void OnEvent(Stream& s, absl::string_view event) {
  if (!absl::ConsumePrefix(&event, "data: ")) return;
  if (event == "[DONE]") {
    s.out->done = true;
    return;
  }
  if (absl::StrContains(event, "\"error\":")) {
    s.out->error_event = true;
    return;
  }
  // A text event has a non-empty "text" (completions) of its choice.
  if (!absl::StrContains(event, "\"text\":\"\"") &&
      absl::StrContains(event, "\"text\":\"")) {
    if (s.out->text_events++ == 0) s.out->first_text = absl::Now() - s.start;
  }
}

void OnChunk(evhttp_request* req, void* arg) {
  auto* s = static_cast<Stream*>(arg);
  evbuffer* in = evhttp_request_get_input_buffer(req);
  const size_t n = evbuffer_get_length(in);
  std::string data(n, '\0');
  evbuffer_remove(in, data.data(), n);
  s->pending += data;
  size_t end;
  while ((end = s->pending.find("\n\n")) != std::string::npos) {
    OnEvent(*s, absl::string_view(s->pending).substr(0, end));
    s->pending.erase(0, end + 2);
  }
}

void End(Stream* s) {
  if (s->ended) return;
  s->ended = true;
  s->out->latency = absl::Now() - s->start;
  if (--*s->remaining == 0) event_base_loopexit(s->base, nullptr);
}

void OnDone(evhttp_request* req, void* arg) {
  auto* s = static_cast<Stream*>(arg);
  if (req != nullptr)
    s->out->http_status = evhttp_request_get_response_code(req);
  End(s);
}

void OnError(evhttp_request_error, void* arg) {
  End(static_cast<Stream*>(arg));
}

}  // namespace

std::vector<SseOutcome> RunSseBurst(const std::string& host, int port,
                                    const std::vector<std::string>& bodies,
                                    const std::string& authorization,
                                    absl::Duration timeout) {
  std::vector<SseOutcome> outcomes(bodies.size());
  if (bodies.empty()) return outcomes;
  event_base* base = event_base_new();
  int remaining = static_cast<int>(bodies.size());
  std::vector<std::unique_ptr<Stream>> streams;
  for (size_t i = 0; i < bodies.size(); ++i) {
    auto s = std::make_unique<Stream>();
    s->out = &outcomes[i];
    s->remaining = &remaining;
    s->base = base;
    s->connection = evhttp_connection_base_new(base, nullptr, host.c_str(),
                                               static_cast<uint16_t>(port));
    evhttp_connection_set_timeout(
        s->connection, static_cast<int>(absl::ToInt64Seconds(timeout)));
    evhttp_request* req = evhttp_request_new(OnDone, s.get());
    evhttp_request_set_chunked_cb(req, OnChunk);
    evhttp_request_set_error_cb(req, OnError);
    evkeyvalq* headers = evhttp_request_get_output_headers(req);
    evhttp_add_header(headers, "Host", host.c_str());
    evhttp_add_header(headers, "Content-Type", "application/json");
    if (!authorization.empty()) {
      evhttp_add_header(headers, "Authorization", authorization.c_str());
    }
    evbuffer_add(evhttp_request_get_output_buffer(req), bodies[i].data(),
                 bodies[i].size());
    s->start = absl::Now();
    evhttp_make_request(s->connection, req, EVHTTP_REQ_POST, "/v1/completions");
    streams.push_back(std::move(s));
  }
  const timeval limit = absl::ToTimeval(timeout);
  event_base_loopexit(base, &limit);
  event_base_dispatch(base);
  for (auto& s : streams) evhttp_connection_free(s->connection);
  event_base_free(base);
  return outcomes;
}

}  // namespace radixkv::tools
