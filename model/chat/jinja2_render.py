#!/usr/bin/python3
"""Renders chat-template cases with Python's jinja2 configured exactly as
Hugging Face transformers configures it (utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension and a {% generation %} tag that renders its body,
`tojson` as json.dumps(ensure_ascii=False, indent, separators, sort_keys),
and the globals raise_exception(message) and strftime_now(format) (here on a
fixed clock). The Python side of the differential test; the input and
output formats are chat_template_render_main.cc's.

    jinja2_render.py CASES.json > RESULTS.json
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: a call block around the body,
    as transformers' AssistantTracker parses it (tracking disabled)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case, compiled):
    kwargs = {
        "messages": case.get("messages", []),
        "tools": case.get("tools"),
        "documents": case.get("documents"),
        "add_generation_prompt": case.get("add_generation_prompt", False),
    }
    for token in ("bos_token", "eos_token"):
        if token in case:
            kwargs[token] = case[token]
    kwargs.update(case.get("extra", {}))
    try:
        source = case["template"]
        if source not in compiled:
            compiled[source] = env.from_string(source)
        text = compiled[source].render(**kwargs)
        return {"ok": True, "text": text}
    except Exception as e:  # any jinja2 or Python error is a render failure
        return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    now = datetime.datetime.strptime(spec["now"], "%Y-%m-%dT%H:%M:%S.%f")
    env = make_environment(now)
    compiled = {}  # source -> jinja2 Template, compiled once
    results = []
    for case in spec["cases"]:
        results.append(render(env, case, compiled))
    json.dump(results, sys.stdout, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
