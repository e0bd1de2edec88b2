// OpenAiFrontend: the OpenAI-compatible HTTP API of the router, served on
// its own port (process::HttpServer) over the same path as gRPC
// Router.Generate: every completion is a GenerateCall of the RouterService
// (validation, placement, retries, metrics with api="openai", aborts), so
// there is no second copy of the request logic.
//
// Endpoints: GET /health (no key needed), GET /v1/models, POST
// /v1/completions, POST /v1/chat/completions, POST /tokenize, POST
// /detokenize. With API keys configured every endpoint but /health needs
// "Authorization: Bearer <key>". A client that disconnects mid-stream
// aborts its requests (the worker frees their KV, as a gRPC cancel does).
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_FRONTEND_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_FRONTEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "process/http_server.h"
#include "router/api_keys.h"
#include "router/model_catalog.h"
#include "router/openai/openai_request.h"
#include "router/openai/openai_responder.h"
#include "router/openai/openai_response.h"
#include "router/router_service.h"

namespace radixkv::router::openai {

class OpenAiFrontend {
 public:
  // `router` and `keys` (null: no key needed) must outlive the frontend
  // and every request it started.
  OpenAiFrontend(RouterService* router, const ApiKeys* keys);

  // The process::HttpServer handler.
  void Handle(std::shared_ptr<process::HttpExchange> exchange);

  // While false (draining), /health answers 503 and new completions 503.
  void set_serving(bool serving) { serving_ = serving; }

 private:
  void HandleCompletion(std::shared_ptr<process::HttpExchange> exchange,
                        Endpoint endpoint);
  void HandleTokenize(const std::shared_ptr<process::HttpExchange>& exchange);
  void HandleDetokenize(const std::shared_ptr<process::HttpExchange>& exchange);
  // The chat prompt of `request` as token ids, with max_new_tokens filled
  // in when the request left it out (the rest of the model's context).
  absl::Status PrepareChat(OpenAiRequest* request) const;
  // Echo of a /v1/completions request: each prompt's text (a token prompt's
  // decoded with `entry`'s tokenizer) and, with logprobs, its first token
  // id (a text prompt is then tokenized here and forwarded as ids).
  // `entry` may be null only when neither is needed.
  static absl::Status PrepareEcho(
      const ModelCatalog::Entry* entry, const OpenAiRequest& request,
      std::vector<radixkv::v1::GenerateRequest>* requests,
      PromptAnswers* answers);
  // Replies `status` as an OpenAI error object and counts the request.
  void ReplyError(const std::shared_ptr<process::HttpExchange>& exchange,
                  const absl::Status& status, absl::Time arrival) const;

  RouterService* const router_;
  const ApiKeys* const keys_;
  std::atomic<bool> serving_{true};
};

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_FRONTEND_H_
