// Statements and expressions of the interpreter, rendered end to end. The
// expected texts and error messages are jinja2's (ImmutableSandboxedEnvironment
// as transformers configures it) for the same sources and inputs
// (chat_template_testing.h's DefaultInputs and fixed clock).
#include "gtest/gtest.h"
#include "model/chat/chat_template_testing.h"

namespace radixkv::model::chat {
namespace {

using testing::ExpectRenders;
using testing::RenderCase;

constexpr RenderCase kCases[] = {
    {R"j({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** -1 }})j",
     R"j(7 9 4 64 3.5 3 -4 2 3.0 0.5)j", nullptr},
    {R"j({{ 'a' ~ 1 ~ none ~ true ~ [1, 'b'] }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'x' + 'y' }})j",
     R"j(a1NoneTrue[1, 'b'] abab [1, 2] xy)j", nullptr},
    {R"j({{ none }} {{ true }} {{ 1.0 }} {{ 1e16 }} {{ 0.0001 }} {{ 1e-5 }} {{ [1, 'a', none] }} {{ {'k': 'v', 1: 2} }} {{ (1,) }} {{ "it's" }} [{{ missing }}])j",
     R"j(None True 1.0 1e+16 0.0001 1e-05 [1, 'a', None] {'k': 'v', 1: 2} (1,) it's [])j",
     nullptr},
    {R"j({{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 1 == 1.0 == true }} {{ 'a' in 'cat' }} {{ 'x' not in ['y'] }} {{ 'k' in {'k': 1} }})j",
     R"j(True False True True True True)j", nullptr},
    {R"j({{ true and 'x' }} {{ 0 or 'y' }} {{ not [] }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}])j",
     R"j(x y True b [])j", nullptr},
    {R"j({% set l = [1, 2, 3, 4, 5] %}{{ l[1:3] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} [{{ l[9] }}] {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }})j",
     R"j([2, 3] [5, 4, 3, 2, 1] [4, 5] [1, 3, 5] [] él cba)j", nullptr},
    {R"j({% set d = {'a': {'b': 1}, 'items': 5} %}{{ d.a.b }} {{ d['a']['b'] }} [{{ d.zz }}] {{ d['items'] }} {{ d.items is callable }} {{ d.get('zz', 0) }})j",
     R"j(1 1 [] 5 True 0)j", nullptr},
    {R"j({% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle(0, 1) }};{% endfor %})j",
     R"j(1032TrueFalse3[|b]0;2121FalseFalse3[a|c]1;3210FalseTrue3[b|]0;)j",
     nullptr},
    {R"j({% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %})j",
     R"j(2False,4True,|empty)j", nullptr},
    {R"j({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %})j",
     R"j(0134)j", nullptr},
    {R"j({% for a, b in [[1, 2], [3, 4]] %}{{ a + b }};{% endfor %}{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}{{ v }}{% endfor %})j",
     R"j(3;7;x1y2)j", nullptr},
    {R"j({% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}|{% if true %}{% set x = 7 %}{% endif %}{{ x }})j",
     R"j(12,12,1|7)j", nullptr},
    {R"j({% set ns = namespace(n=0, seen=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.seen = ns.seen + [i] %}{% endfor %}{{ ns.n }} {{ ns.seen }} {{ ns }})j",
     R"j(6 [0, 1, 2, 3] <Namespace {'n': 6, 'seen': [0, 1, 2, 3]}>)j", nullptr},
    {R"j({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 3, 4 %}{{ t }}{% set blk %}x{{ a }}y{% endset %}[{{ blk }}]{% set up | upper %}abc{% endset %}{{ up }})j",
     R"j(12(3, 4)[x1y]ABC)j", nullptr},
    {R"j({% macro f(a, b=2, c='z') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }} {{ f(1, 3) }} {{ f(1, c=5) }} [{{ f() }}] {{ f }})j",
     R"j(12z 13z 125 [2z] <Macro 'f'>)j", nullptr},
    {R"j({% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }})j",
     R"j(1(2, 3){'x': 4})j", nullptr},
    {R"j({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}in{{ 1 + 1 }}{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %})j",
     R"j(<b>in2</b>[1][2])j", nullptr},
    {R"j({% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}|{% macro m2() %}{{ z }}{% endmacro %}{% for z in [7] %}{{ m2() }}{% endfor %}|)j",
     R"j(3||)j", nullptr},
    {R"j({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})j",
     R"j(120)j", nullptr},
    {R"j({% filter upper %}hi {{ 'there' }}{% endfilter %}|{% with a = 1 %}{{ a + 1 }}{% endwith %}[{{ a }}])j",
     R"j(HI THERE|2[])j", nullptr},
    {R"j({% for m in messages %}{% generation %}{{ m.role }}{% endgeneration %};{% endfor %})j",
     R"j(system;user;assistant;)j", nullptr},
    {R"j({{ dict(a=1) }} {{ range(3) }} {{ range(3)|list }} {% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{% set j = joiner('|') %}{{ j() }}a{{ j() }}b)j",
     R"j({'a': 1} range(0, 3) [0, 1, 2] xyxa|b)j", nullptr},
    {R"j({{ strftime_now('%Y-%m-%d %H:%M:%S.%f %a %b|%Z|%z|') }})j",
     R"j(2026-12-01 10:20:30.123456 Tue Dec|||)j", nullptr},
    {R"j({{ messages|length }} {{ messages[0].content }} {{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} {{ tools }} {{ documents }})j",
     R"j(3 Be kind. True <s></s> None None)j", nullptr},
    {R"j({{ '%s=%05.2f|%-4d|%x' % ('pi', 3.14159, 7, 255) }})j",
     R"j(pi=03.14|7   |ff)j", nullptr},
    {R"j({% set l = [3, 1, 2] %}{{ l.pop() }}{{ l }}{% set m = l %}{{ m.pop(0) }}{{ l }})j",
     R"j(2[3, 1]3[1])j", nullptr},
    {R"j({{ 'a' + 1 }})j", nullptr,
     R"j(can only concatenate str (not "int") to str)j"},
    {R"j({{ 1 / 0 }})j", nullptr, R"j(division by zero)j"},
    {R"j({{ nope.attr }})j", nullptr, R"j('nope' is undefined)j"},
    {R"j({{ nope() }})j", nullptr, R"j('nope' is undefined)j"},
    {R"j({{ [1].append(2) }})j", nullptr,
     R"j(access to attribute 'append' of 'list' object is unsafe.)j"},
    {R"j({{ raise_exception('bad input') }})j", nullptr, R"j(bad input)j"},
    {R"j({% for a, b in [[1, 2, 3]] %}{% endfor %})j", nullptr,
     R"j(too many values to unpack (expected 2))j"},
    {R"j({% set d = {} %}{% set d.x = 1 %})j", nullptr,
     R"j(cannot assign attribute on non-namespace object)j"},
    {R"j({% macro f(a) %}{% endmacro %}{{ f(1, 2) }})j", nullptr,
     R"j(macro 'f' takes not more than 1 argument(s))j"},
    {R"j({{ 1 < 'a' }})j", nullptr,
     R"j('<' not supported between instances of 'int' and 'str')j"},
    {R"j({{ none|length }})j", nullptr,
     R"j(object of type 'NoneType' has no len())j"},
};

TEST(InterpreterTest, RendersLikeJinja2) { ExpectRenders(kCases); }

}  // namespace
}  // namespace radixkv::model::chat
