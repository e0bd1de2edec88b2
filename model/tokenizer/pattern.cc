#include "model/tokenizer/pattern.h"

#include <vector>

#include "absl/strings/match.h"

namespace radixkv::model {

using json_fields::Json;

absl::StatusOr<ParsedPattern> ParsePattern(const Json& pattern,
                                           absl::string_view path) {
  ParsedPattern out;
  const Json* literal = json_fields::Find(pattern, "String");
  const Json* regex = json_fields::Find(pattern, "Regex");
  if ((literal == nullptr) == (regex == nullptr) ||
      !(literal != nullptr ? literal : regex)->is_string()) {
    return json_fields::Invalid(
        path, "expected {\"String\": \"...\"} or {\"Regex\": \"...\"}");
  }
  absl::StatusOr<std::unique_ptr<Regex>> compiled =
      literal != nullptr ? Regex::FromLiteral(literal->get<std::string>())
                         : Regex::FromOniguruma(regex->get<std::string>());
  if (!compiled.ok()) {
    return json_fields::Invalid(path, compiled.status().message());
  }
  out.regex = std::move(*compiled);
  out.is_regex = regex != nullptr;
  return out;
}

absl::Status ParseReplace(const Json& obj, absl::string_view path,
                          ParsedPattern* pattern, std::string* content) {
  const Json* p = json_fields::Find(obj, "pattern");
  if (p == nullptr) return json_fields::Invalid(path, "missing pattern");
  absl::StatusOr<ParsedPattern> parsed =
      ParsePattern(*p, json_fields::Child(path, "pattern"));
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::string> c = json_fields::String(obj, "content", path);
  if (!c.ok()) return c.status();
  if (parsed->is_regex && absl::StrContains(*c, '$')) {
    return json_fields::Unsupported(
        "Replace content with '$' (capture group "
        "expansion)",
        *c, json_fields::Child(path, "content"));
  }
  *pattern = std::move(*parsed);
  *content = std::move(*c);
  return absl::OkStatus();
}

absl::Status AppendReplaced(const Regex& regex, absl::string_view text,
                            absl::string_view content, std::string* out,
                            bool* head_removed) {
  std::vector<Regex::Match> matches;
  absl::Status s = regex.FindAll(text, &matches);
  if (!s.ok()) return s;
  size_t last = 0;
  for (const Regex::Match& m : matches) {
    out->append(text.data() + last, m.begin - last);
    out->append(content.data(), content.size());
    if (m.begin == 0 && m.end > 0 && content.empty()) *head_removed = true;
    last = m.end;
  }
  out->append(text.data() + last, text.size() - last);
  return absl::OkStatus();
}

}  // namespace radixkv::model
