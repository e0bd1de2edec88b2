#!/usr/bin/python3
"""Test of the tokenize tool on the golden tokenizers made by Hugging Face
(RADIXKV_SHARED_DIR/golden/tokenizers, README there; golden/tokenizer for
sentencepiece): every case's ids (with and without special tokens), tokens,
decodes and chat renders must be Hugging Face's, and bad input must fail
with a message and a non-zero exit status.

    tokenize_test.py [--tokenize BINARY]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import unittest

BINARY = None
TOKENIZERS = ("llama3-bpe", "qwen2-bpe", "gpt2-bytelevel", "llama2-spm-fast")


# The runfiles tree under Bazel (tests/run_python_test.sh), else the
# repository with bazel-bin.
ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())


def shared_dir():
    if os.environ.get("RADIXKV_SHARED_DIR"):
        return os.environ["RADIXKV_SHARED_DIR"]
    # <repo>/tools/tokenize/tokenize_test.py -> <repo>/../shared
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return os.path.join(os.path.dirname(repo), "shared")


def golden(*parts):
    path = os.path.join(shared_dir(), "golden", *parts)
    if not os.path.exists(path):
        raise AssertionError("%s is missing: set RADIXKV_SHARED_DIR to the shared folder" % path)
    return path


def run(args, stdin=""):
    return subprocess.run([BINARY] + args, input=stdin.encode("utf-8"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_ok(args, stdin=""):
    p = run(args, stdin)
    if p.returncode != 0:
        raise AssertionError("tokenize %s failed (%d): %s" %
                             (args, p.returncode, p.stderr.decode("utf-8", "replace")))
    return [json.loads(line) for line in p.stdout.decode("utf-8").splitlines()]


def vocab_of(tokenizer_json):
    """id -> token string: the model vocabulary plus the added tokens."""
    with open(tokenizer_json, encoding="utf-8") as f:
        t = json.load(f)
    vocab = {i: tok for tok, i in t["model"]["vocab"].items()}
    for added in t.get("added_tokens", []):
        vocab[added["id"]] = added["content"]
    return vocab


def encode_all(test, folder, texts, extra_args):
    """Outputs of `tokenize` for `texts`: one stdin run for the one-line
    texts, one --text run each for texts holding a line break."""
    out = [None] * len(texts)
    lines = [i for i, t in enumerate(texts) if "\n" not in t and "\r" not in t]
    results = run_ok(["--tokenizer", folder] + extra_args,
                     "".join(texts[i] + "\n" for i in lines))
    test.assertEqual(len(results), len(lines))
    for i, r in zip(lines, results):
        out[i] = r
    for i, t in enumerate(texts):
        if out[i] is None:
            [out[i]] = run_ok(["--tokenizer", folder, "--text=" + t] + extra_args)
    return out


class GoldenTokenizersTest(unittest.TestCase):

    def test_encode_ids_and_tokens(self):
        for name in TOKENIZERS:
            folder = golden("tokenizers", name)
            with open(os.path.join(folder, "cases.json"), encoding="utf-8") as f:
                cases = json.load(f)
            vocab = vocab_of(os.path.join(folder, "tokenizer.json"))
            texts = [c["text"] for c in cases]
            plain = encode_all(self, folder, texts, ["--add_special_tokens=false"])
            special = encode_all(self, folder, texts, [])
            for c, p, s in zip(cases, plain, special):
                self.assertEqual(p["ids"], c["ids"], "%s: %r" % (name, c["text"]))
                self.assertEqual(s["ids"], c["ids_with_special"], "%s: %r" % (name, c["text"]))
                self.assertEqual(s["tokens"], [vocab[i] for i in s["ids"]], name)
            print("%s: %d of %d cases identical" % (name, len(cases), len(cases)))

    def test_decode(self):
        for name in TOKENIZERS:
            folder = golden("tokenizers", name)
            with open(os.path.join(folder, "cases.json"), encoding="utf-8") as f:
                cases = json.load(f)
            ids = "".join(json.dumps(c["ids"]) + "\n" for c in cases)
            decoded = run_ok(["--tokenizer", folder, "--decode"], ids)
            self.assertEqual([d["text"] for d in decoded], [c["decoded"] for c in cases], name)
            ids = "".join(" ".join(map(str, c["ids_with_special"])) + "\n" for c in cases)
            skipped = run_ok(["--tokenizer", folder, "--decode", "--skip_special_tokens"], ids)
            self.assertEqual([d["text"] for d in skipped],
                             [c["decoded_skip_special"] for c in cases], name)

    def test_chat_renders(self):
        for name in TOKENIZERS:
            folder = golden("tokenizers", name)
            with open(os.path.join(folder, "chat.json"), encoding="utf-8") as f:
                chats = json.load(f)
            for c in chats:
                conversation = {"messages": c["messages"],
                                "add_generation_prompt": c["add_generation_prompt"]}
                [out] = run_ok(["--tokenizer", folder, "--chat"], json.dumps(conversation))
                # The Mistral template writes today's date (strftime_now, local
                # time); the goldens were made on 2026-12-01.
                expected = c["text"].replace("2026-12-01", time.strftime("%Y-%m-%d"))
                self.assertEqual(out["text"], expected, name)
                # The template writes the specials: no BOS is added again.
                [enc] = run_ok(["--tokenizer", folder, "--text=" + expected,
                                "--add_special_tokens=false"])
                self.assertEqual(out["ids"], enc["ids"], name)
                if name != "llama2-spm-fast":  # Prepend("▁") adds a space after <s>
                    [dec] = run_ok(["--tokenizer", folder, "--decode"], json.dumps(out["ids"]))
                    self.assertEqual(dec["text"], expected, name)
            print("%s: %d chat renders identical" % (name, len(chats)))

    def test_chat_kwargs_reach_the_template(self):
        folder = golden("tokenizers", "llama3-bpe")
        conversation = {"messages": [{"role": "user", "content": "Hi!"}],
                        "add_generation_prompt": True, "date_string": "01 Dec 2026"}
        [out] = run_ok(["--tokenizer", folder, "--chat", "--text=" + json.dumps(conversation)])
        self.assertIn("Today Date: 01 Dec 2026\n", out["text"])

    def test_sentencepiece_folder(self):
        folder = golden("tokenizer")
        with open(os.path.join(folder, "tokenizer_golden.json"), encoding="utf-8") as f:
            g = json.load(f)
        texts = [c["text"] for c in g["cases"]]
        plain = encode_all(self, folder, texts, ["--add_special_tokens=false"])
        for c, p in zip(g["cases"], plain):
            self.assertEqual(p["ids"], c["ids"], c["text"])
            self.assertEqual(p["tokens"], c["pieces"], c["text"])
        for prompt in g["generation_prompts"]:
            [out] = run_ok(["--tokenizer", folder, "--text=" + prompt["text"]])
            self.assertEqual(out["ids"], prompt["ids_with_bos"])


class ErrorsTest(unittest.TestCase):

    def assertFails(self, args, stdin, message, code=1):
        p = run(args, stdin)
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertEqual(p.stdout, b"")
        self.assertIn(message, p.stderr.decode("utf-8"))

    def test_errors(self):
        llama3 = golden("tokenizers", "llama3-bpe")
        self.assertFails([], "", "--tokenizer=DIR is required", code=2)
        self.assertFails(["--tokenizer", llama3, "--decode", "--chat"], "", "exclude", code=2)
        self.assertFails(["--tokenizer", "/nonexistent"], "x\n", "neither tokenizer.json")
        self.assertFails(["--tokenizer", llama3, "--decode"], "[1, 999999]\n", "line 1: ")
        self.assertFails(["--tokenizer", llama3, "--decode"], "1 two\n", "not a token id: 'two'")
        self.assertFails(["--tokenizer", llama3, "--decode"], "[1,\n", "not a JSON list")
        self.assertFails(["--tokenizer", llama3, "--chat"], "{", "not valid JSON")
        self.assertFails(["--tokenizer", llama3, "--chat"], '{"messages": 3}',
                         'a "messages" list')
        self.assertFails(["--tokenizer", golden("tokenizers", "gpt2-bytelevel"), "--chat"],
                         '{"messages": []}', "no chat template")
        self.assertFails(["--tokenizer", llama3, "--chat", "--chat_template", "rag"],
                         '{"messages": []}', "no chat template named 'rag'")
        # The Mistral template's raise_exception for a role it does not know.
        self.assertFails(["--tokenizer", golden("tokenizers", "llama2-spm-fast"), "--chat"],
                         '{"messages": [{"role": "narrator", "content": "a"}]}',
                         "raise_exception: Only user and assistant roles are supported")
        # Invalid UTF-8 in a line to encode.
        p = subprocess.run([BINARY, "--tokenizer", llama3], input=b"ok\n\xff\xfe\n",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stdout.splitlines()), 1)  # the first line's ids
        self.assertIn(b"line 2: ", p.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenize")
    args, rest = parser.parse_known_args()
    BINARY = args.tokenize or (
        os.path.join(ROOT, "tools/tokenize/tokenize")
        if "RADIXKV_REPO_ROOT" in os.environ
        else os.path.join(ROOT, "bazel-bin/tools/tokenize/tokenize"))
    unittest.main(argv=[sys.argv[0]] + rest)
