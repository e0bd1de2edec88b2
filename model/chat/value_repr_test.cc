#include "model/chat/value_repr.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace radixkv::model::chat {
namespace {

constexpr size_t kMax = 1 << 20;

TEST(ValueReprTest, FloatsPrintLikePythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {123456789.123, "123456789.123"},
      {1.0 / 3, "0.3333333333333333"},
      {1152921504606846976.0, "1.152921504606847e+18"},
      {-0.0, "-0.0"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {1e22, "1e+22"},
      {100.0, "100.0"},
      {1.5e-7, "1.5e-07"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::nan(""), "nan"},
  };
  for (const auto& [d, text] : cases) EXPECT_EQ(PyFloatRepr(d), text);
}

TEST(ValueReprTest, StringsQuoteAndEscapeLikePythonRepr) {
  EXPECT_EQ(PyStrRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyStrRepr("q\""), "'q\"'");
  EXPECT_EQ(PyStrRepr("both'\""), "'both\\'\"'");
  EXPECT_EQ(PyStrRepr("a\nb\tc\r"), "'a\\nb\\tc\\r'");
  EXPECT_EQ(PyStrRepr("\x01\x7f"), "'\\x01\\x7f'");
  EXPECT_EQ(PyStrRepr("é東😀"), "'é東😀'");
  EXPECT_EQ(PyStrRepr("\u200b\u00a0\u2028"), "'\\u200b\\xa0\\u2028'");
  EXPECT_EQ(PyStrRepr("\\"), "'\\\\'");
}

TEST(ValueReprTest, ContainersAndScalars) {
  Value dict = Value::NewDict();
  dict.dict().SetString("k", Value::String("v"));
  ASSERT_TRUE(dict.dict().Set(Value::Int(1), Value::None()).ok());
  const Value list = Value::NewList(
      {Value::Int(1), Value::String("a"), Value::None(), Value::Bool(true),
       Value::Float(1.0), dict, Value::Tuple({Value::Int(2)}), Value::Tuple({}),
       Value::Undefined("x"), Value::Markup("<b>")});
  EXPECT_EQ(ToPyStr(list, kMax).value(),
            "[1, 'a', None, True, 1.0, {'k': 'v', 1: None}, (2,), (), "
            "Undefined, Markup('<b>')]");
  EXPECT_EQ(ToPyStr(Value::Undefined("x"), kMax).value(), "");
  EXPECT_EQ(ToPyStr(Value::String("s"), kMax).value(), "s");
  Value keys = Value::NewList({Value::String("a")}, SequenceKind::kDictKeys);
  EXPECT_EQ(ToPyStr(keys, kMax).value(), "dict_keys(['a'])");
}

TEST(ValueReprTest, GeneratorsAndLimitsAreErrors) {
  const Value gen = Value::NewList({Value::Int(1)}, SequenceKind::kGenerator);
  EXPECT_EQ(ToPyStr(gen, kMax).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Value big =
      Value::NewList(std::vector<Value>(100, Value::String("xx")));
  EXPECT_EQ(ToPyStr(big, 64).status().code(),
            absl::StatusCode::kResourceExhausted);
  Value deep = Value::NewList({});
  for (int i = 0; i < kMaxValueDepth + 5; ++i) deep = Value::NewList({deep});
  EXPECT_EQ(ToPyStr(deep, kMax).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ValueReprTest, DictKeysFollowPythonEquality) {
  Value dict = Value::NewDict();
  ASSERT_TRUE(dict.dict().Set(Value::Int(1), Value::String("x")).ok());
  ASSERT_TRUE(dict.dict().Set(Value::Bool(true), Value::Int(3)).ok());
  ASSERT_TRUE(dict.dict().Set(Value::Float(1.0), Value::Int(4)).ok());
  EXPECT_EQ(ToPyStr(dict, kMax).value(), "{1: 4}");
  EXPECT_FALSE(dict.dict().Set(Value::NewList({}), Value::None()).ok());
}

}  // namespace
}  // namespace radixkv::model::chat
