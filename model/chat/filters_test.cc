// jinja2's filters and tests as the renderer applies them; expected texts
// and error messages are jinja2's for the same sources (see
// interpreter_test.cc).
#include "gtest/gtest.h"
#include "model/chat/chat_template_testing.h"

namespace radixkv::model::chat {
namespace {

using testing::ExpectRenders;
using testing::RenderCase;

constexpr RenderCase kCases[] = {
    {R"j({{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world-wide (x)'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'a'|center(5) }}|{{ 'aXbX'|replace('X', '_') }}|{{ 123|string }})j",
     R"j(x|hi|ABC|abc|Hello World-Wide (X)|Hello world|  a  |a_b_|123)j",
     nullptr},
    {R"j({{ nope|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('x') }} {{ false|default('f') }})j",
     R"j(d  d None False)j", nullptr},
    {R"j({{ [1, 2]|length }} {{ 'héllo'|count }} {{ {'a': 1}|length }} {{ nope|length }} {{ [1, 2, 3]|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('|', attribute='n') }})j",
     R"j(2 5 1 0 1, 2, 3 x|y)j", nullptr},
    {R"j({{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ [3, 4]|first }} {{ [3, 4]|last }} [{{ []|first }}])j",
     R"j(['a', 'b', 'c'] ['a', 'b'] 3 4 [])j", nullptr},
    {R"j({{ [{'a': 1}, {'a': 2}, {}]|map(attribute='a')|list }} {{ [{'a': 1}, {}]|map(attribute='a', default=0)|list }} {{ ['a', 'B']|map('upper')|list }} {{ [[1, 2], [3]]|map('length')|list }})j",
     R"j([1, 2, Undefined] [1, 0] ['A', 'B'] [2, 1])j", nullptr},
    {R"j({{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 5, 10]|select('gt', 3)|list }})j",
     R"j([2, 4] [2, 4] [1, 'a'] [5, 10])j", nullptr},
    {R"j({% set ms = [{'role': 'user', 'c': 1}, {'role': 'assistant'}, {'role': 'user', 'c': 0}] %}{{ ms|selectattr('role', 'equalto', 'user')|list|length }} {{ ms|rejectattr('role', 'eq', 'user')|list }} {{ ms|selectattr('c', 'defined')|map(attribute='c')|list }})j",
     R"j(2 [{'role': 'assistant'}] [1, 0])j", nullptr},
    {R"j({{ 'yes' if [1]|select('gt', 5) else 'no' }} {% set g = [1, 2, 3]|select %}{{ g|list }}{{ g|list }})j",
     R"j(yes [1, 2, 3][])j", nullptr},
    {R"j({{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [{'n': 2, 'm': 'a'}, {'n': 1, 'm': 'b'}]|sort(attribute='n')|map(attribute='m')|list }})j",
     R"j([1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] ['b', 'a'])j",
     nullptr},
    {R"j({{ {'b': 1, 'A': 2, 'c': 0}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ [{'p': 2}, {'p': 3}]|sum(attribute='p') }})j",
     R"j([('A', 2), ('b', 1), ('c', 0)] [('b', 1), ('a', 2)] ['a', 'b'] 1 3 6 5)j",
     nullptr},
    {R"j({{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ '0x1f'|int(0, 16) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 'x'|float }})j",
     R"j(cba [3, 2, 1] 42 4 7 31 3 3.5 0.0)j", nullptr},
    {R"j({{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 42.55|round(1, 'floor') }} {{ 42.51|round(0, 'ceil') }} {{ 5|round }} {{ 1250|round(-2) }} {{ -3|abs }})j",
     R"j(2.0 4.0 2.67 42.5 43.0 5 1200 3)j", nullptr},
    {R"j({{ {'b': [1, 2.5, none, true], 'a': 'é"\n'}|tojson }}|{{ {'b': 1, 'a': {'c': []}}|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ [1, 2]|tojson(separators=(',', ':')) }})j",
     R"j({"b": [1, 2.5, null, true], "a": "é\"\n"}|{
  "b": 1,
  "a": {
    "c": []
  }
}|{"a": 2, "b": 1}|"\u00e9\ud83d\ude00"|[1,2])j",
     nullptr},
    {R"j({{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ') }})j",
     R"j(a
    b

    c|  a
  b|a
  
  b|a
> b)j",
     nullptr},
    {R"j({{ 'hello, wörld 42 foo_bar'|wordcount }} {{ 'foo bar baz qux'|truncate(9) }} {{ 'foo bar baz qux'|truncate(9, true) }} {{ 'foo bar baz qux'|truncate(11) }})j",
     R"j(4 foo... foo ba... foo bar baz qux)j", nullptr},
    {R"j({% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %} {{ '<a href="x">&\'</a>'|e }} {{ '<b>'|safe }} {{ ('<b>'|safe) + '<i>' }} {{ '%s and %s'|format('a', 'b') }})j",
     R"j(a=1;b=2; &lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; <b> <b>&lt;i&gt; a and b)j",
     nullptr},
    {R"j({{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }})j",
     R"j([[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']] [[1, 2, 3], [4, 5]])j",
     nullptr},
    {R"j({{ [x is defined, x is undefined, none is none, 'a' is string, {} is mapping, [] is iterable, 1 is iterable, 'a' is sequence, true is number, true is integer, 1.0 is float, true is boolean] }})j",
     R"j([False, True, True, True, True, True, False, True, True, False, True, True])j",
     nullptr},
    {R"j({{ [1 is true, true is true, 3 is odd, 4 is even, 9 is divisibleby 3, 'a' is eq 'a', 1 is lt 2, 2 is in [1, 2], 'ab' is lower, ('x'|e) is escaped, range is callable, 'upper' is filter, 'odd' is test] }})j",
     R"j([False, True, True, True, True, True, True, True, True, True, True, True, True])j",
     nullptr},
    {R"j({{ 'x'|nonexistent if false else 'soft' }})j", R"j(soft)j", nullptr},
    {R"j({{ nope|tojson }})j", nullptr,
     R"j(Object of type Undefined is not JSON serializable)j"},
    {R"j({{ [1, 2]|select|length }})j", nullptr,
     R"j(object of type 'generator' has no len())j"},
    {R"j({{ [1, 'a']|sort }})j", nullptr,
     R"j('<' not supported between instances of 'str' and 'int')j"},
    {R"j({{ nope|int }})j", nullptr, R"j('nope' is undefined)j"},
    {R"j({{ [1]|items|list }})j", nullptr,
     R"j(Can only get item pairs from a mapping.)j"},
};

TEST(FiltersTest, RenderLikeJinja2) { ExpectRenders(kCases); }

}  // namespace
}  // namespace radixkv::model::chat
