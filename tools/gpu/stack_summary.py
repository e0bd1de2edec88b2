#!/usr/bin/env python3
"""Summary table of tools/gpu/stack_run.sh (standard library only).

Reads, from the run's work folder, each workload's workload_runner JSON
(<name>.json) and the worker's /metrics scraped before and after it
(metrics-<name>-{before,after}.txt), and optionally gpu_model_benchmark's
log, and prints one Markdown row per workload:

    output tokens/s, TTFT and TPOT p50/p99 (ms, at the client);
    the worker's mean batch (radixkv_worker_batch_size), mean forward
    (radixkv_worker_forward_seconds: the executor's ForwardSample alone),
    step (radixkv_worker_step_seconds: building the batch to streaming its
    tokens) and iteration (radixkv_worker_iteration_seconds: one whole
    scheduler iteration that ran a batch) in ms, over the workload's
    batches (after - before);
    host overhead = 1 - forward_sum / iteration_sum, and per output token
    (iteration_sum - forward_sum) / decode tokens;
    the benchmark's decode step (graphs) at the workload's mean batch and at
    B = 64, greedy (SUMMARY; what the workload runner asks for) and sampled
    (the serving table's ForwardSample), and the overhead against the greedy
    one: 1 - benchmark step / mean iteration (the benchmark decodes only; the
    stack's batches also carry chunked prefill, which this counts as
    overhead too).

--bench_args prints instead "BATCHES CONTEXT" for gpu_model_benchmark:
64 (at most --max_batch) and each workload's mean batch, and the mean
decode context (prompt + half the output tokens per request) over the
workloads.
"""

import argparse
import json
import os
import re
import sys

WORKLOADS = ("shared-prefix", "multi-turn")
SERIES = (
        "radixkv_worker_forward_seconds_sum",
        "radixkv_worker_forward_seconds_count",
        "radixkv_worker_iteration_seconds_sum",
        "radixkv_worker_iteration_seconds_count",
        "radixkv_worker_step_seconds_sum",
        "radixkv_worker_step_seconds_count",
        "radixkv_worker_batch_size_sum",
        "radixkv_worker_batch_size_count",
        "radixkv_worker_decode_tokens_total",
        "radixkv_worker_prefill_tokens_computed_total",
)


def read_metrics(path):
    """Unlabelled series of a Prometheus text file: name -> value."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in SERIES:
                out[parts[0]] = float(parts[1])
    return out


def worker_delta(work, name):
    """The worker's counters over one workload (after - before), or None."""
    before = read_metrics(os.path.join(work, f"metrics-{name}-before.txt"))
    after = read_metrics(os.path.join(work, f"metrics-{name}-after.txt"))
    if not after:
        return None
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in SERIES}


def read_run(work, name):
    """The cache_aware run of workload_runner's JSON, or None."""
    path = os.path.join(work, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        runs = json.load(f)
    for r in runs:
        if r.get("workload") == name:
            return r
    return runs[0] if runs else None


def mean_context(run):
    """Mean decode context, tokens: prompt + half the output per request."""
    ok = run.get("requests_ok", 0)
    if ok <= 0:
        return 0.0
    output = run.get("output_tokens_per_s", 0.0) * run.get("duration_s", 0.0)
    return (run.get("prompt_tokens", 0) + output / 2) / ok


def read_bench(path):
    """gpu_model_benchmark's step ms by batch size: the SUMMARY table's
    graph step (greedy, as the workload runner decodes) and the serving
    table's ForwardSample (temperature 0.7, top-k 50, top-p 0.9)."""
    greedy, serve = {}, {}
    if not path or not os.path.exists(path):
        return greedy, serve
    table = None
    row = re.compile(r"^\| (\d+) \| ([0-9.]+) \|")
    with open(path) as f:
        for line in f:
            if line.startswith("SUMMARY"):
                table = greedy
            elif line.startswith("Serving step"):
                table = serve
            elif line.startswith(("ROOFLINE", "Logprobs")):
                table = None
            m = row.match(line)
            if m and table is not None:
                table[int(m.group(1))] = float(m.group(2))
    return greedy, serve


def safe_div(a, b):
    return a / b if b else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--bench_log", default="")
    p.add_argument("--bench_args", action="store_true")
    p.add_argument("--max_batch", type=int, default=64)
    a = p.parse_args()

    rows = []
    for name in WORKLOADS:
        run = read_run(a.work, name)
        d = worker_delta(a.work, name)
        if run is None and d is None:
            continue
        rows.append((name, run, d))

    if a.bench_args:
        batches = [min(64, a.max_batch)]
        contexts = []
        for _, run, d in rows:
            if d and d["radixkv_worker_batch_size_count"] > 0:
                b = round(safe_div(d["radixkv_worker_batch_size_sum"],
                                                      d["radixkv_worker_batch_size_count"]))
                if b >= 1 and b not in batches:
                    batches.append(b)
            if run:
                contexts.append(mean_context(run))
        ctx = int(round(sum(contexts) / len(contexts))) if contexts else 1024
        print(",".join(str(b) for b in sorted(batches)), max(ctx, 16))
        return 0

    greedy, serve = read_bench(a.bench_log)
    print("\nSTACK (cache service + router + one worker, loopback; worker "
                "numbers over each workload's batches)")
    print("| workload | requests ok | errors | output tok/s | TTFT p50 / p99 ms "
                "| TPOT p50 / p99 ms | mean context | mean batch | batches | forward "
                "ms | step ms | iteration ms | host overhead % | overhead ms / output "
                "token | bench step ms at mean batch | bench step ms at B=64 | "
                "overhead vs bench % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    status = 0 if rows else 1
    for name, run, d in rows:
        run = run or {}
        if run.get("requests_ok", 0) == 0:
            status = 1
        ttft = run.get("ttft_ms", {})
        tpot = run.get("tpot_ms", {})
        cells = [
                name,
                str(run.get("requests_ok", "-")),
                str(run.get("errors", "-")),
                f"{run.get('output_tokens_per_s', float('nan')):.1f}",
                f"{ttft.get('p50', float('nan')):.1f} / "
                f"{ttft.get('p99', float('nan')):.1f}",
                f"{tpot.get('p50', float('nan')):.2f} / "
                f"{tpot.get('p99', float('nan')):.2f}",
                f"{mean_context(run):.0f}" if run else "-",
        ]
        if d and d["radixkv_worker_iteration_seconds_count"] > 0:
            n = d["radixkv_worker_batch_size_count"]
            batch = safe_div(d["radixkv_worker_batch_size_sum"], n)
            fwd = safe_div(d["radixkv_worker_forward_seconds_sum"],
                                          d["radixkv_worker_forward_seconds_count"])
            step = safe_div(d["radixkv_worker_step_seconds_sum"],
                                            d["radixkv_worker_step_seconds_count"])
            it = safe_div(d["radixkv_worker_iteration_seconds_sum"],
                                        d["radixkv_worker_iteration_seconds_count"])
            overhead = 1 - safe_div(d["radixkv_worker_forward_seconds_sum"],
                                                            d["radixkv_worker_iteration_seconds_sum"])
            per_token = safe_div(
                    d["radixkv_worker_iteration_seconds_sum"] -
                    d["radixkv_worker_forward_seconds_sum"],
                    d["radixkv_worker_decode_tokens_total"])
            b = round(batch)

            def bench(table, key):
                return f"{table[key]:.3f}" if key in table else "-"

            cells += [
                f"{batch:.1f}", f"{n:.0f}", f"{fwd * 1e3:.3f}",
                f"{step * 1e3:.3f}", f"{it * 1e3:.3f}", f"{100 * overhead:.1f}",
                f"{per_token * 1e3:.4f}",
                f"{bench(greedy, b)} / {bench(serve, b)}",
                f"{bench(greedy, 64)} / {bench(serve, 64)}",
                f"{100 * (1 - greedy[b] / 1e3 / it):.1f}"
                if b in greedy else "-",
            ]
        else:
            status = 1
            cells += ["-"] * 10
        print("| " + " | ".join(cells) + " |")
    print("host overhead = 1 - sum(forward) / sum(iteration) in the worker; "
                "target <= 10% at B = 64")
    return status


if __name__ == "__main__":
    sys.exit(main())
