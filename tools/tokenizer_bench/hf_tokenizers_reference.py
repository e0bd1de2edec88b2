#!/usr/bin/env python3
"""Encode speed of Hugging Face `tokenizers` on one core, as a table.

The reference for model/tokenizer/hf_tokenizer_benchmark: same corpus, same
tokenizer.json files, same method, same columns. Run both on one machine:

  python3 tools/tokenizer_bench/hf_tokenizers_reference.py [--corpus FILE]
      [--runs N] [NAME=tokenizer.json ...]

Defaults: $RADIXKV_SHARED_DIR/golden/corpus.txt (else the Debian license
texts the C++ benchmark lists, concatenated in the same order) and the
llama3-bpe and qwen2-bpe golden tokenizers under
$RADIXKV_SHARED_DIR/golden/tokenizers.

Method: the first encode of the corpus after loading is the cold run (empty
BPE word cache); `runs` more encodes give the median. The 32K prompt is the
decode of the corpus' first 32,768 tokens; its encode is timed the same way.
The "ids fnv1a" column hashes the corpus ids (FNV-1a 64 over little-endian
int32): equal values in both tables mean identical encodings.

Single-threaded: RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false are set
before `tokenizers` is imported (encode of one string does not use rayon; the
settings make sure nothing else does).
"""

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from tokenizers import Tokenizer  # noqa: E402

PROMPT_TOKENS = 32768
# The same files, in the same order, as hf_tokenizer_benchmark.cc.
LICENSE_FILES = [
    "/usr/share/common-licenses/Apache-2.0",
    "/usr/share/common-licenses/GPL-2",
    "/usr/share/common-licenses/GPL-3",
    "/usr/share/common-licenses/LGPL-2.1",
    "/usr/share/common-licenses/MPL-2.0",
]


def shared_dir():
    return os.environ.get("RADIXKV_SHARED_DIR") or "../shared"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def default_corpus():
    path = os.path.join(shared_dir(), "golden", "corpus.txt")
    if os.path.isfile(path):
        return path, read_bytes(path)
    data = b"".join(read_bytes(p) for p in LICENSE_FILES if os.path.isfile(p))
    return "debian-licenses", data


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for byte in struct.pack("<%di" % len(ids), *ids):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def time_encode(tokenizer, text, runs):
    """Returns (first run seconds, median of the others, ids)."""
    times = []
    ids = None
    for _ in range(runs):
        start = time.perf_counter()
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        times.append(time.perf_counter() - start)
    first = times[0]
    rest = times[1:] or times
    return first, statistics.median(rest), ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("tokenizers", nargs="*", metavar="NAME=tokenizer.json")
    args = parser.parse_args()

    if args.corpus:
        corpus_name, data = args.corpus, read_bytes(args.corpus)
    else:
        corpus_name, data = default_corpus()
    corpus = data.decode("utf-8")
    runs = max(1, args.runs)
    pairs = [t.split("=", 1) for t in args.tokenizers]
    if not pairs:
        base = os.path.join(shared_dir(), "golden", "tokenizers")
        pairs = [(n, os.path.join(base, n, "tokenizer.json"))
                 for n in ("llama3-bpe", "qwen2-bpe")]

    print("corpus: %s (%d bytes), %d timed runs, one thread"
          % (corpus_name, len(data), runs))
    print("%-16s %9s %10s %10s %12s %10s %14s %18s" % (
        "tokenizer", "load ms", "tokens", "cold MB/s", "median MB/s",
        "32K tokens", "32K median ms", "ids fnv1a"))
    mb = len(data) / 1e6
    for name, path in pairs:
        load_start = time.perf_counter()
        tokenizer = Tokenizer.from_file(path)
        load = time.perf_counter() - load_start
        cold, median, ids = time_encode(tokenizer, corpus, 1 + runs)
        prompt = tokenizer.decode(ids[:PROMPT_TOKENS],
                                  skip_special_tokens=False)
        _, prompt_median, prompt_ids = time_encode(tokenizer, prompt,
                                                   1 + runs)
        print("%-16s %9.1f %10d %10.2f %12.2f %10d %14.3f %18s" % (
            name, load * 1e3, len(ids), mb / cold, mb / median,
            len(prompt_ids), prompt_median * 1e3, "%016x" % fnv1a(ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
