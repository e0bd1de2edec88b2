#!/usr/bin/python3
"""Differential test of the C++ chat-template renderer against Python's
jinja2 configured as Hugging Face transformers configures it.

Every template of testdata/templates/ is rendered with every conversation of
testdata/conversations.json by jinja2_render.py (the oracle) and by the
chat_template_render binary. A render agrees when both produce the same
bytes or both fail. A template listed in testdata/refused_templates.json
uses a feature this renderer refuses by name: there, when jinja2 succeeds,
the renderer must fail with an error that names the feature. Anything else
is a difference and fails the test. The table printed at the end is the
corpus result recorded in README.md.

    chat_template_differential_test.py [--render BINARY] [--keep DIR]
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "testdata")
# The conversations the feature snippets (testdata/feature_templates.json)
# are rendered with.
FEATURE_SCENARIOS = ("multi_turn", "tool_calls")


def find_render_binary(explicit):
    if explicit:
        return explicit
    root = os.environ.get("RADIXKV_REPO_ROOT")
    candidates = []
    if root:
        candidates.append(os.path.join(root, "model/chat/chat_template_render"))
    candidates.append(os.path.join(HERE, "chat_template_render"))
    candidates.append(os.path.join(HERE, "../../bazel-bin/model/chat/chat_template_render"))
    for c in candidates:
        if os.path.exists(c):
            return c
    sys.exit("chat_template_render binary not found (tried %s)" % candidates)


def load_corpus():
    names = sorted(f[:-len(".jinja")] for f in os.listdir(os.path.join(TESTDATA, "templates"))
                   if f.endswith(".jinja"))
    templates = {}
    for name in names:
        with open(os.path.join(TESTDATA, "templates", name + ".jinja"), encoding="utf-8",
                  newline="") as f:
            templates[name] = f.read()
    with open(os.path.join(TESTDATA, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    with open(os.path.join(TESTDATA, "feature_templates.json"), encoding="utf-8") as f:
        features = json.load(f)
    with open(os.path.join(TESTDATA, "refused_templates.json"), encoding="utf-8") as f:
        refused = json.load(f)
    return templates, features, conversations, refused


def build_cases(templates, conversations, scenario_names=None):
    keys, cases = [], []
    for name, source in templates.items():
        for scenario in conversations["scenarios"]:
            if scenario_names is not None and scenario["name"] not in scenario_names:
                continue
            case = {k: v for k, v in scenario.items() if k != "name"}
            case["template"] = source
            cases.append(case)
            keys.append((name, scenario["name"]))
    return keys, cases


def run(command, cases_path):
    out = subprocess.run(command + [cases_path], check=True, stdout=subprocess.PIPE)
    return json.loads(out.stdout.decode("utf-8"))


def classify(name, ours, theirs, refused):
    """'identical', 'both_error', 'refused' or a difference description."""
    if theirs["ok"] and ours["ok"]:
        if theirs["text"] == ours["text"]:
            return "identical"
        diff = difflib.unified_diff(theirs["text"].splitlines(True), ours["text"].splitlines(True),
                                    "jinja2", "radixkv", n=1)
        return "text differs:\n" + "".join(list(diff)[:40])
    if not theirs["ok"] and not ours["ok"]:
        return "both_error"
    if theirs["ok"]:
        feature = refused.get(name)
        if feature is not None and feature in ours["error"]:
            return "refused"
        return "renderer failed, jinja2 rendered: " + ours["error"]
    return "renderer rendered, jinja2 failed: " + theirs["error"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--render", help="path of the chat_template_render binary")
    parser.add_argument("--keep", help="directory to keep the case and result files in")
    args = parser.parse_args()
    templates, features, conversations, refused = load_corpus()
    keys, cases = build_cases(templates, conversations)
    feature_keys, feature_cases = build_cases(
        {"feature:" + k: v for k, v in features.items()}, conversations, FEATURE_SCENARIOS)
    keys += feature_keys
    spec = {"now": conversations["now"], "cases": cases + feature_cases}
    workdir = args.keep or tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    os.makedirs(workdir, exist_ok=True)
    cases_path = os.path.join(workdir, "cases.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    theirs = run([sys.executable, os.path.join(HERE, "jinja2_render.py")], cases_path)
    ours = run([find_render_binary(args.render)], cases_path)

    per_template = {}
    failures = []
    for (name, scenario), mine, oracle in zip(keys, ours, theirs):
        verdict = classify(name, mine, oracle, refused)
        stats = per_template.setdefault(name, {"identical": 0, "both_error": 0, "refused": 0,
                                               "differ": 0})
        if verdict in stats:
            stats[verdict] += 1
        else:
            stats["differ"] += 1
            failures.append("%s / %s: %s" % (name, scenario, verdict))

    print("%-55s %9s %10s %7s %6s" % ("template", "identical", "both_error", "refused", "differ"))
    for name, s in per_template.items():
        print("%-55s %9d %10d %7d %6d" % (name, s["identical"], s["both_error"], s["refused"],
                                          s["differ"]))
    differing = sorted(n for n, s in per_template.items() if s["differ"])
    refusing = sorted(n for n, s in per_template.items() if s["refused"] and not s["differ"])
    agreeing = len(per_template) - len(differing) - len(refusing)
    renders = len(keys)
    corpus = [n for n in per_template if not n.startswith("feature:")]
    print("\ncorpus: %d templates x %d conversations; feature snippets: %d x %d; %d renders" %
          (len(corpus), len(conversations["scenarios"]), len(per_template) - len(corpus),
           len(FEATURE_SCENARIOS), renders))
    print("templates: %d agree on every render (identical text or both fail), %d refused "
          "by name %s, %d differ %s" % (agreeing, len(refusing), refusing, len(differing),
                                       differing))
    print("renders: %d identical, %d both fail, %d refused, %d differ" % tuple(
        sum(s[k] for s in per_template.values())
        for k in ("identical", "both_error", "refused", "differ")))
    for f in failures:
        print("\nDIFFERENCE " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
