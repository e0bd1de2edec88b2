#!/usr/bin/env python3
"""Per-kernel table of one profiled step from Nsight Compute's CSV.

Input: the output of
  ncu --profile-from-start off --graph-profiling node --clock-control none \
      --cache-control none \
      --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      gpu_model_benchmark --profile_batch=B ...
(the benchmark brackets one decode step with the profiler range). Kernels
are grouped by their base name (namespace and template arguments dropped);
for each group: launches, total and mean duration, share of the summed
kernel time and DRAM bandwidth (bytes read + written / duration). With
--step_ms (the step's unprofiled graph time) the last line gives the time
not spent inside kernels (launch gaps and tails between graph nodes; ncu
serializes kernels, so the sum excludes overlap).

  python3 tools/gpu/kernel_breakdown.py ncu.csv [--step_ms 5.14]
"""
import argparse
import collections
import csv
import re
import sys

TIME = "gpu__time_duration.sum"
READ = "dram__bytes_read.sum"
WRITE = "dram__bytes_write.sum"
SCALE = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
         "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
         "KB": 1e3, "MB": 1e6, "GB": 1e9}


def base_name(name):
    """'void ns::Kernel<128, 2>(args)' -> 'Kernel'."""
    # ncu writes an anonymous namespace as "(anonymous namespace)",
    # "<unnamed>" or a truncated "unnamed>".
    name = re.sub(r"\(anonymous namespace\)|<?unnamed>", "anon", name.strip())
    name = re.sub(r"\(.*\)$", "", name)
    depth, out = 0, []
    for ch in name:  # drop template arguments, nested included
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).split()[-1]
    return name.split("::")[-1]


def read_rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # skip ncu's log lines
    reader = csv.reader(lines)
    header = next(reader)
    units = next(reader)
    col = {h: i for i, h in enumerate(header)}
    for h in ("Kernel Name", TIME):
        if h not in col:
            sys.exit(f"column {h!r} missing from {path}")
    for row in reader:
        def value(h):
            if h not in col or not row[col[h]]:
                return 0.0
            return float(row[col[h]].replace(",", "")) * SCALE.get(
                units[col[h]], 1.0)
        yield (base_name(row[col["Kernel Name"]]), value(TIME),
               value(READ) + value(WRITE))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--step_ms", type=float, default=0.0,
                   help="unprofiled step time, ms")
    a = p.parse_args()
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, seconds, nbytes in read_rows(a.csv):
        g = groups[name]
        g[0] += 1
        g[1] += seconds
        g[2] += nbytes
    total = sum(g[1] for g in groups.values())
    launches = sum(g[0] for g in groups.values())
    print("| kernel | launches | total us | share | mean us | DRAM GB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (n, s, b) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {s * 1e6:.1f} | {s / total:.1%} | "
              f"{s / n * 1e6:.2f} | {b / s / 1e9 if s else 0:.0f} |")
    print(f"| all kernels | {launches} | {total * 1e6:.1f} | 100% | "
          f"{total / max(launches, 1) * 1e6:.2f} | "
          f"{sum(g[2] for g in groups.values()) / total / 1e9:.0f} |")
    if a.step_ms > 0:
        gap = a.step_ms * 1e-3 - total
        print(f"step {a.step_ms:.3f} ms: kernels {total * 1e3:.3f} ms, "
              f"outside kernels {gap * 1e3:.3f} ms "
              f"({gap / (a.step_ms * 1e-3):.1%})")


if __name__ == "__main__":
    main()
