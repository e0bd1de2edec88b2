#!/usr/bin/env python3
"""Hugging Face anchor for the GPU decode step (docs/perf.md, issue targets).

Times one greedy decode step of a checkpoint written by
//worker/gpu:make_random_checkpoint (config.json + model.safetensors, bf16)
with Hugging Face transformers' LlamaForCausalLM, its StaticCache and
torch.compile(mode="reduce-overhead") (CUDA graphs), at batch sizes B with a
cache of `context` tokens per sequence: the same shapes
//worker/gpu:gpu_model_benchmark times on radixkv, so that docs/perf.md
reports ratios measured side by side on one machine.

A step is model(input_ids [B, 1], position_ids, cache_position) + argmax of
the last logits, timed on the host around torch.cuda.synchronize() (as
gpu_model_benchmark times its steps: wall clock, token ids on the device).
The first `context` positions of the cache are filled with random values
(the contents do not change the work: StaticCache attends over all
max_cache_len = context + 1 positions with a mask). Offline: nothing is downloaded (HF_HUB_OFFLINE=1).

  python3 tools/gpu/hf_anchor.py --model_dir=/tmp/bench-model \
      [--batches=1,16,64,256] [--context=1024] [--steps=32] [--out=FILE]
      [--label=NAME] [--dynamic_batch]

Prints one table row per batch size (median step ms, p10/p90, tokens/s,
compile seconds) and, with --out, writes the rows as JSON lines
({"b", "step_ms", ...}) for tools/gpu/roofline_run.sh's summary.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaForCausalLM, StaticCache  # noqa: E402


def make_cache(model, batch, max_len):
    """A StaticCache for `batch` sequences of max_len tokens, across the
    transformers 4 (max_batch_size, device, dtype) and 5 (lazy) signatures."""
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": model.config, "max_cache_len": max_len}
    for name, value in (("max_batch_size", batch), ("batch_size", batch),
                        ("device", model.device), ("dtype", model.dtype)):
        if name in params:
            kw[name] = value
    return StaticCache(**kw)


def cache_tensors(cache):
    """The K/V tensors of a StaticCache (transformers 5 layers or 4 lists)."""
    out = []
    for layer in getattr(cache, "layers", []) or []:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    for name in ("key_cache", "value_cache"):
        for t in getattr(cache, name, []) or []:
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def time_batch(model, step, batch, context, steps, vocab):
    """Median / p10 / p90 step seconds and compile seconds at one batch;
    `step` is the compiled model.forward."""
    dev = model.device
    # Where forward takes cache_position, every step writes position
    # `context` of a context + 1 cache (radixkv's shape); otherwise the cache
    # infers it from the filled length, one more each step.
    explicit = "cache_position" in inspect.signature(model.forward).parameters
    cache = make_cache(model, batch,
                       context + 1 if explicit else context + steps + 8)
    gen = torch.Generator(device=dev).manual_seed(1000 + batch)
    ids = torch.randint(3, vocab, (steps + 4, batch, 1), device=dev,
                        generator=gen)
    pos = torch.full((batch, 1), context, dtype=torch.long, device=dev)
    cache_position = torch.tensor([context], dtype=torch.long, device=dev)

    def run(i, fn=step):
        kw = {"cache_position": cache_position} if explicit else {}
        out = fn(input_ids=ids[i], position_ids=pos, past_key_values=cache,
                 use_cache=True, **kw)
        return out.logits[:, -1, :].argmax(dim=-1)

    t0 = time.perf_counter()
    with torch.no_grad():  # as generate() runs its compiled forward
        # One eager step first: transformers 5 allocates StaticCache layers
        # lazily on their first update, outside the compiled graph.
        run(0, model.forward)
        filled = 0
        for t in cache_tensors(cache):  # [batch, kv_heads, length, dim]
            t[:, :, :context].normal_(0.0, 1.0, generator=gen)
            filled += 1
        for i in range(0, 4):  # compiles, CUDA graph warm-up and recording
            run(i)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        times = []
        for i in range(steps):
            a = time.perf_counter()
            run(4 + i % steps)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - a)
    del cache
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    return statistics.median(times), q(0.1), q(0.9), compile_s, filled


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--batches", default="1,16,64,256")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--out", default="")
    p.add_argument("--label", default="", help="checkpoint label for --out")
    p.add_argument("--dynamic_batch", action="store_true",
                   help="compile once with a dynamic batch dimension (B = 1 "
                   "is still specialized) instead of once per batch size; "
                   "CUDA graphs are still recorded per shape")
    a = p.parse_args()

    torch._dynamo.config.cache_size_limit = 64
    # Each batch size gets static-shape kernels of its own, as radixkv's
    # per-bucket graphs (no dynamic-batch recompilation).
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    # device_map loads the tensors straight onto the GPU (accelerate).
    kw = {"attn_implementation": "sdpa", "local_files_only": True,
          "device_map": "cuda"}
    try:  # transformers 5 names it dtype, 4 torch_dtype
        model = LlamaForCausalLM.from_pretrained(a.model_dir,
                                                 dtype=torch.bfloat16, **kw)
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(a.model_dir,
                                                 torch_dtype=torch.bfloat16,
                                                 **kw)
    model = model.to("cuda").eval()
    load_s = time.perf_counter() - t0
    cfg = model.config
    weights = sum(t.numel() * t.element_size() for t in model.parameters())
    print(f"hf_anchor: transformers {transformers.__version__}, torch "
          f"{torch.__version__}, {torch.cuda.get_device_name()}; "
          f"{a.model_dir}: {cfg.num_hidden_layers} layers, hidden "
          f"{cfg.hidden_size}, vocab {cfg.vocab_size}, {weights / 1e9:.2f} GB "
          f"bf16, load {load_s:.1f} s", flush=True)
    dynamic = bool(a.dynamic_batch)
    step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True,
                         dynamic=dynamic)
    print(f"\nHF transformers + torch.compile (reduce-overhead = CUDA graphs, "
          f"{'dynamic' if dynamic else 'static'} batch), StaticCache, sdpa, "
          f"context {a.context}, median of {a.steps} steps")
    print("| batch | step ms | p10 ms | p90 ms | output tok/s | compile + "
          "warm-up s | cache tensors filled |")
    print("|---|---|---|---|---|---|---|", flush=True)
    rows = []
    for b in [int(x) for x in a.batches.split(",") if x.strip()]:
        try:
            try:
                med, p10, p90, comp, filled = time_batch(
                    model, step, b, a.context, a.steps, cfg.vocab_size)
            except Exception as e:
                if not dynamic:
                    raise
                # A dynamic-batch graph transformers cannot trace: static.
                print(f"(B = {b}: dynamic batch failed, {type(e).__name__}: "
                      f"{str(e)[:200]}; static compile)", flush=True)
                torch._dynamo.reset()
                dynamic = False
                step = torch.compile(model.forward, mode="reduce-overhead",
                                     fullgraph=True, dynamic=False)
                med, p10, p90, comp, filled = time_batch(
                    model, step, b, a.context, a.steps, cfg.vocab_size)
        except Exception as e:  # report and keep the other batch sizes
            print(f"| {b} | failed: {type(e).__name__}: {e} |", flush=True)
            torch.cuda.empty_cache()
            continue
        print(f"| {b} | {med * 1e3:.3f} | {p10 * 1e3:.3f} | {p90 * 1e3:.3f} "
              f"| {b / med:.0f} | {comp:.1f} | {filled} |", flush=True)
        rows.append({"label": a.label, "b": b, "step_ms": med * 1e3,
                     "p10_ms": p10 * 1e3, "p90_ms": p90 * 1e3,
                     "compile_s": comp})
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
