#include "model/chat/json_dumps.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace radixkv::model::chat {
namespace {

constexpr size_t kMax = 1 << 20;

Value Obj(std::vector<std::pair<std::string, Value>> entries) {
  Value d = Value::NewDict();
  for (auto& [k, v] : entries) d.dict().SetString(k, v);
  return d;
}

TEST(JsonDumpsTest, CompactMatchesPythonJsonDumps) {
  const Value v =
      Obj({{"b", Value::NewList({Value::Int(1), Value::Float(2.5),
                                 Value::None(), Value::Bool(true)})},
           {"a", Value::String("é\"\n\x01\u2028")},
           {"c", Value::NewDict()}});
  EXPECT_EQ(PyJsonDumps(v, {}, kMax).value(),
            "{\"b\": [1, 2.5, null, true], \"a\": \"é\\\"\\n\\u0001\u2028\", "
            "\"c\": {}}");
}

TEST(JsonDumpsTest, IndentUsesCommaSeparatorAndNewlines) {
  JsonDumpsOptions options;
  options.indent = "  ";
  options.item_separator = ",";
  const Value v = Obj(
      {{"b",
        Value::NewList({Value::Int(1), Obj({{"x", Value::NewList({})}})})}});
  EXPECT_EQ(PyJsonDumps(v, options, kMax).value(),
            "{\n  \"b\": [\n    1,\n    {\n      \"x\": []\n    }\n  ]\n}");
  options.indent = "";
  EXPECT_EQ(PyJsonDumps(Value::NewList(
                            {Value::Int(1), Value::NewList({Value::Int(2)})}),
                        options, kMax)
                .value(),
            "[\n1,\n[\n2\n]\n]");
}

TEST(JsonDumpsTest, EnsureAsciiEscapesWithSurrogatePairs) {
  JsonDumpsOptions options;
  options.ensure_ascii = true;
  EXPECT_EQ(PyJsonDumps(Value::String("é😀\x7f"), options, kMax).value(),
            "\"\\u00e9\\ud83d\\ude00\\u007f\"");
}

TEST(JsonDumpsTest, KeysNumbersAndSorting) {
  Value d = Value::NewDict();
  ASSERT_TRUE(d.dict().Set(Value::Int(1), Value::String("x")).ok());
  ASSERT_TRUE(d.dict().Set(Value::None(), Value::Int(2)).ok());
  ASSERT_TRUE(d.dict().Set(Value::Float(1.5), Value::Int(4)).ok());
  EXPECT_EQ(PyJsonDumps(d, {}, kMax).value(),
            "{\"1\": \"x\", \"null\": 2, \"1.5\": 4}");
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(
      PyJsonDumps(Value::NewList({Value::Float(std::nan("")), Value::Float(inf),
                                  Value::Float(-inf), Value::Float(1e16)}),
                  {}, kMax)
          .value(),
      "[NaN, Infinity, -Infinity, 1e+16]");
  JsonDumpsOptions sorted;
  sorted.sort_keys = true;
  sorted.item_separator = ",";
  sorted.key_separator = ":";
  EXPECT_EQ(PyJsonDumps(Obj({{"b", Value::Int(1)}, {"a", Value::Int(2)}}),
                        sorted, kMax)
                .value(),
            "{\"a\":2,\"b\":1}");
}

TEST(JsonDumpsTest, UnserializableValuesAreErrors) {
  EXPECT_EQ(PyJsonDumps(Value::Undefined(""), {}, kMax).status().message(),
            "Object of type Undefined is not JSON serializable");
  EXPECT_EQ(PyJsonDumps(Value::NewList({}, SequenceKind::kGenerator), {}, kMax)
                .status()
                .message(),
            "Object of type generator is not JSON serializable");
  EXPECT_EQ(
      PyJsonDumps(Value::String(std::string(100, 'x')), {}, 10).status().code(),
      absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace radixkv::model::chat
