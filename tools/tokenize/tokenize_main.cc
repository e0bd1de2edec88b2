// tokenize: the tokenizer and chat template of a checkpoint folder on the
// command line, as the server runs them (model::LoadTokenizer, model/chat),
// to check a deployment the way llama.cpp's tokenize tool is used.
//
//   echo "Hello world" | tokenize --tokenizer=DIR
//       {"ids":[...],"tokens":[...]}            one object per input line
//   tokenize --tokenizer=DIR --text="Hello"     one object for the text
//   echo "[9906, 1917]" | tokenize --tokenizer=DIR --decode
//       {"text":"..."}                          one object per line of ids
//   tokenize --tokenizer=DIR --chat < conversation.json
//       {"text":"...","ids":[...]}
//
// Encode follows Hugging Face `tokenizer(text)` (add_special_tokens=True by
// default); decode `tokenizer.decode(ids)`; --chat
// `apply_chat_template(messages, add_generation_prompt=..., **kwargs)`: the
// rendered text is tokenized without adding special tokens, as transformers
// and vLLM do. Errors go to stderr with a non-zero exit status: 2 for bad
// flags, 1 for a tokenizer that does not load or bad input.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/chat/chat_template.h"
#include "model/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer, "",
          "Checkpoint or tokenizer folder (tokenizer.json, else "
          "tokenizer.model; tokenizer_config.json, chat_template.jinja).");
ABSL_FLAG(std::optional<std::string>, text, std::nullopt,
          "The input instead of stdin: a text, ids (--decode) or a JSON "
          "conversation (--chat). An empty --text reads stdin (an empty "
          "line there is the empty text).");
ABSL_FLAG(bool, decode, false,
          "Read token ids (a JSON list or numbers separated by spaces or "
          "commas, one sequence per line) and print {\"text\": ...}.");
ABSL_FLAG(bool, chat, false,
          "Read one JSON conversation {\"messages\": [...], "
          "\"add_generation_prompt\": true, ...} (or a bare list of "
          "messages); other keys are template variables (e.g. "
          "enable_thinking). Prints {\"text\": ..., \"ids\": [...]}.");
ABSL_FLAG(bool, add_special_tokens, true,
          "Encode: apply the post-processor (e.g. a leading BOS), as "
          "Hugging Face's add_special_tokens.");
ABSL_FLAG(bool, skip_special_tokens, false,
          "Decode: drop special tokens (BOS, EOS, chat markers).");
ABSL_FLAG(std::string, chat_template, "",
          "--chat: the named template to use (tokenizer_config.json lists "
          "them); default: 'tool_use' when the conversation has tools and "
          "the folder has one, else 'default', as transformers picks.");

namespace radixkv::tools {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false,
                Json::error_handler_t::replace);
}

// Token ids of one input line: "[1, 2]" or "1 2" / "1,2".
absl::StatusOr<std::vector<int32_t>> ParseIds(absl::string_view line) {
  std::vector<int32_t> ids;
  const absl::string_view body = absl::StripAsciiWhitespace(line);
  if (!body.empty() && body.front() == '[') {
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) {
      return absl::InvalidArgumentError("not a JSON list of token ids");
    }
    for (const Json& id : j) {
      if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN ||
          id.get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("not a token id: ", Dump(id)));
      }
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }
  for (absl::string_view piece :
       absl::StrSplit(body, absl::ByAnyChar(" \t,"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a token id: '", piece, "'"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<std::string> EncodeLine(const model::Tokenizer& tokenizer,
                                       absl::string_view text) {
  absl::StatusOr<std::vector<int32_t>> ids =
      tokenizer.Encode(text, absl::GetFlag(FLAGS_add_special_tokens));
  if (!ids.ok()) return ids.status();
  Json tokens = Json::array();
  for (int32_t id : *ids)
    tokens.push_back(tokenizer.IdToToken(id).value_or(""));
  return Dump(Json{{"ids", *ids}, {"tokens", std::move(tokens)}});
}

absl::StatusOr<std::string> DecodeLine(const model::Tokenizer& tokenizer,
                                       absl::string_view line) {
  absl::StatusOr<std::vector<int32_t>> ids = ParseIds(line);
  if (!ids.ok()) return ids.status();
  absl::StatusOr<std::string> text =
      tokenizer.Decode(*ids, absl::GetFlag(FLAGS_skip_special_tokens));
  if (!text.ok()) return text.status();
  return Dump(Json{{"text", *text}});
}

// The template transformers' get_chat_template picks.
absl::StatusOr<const model::ChatTemplateSource*> PickTemplate(
    const model::TokenizerFiles& files, bool has_tools) {
  if (files.chat_templates.empty()) {
    return absl::InvalidArgumentError(
        "the folder has no chat template (tokenizer_config.json "
        "chat_template or chat_template.jinja)");
  }
  std::string name = absl::GetFlag(FLAGS_chat_template);
  if (name.empty()) {
    name = has_tools && files.FindChatTemplate("tool_use") != nullptr
               ? "tool_use"
               : "default";
  }
  if (const model::ChatTemplateSource* t = files.FindChatTemplate(name)) {
    return t;
  }
  std::vector<std::string> names;
  for (const model::ChatTemplateSource& t : files.chat_templates) {
    names.push_back(t.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no chat template named '", name,
                   "'; the folder has: ", absl::StrJoin(names, ", ")));
}

// The render variables of a conversation document.
absl::StatusOr<model::chat::ChatTemplateInputs> ChatInputs(
    const model::TokenizerFiles& files, Json doc) {
  model::chat::ChatTemplateInputs in;
  if (doc.is_array()) doc = Json{{"messages", std::move(doc)}};
  if (!doc.is_object() || !doc.contains("messages") ||
      !doc["messages"].is_array()) {
    return absl::InvalidArgumentError(
        "the conversation must be a JSON object with a \"messages\" list "
        "(or a list of messages)");
  }
  in.messages = std::move(doc["messages"]);
  if (doc.contains("add_generation_prompt")) {
    if (!doc["add_generation_prompt"].is_boolean()) {
      return absl::InvalidArgumentError(
          "add_generation_prompt must be true or false");
    }
    in.add_generation_prompt = doc["add_generation_prompt"].get<bool>();
  }
  if (doc.contains("continue_final_message")) {
    return absl::InvalidArgumentError(
        "continue_final_message is not supported");
  }
  if (doc.contains("tools") && !doc["tools"].is_null()) in.tools = doc["tools"];
  if (doc.contains("documents") && !doc["documents"].is_null()) {
    in.documents = doc["documents"];
  }
  in.bos_token = files.bos_token;
  in.eos_token = files.eos_token;
  // transformers passes every special token of the tokenizer.
  if (files.pad_token.has_value()) in.extra["pad_token"] = *files.pad_token;
  if (files.unk_token.has_value()) in.extra["unk_token"] = *files.unk_token;
  for (auto& [key, value] : doc.items()) {
    if (key == "messages" || key == "add_generation_prompt" || key == "tools" ||
        key == "documents") {
      continue;
    }
    in.extra[key] = value;
  }
  return in;
}

absl::StatusOr<std::string> Chat(const model::LoadedTokenizer& loaded,
                                 absl::string_view input) {
  Json doc = Json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError("the conversation is not valid JSON");
  }
  absl::StatusOr<model::chat::ChatTemplateInputs> in =
      ChatInputs(loaded.files, std::move(doc));
  if (!in.ok()) return in.status();
  absl::StatusOr<const model::ChatTemplateSource*> source =
      PickTemplate(loaded.files, in->tools.has_value());
  if (!source.ok()) return source.status();
  absl::StatusOr<model::chat::ChatTemplate> chat_template =
      model::chat::ChatTemplate::Parse((*source)->text);
  if (!chat_template.ok()) {
    return absl::Status(chat_template.status().code(),
                        absl::StrCat("chat template '", (*source)->name,
                                     "': ", chat_template.status().message()));
  }
  absl::StatusOr<std::string> text = chat_template->Render(*in);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<int32_t>> ids =
      loaded.tokenizer->Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return ids.status();
  return Dump(Json{{"text", *text}, {"ids", *ids}});
}

int Fail(absl::string_view what, const absl::Status& status) {
  std::cerr << "tokenize: " << what << status.message() << "\n";
  return 1;
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_tokenizer);
  if (dir.empty()) {
    std::cerr << "tokenize: --tokenizer=DIR is required\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_decode) && absl::GetFlag(FLAGS_chat)) {
    std::cerr << "tokenize: --decode and --chat exclude each other\n";
    return 2;
  }
  absl::StatusOr<model::LoadedTokenizer> loaded = model::LoadTokenizer(dir);
  if (!loaded.ok()) return Fail("", loaded.status());
  const std::optional<std::string> text = absl::GetFlag(FLAGS_text);
  if (absl::GetFlag(FLAGS_chat)) {
    std::string input = text.value_or("");
    if (!text.has_value()) {
      input.assign(std::istreambuf_iterator<char>(std::cin), {});
    }
    absl::StatusOr<std::string> out = Chat(*loaded, input);
    if (!out.ok()) return Fail("", out.status());
    std::cout << *out << "\n";
    return 0;
  }
  auto one = [&](absl::string_view line) {
    return absl::GetFlag(FLAGS_decode) ? DecodeLine(*loaded->tokenizer, line)
                                       : EncodeLine(*loaded->tokenizer, line);
  };
  if (text.has_value()) {
    absl::StatusOr<std::string> out = one(*text);
    if (!out.ok()) return Fail("", out.status());
    std::cout << *out << "\n";
    return 0;
  }
  std::string line;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    absl::StatusOr<std::string> out = one(line);
    if (!out.ok()) return Fail(absl::StrCat("line ", n, ": "), out.status());
    std::cout << *out << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace radixkv::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tokenize --tokenizer=DIR [--text=TEXT] [--decode | --chat]: token "
      "ids and tokens of each input line (stdin), the text of ids, or a "
      "chat conversation rendered with the folder's chat template.");
  absl::ParseCommandLine(argc, argv);
  return radixkv::tools::Main();
}
