#include "model/tokenizer/regex.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::model {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<uint32_t, uint32_t>> Matches(absl::string_view pattern,
                                                   absl::string_view text) {
  absl::StatusOr<std::unique_ptr<Regex>> re = Regex::FromOniguruma(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  std::vector<Regex::Match> m;
  EXPECT_TRUE((*re)->FindAll(text, &m).ok());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const Regex::Match& x : m) out.push_back({x.begin, x.end});
  return out;
}

using Spans = std::vector<std::pair<uint32_t, uint32_t>>;

TEST(RegexTest, TranslatesOnigurumaShorthands) {
  EXPECT_EQ(*OnigurumaToPcre2("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(*OnigurumaToPcre2("[^\\s\\p{L}\\p{N}]+"),
            "[^\\s\\x{85}\\p{L}\\p{N}]+");
  EXPECT_EQ(*OnigurumaToPcre2("\\w+"), "[\\p{L}\\p{M}\\p{N}\\p{Pc}]+");
  EXPECT_EQ(*OnigurumaToPcre2("\\h\\v\\u00e9"), "[0-9a-fA-F]\\x{0B}\\x{00e9}");
  EXPECT_EQ(*OnigurumaToPcre2("(?i:'s|'t)\\x41"), "(?i:'s|'t)\\x{41}");
}

TEST(RegexTest, RefusesWhatPcre2WouldReadDifferently) {
  for (const char* p : {"\\bword", "[\\S]", "[a-z&&[^aeiou]]", "[[:alpha:]]",
                        "a{,3}", "(?m:.)", "\\xFF", "\\K", "\\R", "[]a]"}) {
    absl::StatusOr<std::string> t = OnigurumaToPcre2(p);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("not supported"))
        << p;
  }
  EXPECT_EQ(Regex::FromOniguruma("(unclosed").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegexTest, FindIterSkipsEmptyMatchesAfterAMatch) {
  // onig's find_iter: (0,0), (1,4), then the empty match at 4 is skipped.
  EXPECT_EQ(Matches("a*", "baaab"), (Spans{{0, 0}, {1, 4}, {5, 5}}));
  EXPECT_EQ(Matches("x", ""), Spans{});
}

TEST(RegexTest, OnigurumaClassesOnUnicode) {
  // NEL (U+0085) is whitespace for Oniguruma's \s.
  EXPECT_EQ(Matches("\\s+",
                    "a\xC2\x85"
                    "b"),
            (Spans{{1, 3}}));
  // A combining mark is a word character for Oniguruma's \w.
  EXPECT_EQ(Matches("\\w+", "e\xCC\x81!"), (Spans{{0, 3}}));
  // Lookahead and case-insensitive groups as in the Llama 3 pattern.
  EXPECT_EQ(Matches("(?i:'s|'t)|\\s+(?!\\S)|\\s+", "IT'S  a"),
            (Spans{{2, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(Matches("\\p{N}{1,3}", "12345"), (Spans{{0, 3}, {3, 5}}));
}

TEST(RegexTest, LiteralMatchesMetacharactersAsThemselves) {
  absl::StatusOr<std::unique_ptr<Regex>> re = Regex::FromLiteral("a.b*");
  ASSERT_TRUE(re.ok());
  std::vector<Regex::Match> m;
  ASSERT_TRUE((*re)->FindAll("a.b* axbb a.b*", &m).ok());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].begin, 10u);
}

}  // namespace
}  // namespace radixkv::model
