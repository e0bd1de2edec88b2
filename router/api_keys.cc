#include "router/api_keys.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace radixkv::router {
namespace {

// Equal when `a` == `b`; the time depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ApiKeys::Read(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::string> keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || absl::StartsWith(key, "#")) continue;
    const std::string where = absl::StrCat(path, " line ", number);
    for (char c : key) {
      const auto u = static_cast<unsigned char>(c);
      if (u <= 0x20 || u == 0x7f) {
        return absl::InvalidArgumentError(
            absl::StrCat(where,
                         ": a key must not contain whitespace or "
                         "control characters"));
      }
    }
    if (key.size() > kMaxApiKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": a key has at most ", kMaxApiKeyBytes, " bytes"));
    }
    if (keys.size() == kMaxApiKeys) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": at most ", kMaxApiKeys, " keys"));
    }
    keys.emplace_back(key);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no key"));
  }
  return keys;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(
    const std::string& path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path));
  if (absl::Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

absl::Status ApiKeys::Reload() {
  absl::StatusOr<std::vector<std::string>> keys = Read(path_);
  if (!keys.ok()) return keys.status();
  absl::MutexLock lock(&mu_);
  keys_ = *std::move(keys);
  return absl::OkStatus();
}

absl::Status ApiKeys::Check(absl::string_view authorization) const {
  absl::string_view token = absl::StripAsciiWhitespace(authorization);
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "an API key is required: send \"Authorization: Bearer <key>\"");
  }
  if (!absl::ConsumePrefix(&token, "Bearer ") &&
      !absl::ConsumePrefix(&token, "bearer ")) {
    return absl::UnauthenticatedError(
        "the Authorization header must be \"Bearer <key>\"");
  }
  token = absl::StripAsciiWhitespace(token);
  bool known = false;
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys_) {
    known |= ConstantTimeEquals(token, key);  // no early exit
  }
  if (!known) return absl::UnauthenticatedError("incorrect API key provided");
  return absl::OkStatus();
}

size_t ApiKeys::size() const {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

}  // namespace radixkv::router
