#include "model/chat/py_str.h"

#include "gtest/gtest.h"
#include "model/chat/py_unicode.h"

namespace radixkv::model::chat {
namespace {

using Strings = std::vector<std::string>;

TEST(PyStrTest, SplitFamily) {
  EXPECT_EQ(PySplit(" a  b ", std::nullopt, 1), (Strings{"a", "b "}));
  EXPECT_EQ(PyRSplit("a b c ", std::nullopt, 1), (Strings{"a b", "c"}));
  EXPECT_EQ(PySplit("a,b,,c", std::string(","), 2), (Strings{"a", "b", ",c"}));
  EXPECT_EQ(PyRSplit("a,b,c", std::string(","), 1), (Strings{"a,b", "c"}));
  EXPECT_EQ(PySplitLines("a\nb\r\nc\x0b"
                         "d\x1c"
                         "e\u2028f",
                         false),
            (Strings{"a", "b", "c", "d", "e", "f"}));
  EXPECT_EQ(PySplitLines("x\n", true), (Strings{"x\n"}));
}

TEST(PyStrTest, SearchCountsCodePoints) {
  EXPECT_EQ(PyFind("abcabc", "c", 3, std::nullopt, false), 5);
  EXPECT_EQ(PyFind("abcabc", "c", 0, 5, true), 2);
  EXPECT_EQ(PyFind("abc", "", 5, std::nullopt, false), -1);
  EXPECT_EQ(PyCount("abc", "", std::nullopt, std::nullopt), 4);
  EXPECT_EQ(PyCount("aaaa", "aa", std::nullopt, std::nullopt), 2);
  EXPECT_EQ(PyFind("é東é", "é", 1, std::nullopt, false), 2);
}

TEST(PyStrTest, ReplacePadStrip) {
  EXPECT_EQ(PyReplace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(PyReplace("ab", "", "-", 2), "-a-b");
  EXPECT_EQ(PyReplace("aaa", "a", "bb", 2), "bbbba");
  EXPECT_EQ(PyPad("a", 4, "*", '^'), "*a**");
  EXPECT_EQ(PyPad("ab", 5, " ", '^'), "  ab ");
  EXPECT_EQ(PyZfill("-42", 6), "-00042");
  EXPECT_EQ(PyStrip(" \u3000x\u00a0", std::nullopt, true, true), "x");
  EXPECT_EQ(PyStrip("xxaxx", std::string("x"), true, false), "axx");
}

TEST(PyStrTest, SliceIndices) {
  SliceIndices r = NormalizeSlice(10, 2, 8, 3);
  EXPECT_EQ(r.start, 2);
  EXPECT_EQ(r.count, 2);
  r = NormalizeSlice(6, std::nullopt, std::nullopt, -2);
  EXPECT_EQ(r.start, 5);
  EXPECT_EQ(r.count, 3);
  r = NormalizeSlice(6, 10, std::nullopt, std::nullopt);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(PySubstring("abc", -10, 2), "ab");
}

TEST(PyUnicodeTest, CaseMappingsAreFullUnicode) {
  EXPECT_EQ(PyLower("ΣΑΣ ΑΣ"), "σας ας");
  EXPECT_EQ(PyUpper("straße"), "STRASSE");
  EXPECT_EQ(PyCapitalize("ﬁne"), "Fine");
  EXPECT_EQ(PyTitle("ǆungla"), "ǅungla");
  EXPECT_EQ(PyTitle("hello wORLD"), "Hello World");
  EXPECT_EQ(PyTitle("ß"), "Ss");
}

TEST(PyUnicodeTest, Utf8AndClasses) {
  EXPECT_TRUE(IsValidUtf8("é東😀"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));  // surrogate
  EXPECT_FALSE(IsValidUtf8("\xc0\x80"));      // overlong
  EXPECT_EQ(CodePointCount("é東😀"), 3u);
  EXPECT_TRUE(PyIsSpace(0x3000));
  EXPECT_FALSE(PyIsSpace(0x200B));
  EXPECT_FALSE(PyIsPrintable(0x200B));
  EXPECT_TRUE(PyIsPrintable(0x6771));
  EXPECT_TRUE(PyIsWordChar('_'));
  EXPECT_TRUE(PyIsAlnum(0x4E00));
}

}  // namespace
}  // namespace radixkv::model::chat
