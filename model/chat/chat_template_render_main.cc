// Renders a batch of chat-template cases and prints the results as JSON:
// the C++ side of the jinja2 differential test (jinja2_render.py is the
// Python side; both read and write the same format).
//
//   chat_template_render CASES.json > RESULTS.json
//
// CASES.json: {"now": "2026-12-01T10:20:30.123456",
//              "cases": [{"template": "<jinja source>",
//                         "messages": [...], "add_generation_prompt": true,
//                         "bos_token": "<s>", "eos_token": "</s>",
//                         "tools": [...], "documents": [...],
//                         "extra": {...}}, ...]}
// (bos_token, eos_token, tools, documents, extra are optional.)
// RESULTS.json: [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "model/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;
using radixkv::model::chat::ChatTemplate;
using radixkv::model::chat::ChatTemplateInputs;
using radixkv::model::chat::LocalDateTime;
using radixkv::model::chat::RenderOptions;

// "YYYY-MM-DDTHH:MM:SS.ffffff" as a naive local time.
LocalDateTime ParseNow(const std::string& text) {
  int y = 2026, mo = 1, d = 1, h = 0, mi = 0, s = 0, us = 0;
  std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d.%d", &y, &mo, &d, &h, &mi, &s,
              &us);
  LocalDateTime t;
  t.time = absl::CivilSecond(y, mo, d, h, mi, s);
  t.microsecond = us;
  return t;
}

ChatTemplateInputs InputsOf(const Json& c) {
  ChatTemplateInputs in;
  in.messages = c.value("messages", Json::array());
  in.add_generation_prompt = c.value("add_generation_prompt", false);
  if (c.contains("bos_token")) in.bos_token = c["bos_token"].get<std::string>();
  if (c.contains("eos_token")) in.eos_token = c["eos_token"].get<std::string>();
  if (c.contains("tools")) in.tools = c["tools"];
  if (c.contains("documents")) in.documents = c["documents"];
  if (c.contains("extra")) in.extra = c["extra"];
  return in;
}

Json RenderCase(const Json& c, const RenderOptions& options) {
  Json result = Json::object();
  absl::StatusOr<ChatTemplate> tmpl =
      ChatTemplate::Parse(c.value("template", std::string()));
  absl::StatusOr<std::string> text =
      tmpl.ok() ? tmpl->Render(InputsOf(c), options)
                : absl::StatusOr<std::string>(tmpl.status());
  result["ok"] = text.ok();
  if (text.ok()) {
    result["text"] = *text;
  } else {
    result["error"] =
        absl::StrCat(absl::StatusCodeToString(text.status().code()), ": ",
                     text.status().message());
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: chat_template_render CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const Json cases = Json::parse(buffer.str(), nullptr, false);
  if (cases.is_discarded() || !cases.contains("cases")) {
    std::cerr << "malformed cases file " << argv[1] << "\n";
    return 2;
  }
  RenderOptions options;
  const LocalDateTime now = ParseNow(cases.value("now", std::string()));
  options.clock = [now] { return now; };
  Json results = Json::array();
  for (const Json& c : cases["cases"])
    results.push_back(RenderCase(c, options));
  std::cout << results.dump(-1, ' ', /*ensure_ascii=*/true,
                            Json::error_handler_t::replace)
            << "\n";
  return 0;
}
