#!/usr/bin/env python3
"""Summary table of tools/gpu/roofline_run.sh: per checkpoint and batch, the
roofline floor, radixkv's decode step with the default GEMM rule (A) and
with autotuned GEMMs (B), each as floor / step, and the Hugging Face anchor
(tools/gpu/hf_anchor.py) with its ratio to radixkv's faster arm.

  roofline_summary.py LOG_DIR ANCHOR_JSONL

Reads the ROOFLINE rows ("| <checkpoint> | <batch> | floor | A | ...") of
LOG_DIR/bench-*.log (worker/gpu/gpu_model_benchmark.cc PrintRoofline) and
the anchor's JSON lines.
"""
import glob
import json
import os
import sys


def roofline_rows(log_dir):
    rows = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "bench-*.log"))):
        in_table = False
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("ROOFLINE"):
                    in_table = True
                    print(line.rstrip())
                    continue
                if not in_table or not line.startswith("|"):
                    continue
                print(line.rstrip())
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                try:
                    rows[(cells[0], int(cells[1]))] = [float(c) for c in cells[2:]]
                except ValueError:
                    continue
    return rows


def main():
    log_dir = sys.argv[1]
    anchor = {}
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        with open(sys.argv[2]) as f:
            for line in f:
                r = json.loads(line)
                anchor[(r["label"], r["b"])] = r["step_ms"]
    rows = roofline_rows(log_dir)
    print("\nSUMMARY (decode step, 1,024-token contexts; A = default GEMM rule, "
          "B = autotuned GEMMs; HF = transformers + torch.compile)")
    print("| checkpoint | batch | floor ms | radixkv A ms | floor/step A | "
          "radixkv B ms | floor/step B | B / A | HF ms | HF / radixkv best |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted(set(rows) | set(anchor), key=lambda k: (k[0] != "small", k))
    for key in keys:
        r = rows.get(key)
        hf = anchor.get(key)
        cells = [key[0], str(key[1])]
        if r:
            floor, a, fa, b, fb, ba = r[:6]
            best = min(x for x in (a, b) if x > 0)
            cells += [f"{floor:.3f}", f"{a:.3f}", f"{fa:.2f}",
                      f"{b:.3f}" if b > 0 else "-",
                      f"{fb:.2f}" if b > 0 else "-",
                      f"{ba:.3f}" if b > 0 else "-"]
        else:
            best = None
            cells += ["-"] * 6
        cells += [f"{hf:.3f}" if hf else "-",
                  f"{hf / best:.2f}" if hf and best else "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
