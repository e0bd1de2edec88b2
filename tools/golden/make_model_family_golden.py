#!/usr/bin/env python3
"""Golden data for the model families beyond LLaMA: Qwen3 and sliding windows.

Hugging Face transformers is the reference, run in float64 as
shared/golden/make_golden.py runs it (checkpoint loaded in float32, cast to
float64, eager attention; transformers' RMSNorm keeps its float32 cast).

Three tiny random checkpoints, each written to OUT/<name>/:
  qwen3-tiny          Qwen3ForCausalLM: q_norm/k_norm, head_dim 32 with
                      hidden 64 (4 heads: q is wider than the hidden state),
                      no bias, full attention
  mistral-window64    MistralForCausalLM, sliding_window 64 on every layer,
                      head_dim 64 (2 heads, 1 kv head)
  qwen2-window100     Qwen2ForCausalLM, use_sliding_window, sliding_window
                      100, max_window_layers 1 of 3 layers: layer 0 full,
                      layers 1 and 2 windowed (transformers' layer_types);
                      head_dim 64

Files per checkpoint:
  config.json, model.safetensors   save_pretrained output (bf16 weights)
  logits.f32     float32 little-endian [len(logit_positions), vocab]: the
                 float64 logits of the 1,500-token sequence at the positions
                 listed in golden.json (every 7th position and the last 64)
  golden.json    sequence ids, logit_positions, argmax and top-2 margin of
                 EVERY position, and a greedy generation: the first 1,000
                 tokens of the sequence as prompt, 32 tokens by argmax
                 (full no-cache forwards; the KV-cache run is recorded too)

Weights: torch.manual_seed(seed), every parameter in named_parameters()
order re-initialized as make_golden.py does (norm weights 1 + N(0, 0.1),
everything else N(0, 0.05)), saved in bfloat16 (the float64 reference
upcasts the stored bf16 values exactly).

Sanity checks (the script exits 1 when one fails): the window changes the
logits (against the same weights with full attention), and in the Mistral
checkpoint a token more than num_layers * (W - 1) positions back does not
change them (transformers applied the window).

Usage (needs torch and transformers; GPU optional, no network):
  python3 tools/golden/make_model_family_golden.py \
      --out worker/testdata/model_families
"""
import argparse
import array
import json
import os
import sys

SEQ_LEN = 1500
PROMPT_LEN = 1000
NEW_TOKENS = 32
VOCAB = 384
STRIDE = 7
TAIL = 64


def specs():
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, hidden_act="silu",
                  bos_token_id=1, eos_token_id=2, pad_token_id=None)
    return [
        dict(name="qwen3-tiny", cls="Qwen3", seed=11,
             cfg=dict(common, num_hidden_layers=2, head_dim=32,
                      attention_bias=False, use_sliding_window=False,
                      max_window_layers=2),
             rope=dict(rope_type="default", rope_theta=1000000.0)),
        # head_dim 64: the GPU backend's tensor-core attention path.
        dict(name="mistral-window64", cls="Mistral", seed=12,
             cfg=dict(common, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=64, sliding_window=64),
             rope=dict(rope_type="default", rope_theta=10000.0)),
        dict(name="qwen2-window100", cls="Qwen2", seed=13,
             cfg=dict(common, num_hidden_layers=3, num_attention_heads=1,
                      num_key_value_heads=1, use_sliding_window=True,
                      sliding_window=100, max_window_layers=1),
             rope=dict(rope_type="default", rope_theta=1000000.0)),
    ]


def build_config(transformers, spec, **override):
    cls = getattr(transformers, spec["cls"] + "Config")
    cfg = dict(spec["cfg"], **override)
    try:  # transformers >= 5
        return cls(**cfg, rope_parameters=dict(spec["rope"]))
    except TypeError:  # transformers 4
        return cls(**cfg, rope_theta=spec["rope"]["rope_theta"])


def reinit_(torch, model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)
                p.add_(1.0)
            else:
                p.normal_(0.0, 0.05)


def load64(transformers, torch, path, device, **config_override):
    kwargs = dict(attn_implementation="eager")
    if config_override:
        cfg = transformers.AutoConfig.from_pretrained(path)
        for k, v in config_override.items():
            setattr(cfg, k, v)
        kwargs["config"] = cfg
    try:
        m = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, **kwargs)
    except TypeError:
        m = transformers.AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, **kwargs)
    return m.to(torch.float64).to(device).eval()


def logits_of(torch, model, ids, device):
    x = torch.tensor([ids], dtype=torch.long, device=device)
    return model(input_ids=x, use_cache=False).logits[0].double().cpu()


def top2_margins(torch, lg):
    v = torch.topk(lg, 2, dim=-1).values
    return (v[:, 0] - v[:, 1]).tolist()


def greedy(torch, model, prompt, device):
    """Greedy by full forwards (no cache: the definition) and with the cache."""
    ids, margins = list(prompt), []
    for _ in range(NEW_TOKENS):
        lg = logits_of(torch, model, ids, device)[-1]
        margins.append(top2_margins(torch, lg[None])[0])
        ids.append(int(lg.argmax()))
    generated = ids[len(prompt):]
    x = torch.tensor([prompt], dtype=torch.long, device=device)
    g = model.generate(input_ids=x, attention_mask=torch.ones_like(x),
                       do_sample=False, max_new_tokens=NEW_TOKENS,
                       min_new_tokens=NEW_TOKENS, use_cache=True)
    cached = [int(t) for t in g[0, len(prompt):].tolist()]
    return generated, margins, cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    torch.set_grad_enabled(False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator().manual_seed(2026)
    seq = torch.randint(3, VOCAB, (SEQ_LEN,), generator=gen).tolist()
    positions = sorted(set(range(0, SEQ_LEN, STRIDE)) |
                       set(range(SEQ_LEN - TAIL, SEQ_LEN)))
    ok = True
    for spec in specs():
        name = spec["name"]
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(spec["seed"])
        model_cls = getattr(transformers, spec["cls"] + "ForCausalLM")
        model = model_cls(build_config(transformers, spec)).to(torch.float32)
        reinit_(torch, model)
        model.to(torch.bfloat16).save_pretrained(d)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(d, extra)):
                os.remove(os.path.join(d, extra))
        m64 = load64(transformers, torch, d, device)
        lg = logits_of(torch, m64, seq, device)
        assert tuple(lg.shape) == (SEQ_LEN, VOCAB), lg.shape
        rows = array.array("f", lg[positions].to(torch.float32).flatten()
                           .tolist())
        if sys.byteorder != "little":
            rows.byteswap()
        with open(os.path.join(d, "logits.f32"), "wb") as f:
            f.write(rows.tobytes())
        margins = top2_margins(torch, lg)
        checks = {}
        if "sliding_window" in spec["cfg"]:
            # Same weights, full attention: the window must matter.
            full = load64(transformers, torch, d, device, sliding_window=None,
                          use_sliding_window=False,
                          layer_types=["full_attention"] *
                          spec["cfg"]["num_hidden_layers"])
            delta = (logits_of(torch, full, seq, device) - lg).abs()
            diff = float(delta[SEQ_LEN - 100:].max())
            checks["window_changes_logits_max_diff_last_100"] = diff
            ok &= diff > 1e-3
            # Positions inside the first window see every earlier token:
            # there the windowed and the full model agree.
            first = float(delta[:spec["cfg"]["sliding_window"]].max())
            checks["first_window_equals_full_attention_max_diff"] = first
            ok &= first <= 1e-12
            del full
        if spec["cls"] == "Mistral":
            w = spec["cfg"]["sliding_window"]
            reach = spec["cfg"]["num_hidden_layers"] * (w - 1)
            other = list(seq)
            other[0] = 3 if seq[0] != 3 else 4
            lo = logits_of(torch, m64, other, device)
            diff = float((lo - lg).abs()[reach + 1:].max())
            checks["token_0_changes_positions_past_reach_max_diff"] = diff
            ok &= diff <= 1e-12
        generated, gen_margins, cached = greedy(
            torch, m64, seq[:PROMPT_LEN], device)
        checks["kv_cache_generation_matches"] = cached == generated
        with open(os.path.join(d, "config.json")) as f:
            config_json = json.load(f)
        golden = dict(
            description=("transformers float64 (eager) logits of one "
                         "random sequence; see "
                         "tools/golden/make_model_family_golden.py"),
            versions=dict(torch=torch.__version__,
                          transformers=transformers.__version__,
                          python=sys.version.split()[0], device=device),
            seed=spec["seed"], vocab_size=VOCAB,
            sequence_rule="torch.Generator().manual_seed(2026); "
                          f"torch.randint(3, {VOCAB}, ({SEQ_LEN},))",
            sequence=seq,
            logits_file="logits.f32",
            logits_layout="float32 little-endian [position index][vocab]",
            logit_positions=positions,
            argmax=[int(a) for a in lg.argmax(-1).tolist()],
            top2_margin=margins,
            generation=dict(prompt_length=PROMPT_LEN,
                            rule="prompt = sequence[:prompt_length]; greedy "
                                 "argmax by full float64 forwards",
                            generated_ids=generated,
                            step_top2_margins=gen_margins,
                            hf_generate_kv_cache_ids=cached),
            checks=checks,
            config_layer_types=config_json.get("layer_types"),
        )
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        print(name, "min top-2 margin %.3g" % min(margins), checks,
              sorted(os.listdir(d)), flush=True)
        del m64
    print("ALL OK" if ok else "A SANITY CHECK FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
