#!/usr/bin/env python3
"""Measure the memory of LLM training steps on real PyTorch (CPU), the way ../shared/oracle/README.md does.

Usage, from the repository root (torch, transformers, peft installed):
  python bench/measure/measure_step.py CASES.json -o OUT.json [--only ID ...] [--compare TRUTH]
CASES.json is {"cases": [...]} with the keys of the oracle's cases.json (missing keys take the oracle's defaults,
see DEFAULTS). OUT.json maps each case id to {resolved_case, figures, steady, peak, activations, ...} shaped like
the oracle's truth.json (its MemTracker cross-check and live_at_peak breakdown are not repeated). --compare prints
a markdown table of OUT.json against a truth.json. Figure definitions: the oracle README, "What each figure means".

Families: llama, qwen2, mistral and bloom from the oracle's size keys; gpt2, gpt_neox, falcon, gemma and phi3 from a
case key "hf_config" holding the model's HF config.json keys (AutoConfig.for_model, every dropout set to 0 unless
the case's hf_config sets it).
Model: AutoModelForCausalLM.from_config (random weights, torch.manual_seed(seed)), attn_implementation eager|sdpa,
dropouts 0, use_cache=False (no KV cache in training: with HF's default the DynamicCache keeps a copy of every
layer's post-RoPE keys alive until the output is dropped, which the oracle's bf16-mixed forward peaks exclude);
batch = randint ids [b, s] and labels = a clone, drawn right after the build; then .to(bfloat16) for bf16,
gradient_checkpointing_enable(use_reentrant=False) (which also makes the embedding output require grad),
peft.get_peft_model (adapters stay fp32 on a bf16 base), then AdamW(foreach per optimizer_impl) or SGD.
Each case runs two passes:

* Profile pass. torch.profiler(profile_memory=True) is started BEFORE the model is built, so the CPU allocator's
  running total (`total_allocated`, reported by every alloc/free event) counts every live tensor. That counter is
  process-wide and keeps blocks of earlier sessions that were freed after they stopped, so totals are taken
  relative to its value when this session starts (allocator_counter_offset). The model is trained for `steps`
  optimizer steps of `grad_accum_steps` micro-batches: forward with labels=input_ids (under
  torch.autocast("cpu", bfloat16) for bf16-mixed), loss = out.loss (/grad_accum_steps when > 1), `del out`;
  loss.backward(); the loss is dropped after its backward, except the first step's last one, which lives until
  optimizer.step() returned; then optimizer.step() and optimizer.zero_grad(set_to_none=True). Every phase runs in
  a record_function range; an allocation event belongs to the phase whose range holds its timestamp. A phase's
  start/end are the running total just before/at the end of its range, its peak the maximum in between.
  First step -> baseline_bytes, peak_bytes, peak_phase, forward_retained_bytes (end of the first micro-batch's
  forward minus baseline), end_of_step_bytes (after optimizer.step(), loss dropped). Last step ("steady", from its
  first forward to the end of its zero_grad) -> steady_baseline_bytes, steady_peak_bytes, steady_peak_phase (phase
  of the first event reaching the peak), steady_peak_micro_batch. grad_bytes = distinct .grad storages after the
  first backward; optimizer_state_bytes = every tensor in optimizer.state after the first step().
* Saved pass (fresh model, same seed): one forward + loss under torch.autograd.graph.saved_tensors_hooks. Saved
  tensors are de-duplicated by untyped storage (a view counts its whole storage) and classified: `param`
  (storage of a parameter), `param_copy` (storage produced by a cast/clone of a parameter, e.g. autocast's bf16
  weight copies; seen with a TorchDispatchMode), `buffer`, else activation (input ids, labels, RoPE cos/sin and
  the fp32 log-softmax included). Region/module = innermost module running when the storage is first saved;
  everything from the lm_head's start on is head_and_loss. logits_like = saved activations whose last dim is V.
"""

import argparse
import gc
import json
import time

import peft  # noqa: F401 - imported before any profiler session: its import's tensors are no case's
import torch
import transformers

# The method itself (profiler session and analysis, the forward and its loss, saved-tensor hooks, storage counting,
# checkpointing, LoRA, optimizer, versions) is the package's, shared with `vramplan measure`; this script keeps the
# oracle's cases, their build order (built directly on the CPU: the random weights, and so the losses, of the committed
# files) and the oracle's truth.json shape.
from vramplan.measure.build import add_lora, enable_checkpointing, make_optimizer
from vramplan.measure.cpu import CpuProfiler
from vramplan.measure.forward import autocast_to, forward_loss
from vramplan.measure.run import versions
from vramplan.measure.saved import saved_pass as saved_tensors
from vramplan.measure.tensors import grads_info, optimizer_state, params_info, storage_bytes

DEFAULTS = {
    "num_kv_heads": None,
    "tie_embeddings": None,
    "intermediate_size": None,
    "precision": "fp32",
    "optimizer": "adamw",
    "optimizer_impl": "foreach",
    "gradient_checkpointing": False,
    "attention": "sdpa",
    "method": "full",
    "lora_rank": 8,
    "lora_alpha": 16,
    "lora_targets": "qv",
    "lora_dropout": 0.0,
    "steps": 2,
    "grad_accum_steps": 1,
    "lr": 1e-3,
    "seed": 0,
}


# Families built from an HF config dict (case key "hf_config": config.json keys), with every dropout off.
HF_FAMILIES = {
    "gpt2": {"embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0},
    "gpt_neox": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "falcon": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "gemma": {"attention_dropout": 0.0},
    "phi3": {"attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
}
# LoRA "qv": the attention's query/value projection(s) of each family (fused families: the fused one)
QV_TARGETS = {
    "bloom": ["query_key_value"],
    "gpt2": ["c_attn"],
    "gpt_neox": ["query_key_value"],
    "falcon": ["query_key_value"],
    "phi3": ["qkv_proj"],
}


def hf_config(c):
    """The transformers config of a case given as "hf_config" (config.json keys of its family); every dropout at 0
    unless the case's hf_config sets it (bench/measure/dropout_cases.json)."""
    fam = c["family"]
    zero = HF_FAMILIES.get(fam, {"attention_dropout": 0.0})
    return transformers.AutoConfig.for_model(fam, **{**zero, **c["hf_config"], "use_cache": False})


def resolve(case):
    c = {**DEFAULTS, **case}
    if "hf_config" in c:
        cfg = hf_config(c)
        c["vocab_size"] = cfg.vocab_size
        c["tie_embeddings"] = cfg.tie_word_embeddings
        return c
    bloom = c["family"] == "bloom"
    c["tie_embeddings"] = bloom if c["tie_embeddings"] is None else c["tie_embeddings"]
    c["num_kv_heads"] = c["num_kv_heads"] or c["num_heads"]
    c["intermediate_size"] = 4 * c["hidden_size"] if bloom else c["intermediate_size"]
    if bloom:
        c["attention"] = "eager"
    return c


def build(c):
    """Model (random weights from seed), optimizer and batch, in the order the oracle describes."""
    torch.manual_seed(c["seed"])
    fam, tie = c["family"], c["tie_embeddings"]
    common = dict(vocab_size=c["vocab_size"], tie_word_embeddings=tie, use_cache=False)
    if "hf_config" in c:
        cfg = hf_config(c)
    elif fam == "bloom":
        cfg = transformers.BloomConfig(
            n_embed=c["hidden_size"],
            n_layer=c["num_layers"],
            n_head=c["num_heads"],
            hidden_dropout=0.0,
            attention_dropout=0.0,
            **common,
        )
    else:
        cls = {
            "llama": transformers.LlamaConfig,
            "qwen2": transformers.Qwen2Config,
            "mistral": transformers.MistralConfig,
        }[fam]
        extra = {"sliding_window": None} if fam == "mistral" else {}
        cfg = cls(
            hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"],
            num_hidden_layers=c["num_layers"],
            num_attention_heads=c["num_heads"],
            num_key_value_heads=c["num_kv_heads"],
            attention_dropout=0.0,
            **extra,
            **common,
        )
    extra = {"experts_implementation": c["experts_implementation"]} if c.get("experts_implementation") else {}
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"], **extra)
    # drawn before LoRA's random init, so that a LoRA case trains on the same batch as its base case
    ids = torch.randint(0, c["vocab_size"], (c["micro_batch_size"], c["seq_len"]), dtype=torch.int64)
    if c["precision"] == "bf16":
        model.to(torch.bfloat16)
    model.train()
    if c["gradient_checkpointing"]:
        enable_checkpointing(model, reentrant=False)
    if c["method"] == "lora":
        t = c["lora_targets"]
        t = QV_TARGETS.get(fam, ["q_proj", "v_proj"]) if t == "qv" else t
        model = add_lora(model, c["lora_rank"], c["lora_alpha"], c["lora_dropout"], t)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, c["optimizer"], c["optimizer_impl"], c["lr"])
    return model, opt, ids, ids.clone()


def autocast(c):
    return autocast_to("bf16" if c["precision"] == "bf16-mixed" else None, "cpu")


# ----------------------------------------------------------------------------------------------- profile pass
def profile_pass(c):
    ga, steps, info = c["grad_accum_steps"], c["steps"], {}
    gc.collect()
    prof = CpuProfiler()
    prof.start()
    try:
        model, opt, ids, labels = build(c)
        for step in range(1, steps + 1):
            for mb in range(1, ga + 1):
                with prof.phase(step, "forward", mb), autocast(c):
                    loss = forward_loss(model, ids, labels, ga)
                with prof.phase(step, "backward", mb):
                    loss.backward()
                if step == 1 and mb == 1:
                    info["grads"] = grads_info(model)
                if step == steps and mb == 1:
                    info["steady_grads"] = grads_info(model)
                info.setdefault("losses", []).append(loss.item())
                if not (step == 1 and mb == ga):
                    del loss
            with prof.phase(step, "optimizer", 0):
                opt.step()
            if step == 1:
                del loss
                info["optimizer"] = optimizer_state(opt)
            with prof.phase(step, "zero_grad", 0):
                opt.zero_grad(set_to_none=True)
            if step == steps - 1 or steps == 1:
                info["enumerated"] = {
                    "params": storage_bytes(list(model.parameters())),
                    "buffers": storage_bytes(list(model.buffers())),
                    "inputs": storage_bytes([ids, labels]),
                    "optimizer_state": optimizer_state(opt)["bytes"] if steps > 1 else 0,
                }
        info["params"] = params_info(model)
        info["optimizer"]["impl"] = c["optimizer_impl"]
        del model, opt, ids, labels
        gc.collect()
    finally:
        prof.stop()
    return prof, info


def analyse(prof, c):
    """Each step's baseline/peak/end and its phases (`vramplan.measure.cpu.analyse`), as the oracle's dicts."""
    fig = prof.figures()
    per_step = [
        {
            "step": s.step,
            "baseline_bytes": s.baseline_bytes,
            "peak_bytes": s.peak_bytes,
            "peak_above_baseline_bytes": s.peak_bytes - s.baseline_bytes,
            "peak_phase": s.peak_phase,
            "peak_micro_batch": s.peak_micro_batch,
            "end_bytes": s.end_bytes,
            "phases": [{"step": s.step, **p.to_json()} for p in s.phases],
        }
        for s in fig.steps
    ]
    kernels = list(fig.attention_kernels)
    return per_step, fig.consistent, kernels, fig.num_alloc_events, fig.counter_offset, fig.session_end_bytes


# ------------------------------------------------------------------------------------------------- saved pass
def saved_pass(c):
    """A fresh model (same seed): one forward + loss under saved-tensor hooks (`vramplan.measure.saved`)."""
    model, _, ids, labels = build(c)
    return saved_tensors(model, ids, labels, autocast(c), c["grad_accum_steps"], c["vocab_size"])


# ---------------------------------------------------------------------------------------------------- a case
def measure(case):
    c = resolve(case)
    t0 = time.time()
    prof, info = profile_pass(c)
    per_step, consistent, kernels, n_events, offset, final = analyse(prof, c)
    del prof
    acts = saved_pass(c)
    first, last = per_step[0], per_step[-1]
    fwd1 = next(p for p in first["phases"] if p["phase"] == "forward")
    zg1 = next(p for p in first["phases"] if p["phase"] == "zero_grad")
    steady_base_enum = sum(info["enumerated"].values())
    ph = lambda s: [{k: v for k, v in p.items() if k != "step"} for p in s["phases"]]  # noqa: E731
    figures = {
        "params_total": info["params"]["total"],
        "params_trainable": info["params"]["trainable"],
        "param_bytes": info["params"]["bytes"],
        "grad_bytes": info["grads"]["bytes"],
        "optimizer_state_bytes": info["optimizer"]["bytes"],
        "activation_bytes": acts["bytes"],
        "activation_bytes_excl_head_and_loss": acts["bytes_excluding_head_and_loss"],
        "head_and_loss_bytes": acts["head_and_loss_bytes"],
        "logits_like_bytes": acts["logits_like_bytes"],
        "saved_weight_copy_bytes": acts["excluded"]["param_copy"],
        "baseline_bytes": first["baseline_bytes"],
        "peak_bytes": first["peak_bytes"],
        "peak_above_baseline_bytes": first["peak_above_baseline_bytes"],
        "peak_phase": first["peak_phase"],
        "forward_retained_bytes": fwd1["end"] - fwd1["start"],
        "end_of_step_bytes": zg1["start"],
        "steady_baseline_bytes": last["baseline_bytes"],
        "steady_peak_bytes": last["peak_bytes"],
        "steady_peak_above_baseline_bytes": last["peak_above_baseline_bytes"],
        "steady_peak_phase": last["peak_phase"],
        "steady_peak_micro_batch": last["peak_micro_batch"],
    }
    return {
        "id": c["id"],
        "resolved_case": c,
        "figures": figures,
        "loss": info["losses"][0],
        "activations": acts,
        "params": info["params"],
        "grads": info["grads"],
        "optimizer": info["optimizer"],
        "peak": {
            "method": "torch.profiler(profile_memory=True): allocator total_allocated per CPU alloc/free event",
            "phases": ph(first),
            "running_sum_consistent": consistent,
            "num_alloc_events": n_events,
            "allocator_counter_offset": offset,
            "session_end_bytes": final,
        },
        "steady": {
            "measured_step": c["steps"],
            "steps": c["steps"],
            "grad_accum_steps": c["grad_accum_steps"],
            "baseline_bytes": last["baseline_bytes"],
            "peak_bytes": last["peak_bytes"],
            "peak_above_baseline_bytes": last["peak_above_baseline_bytes"],
            "peak_phase": last["peak_phase"],
            "peak_micro_batch": last["peak_micro_batch"],
            "end_bytes": last["end_bytes"],
            "end_minus_baseline_bytes": last["end_bytes"] - last["baseline_bytes"],
            "baseline_enumerated": info["enumerated"],
            "baseline_enumerated_total": steady_base_enum,
            "grads": info["steady_grads"],
            "phases": ph(last),
            "losses": info["losses"],
            "per_step": [{k: v for k, v in s.items() if k != "phases"} for s in per_step],
        },
        "consistency": {
            "steady_baseline_allocator_vs_enumerated": [last["baseline_bytes"], steady_base_enum],
            "steady_end_vs_baseline": [last["end_bytes"], last["baseline_bytes"]],
        },
        "attention_kernels_seen": kernels,
        "seconds": round(time.time() - t0, 2),
        "versions": versions(),
    }


COMPARED = [
    "params_total",
    "params_trainable",
    "param_bytes",
    "grad_bytes",
    "optimizer_state_bytes",
    "activation_bytes",
    "logits_like_bytes",
    "saved_weight_copy_bytes",
    "steady_baseline_bytes",
    "steady_peak_bytes",
    "steady_peak_phase",
    "steady_peak_micro_batch",
]


def compare(results, truth_path):
    """Markdown table: a cell shows the value when oracle and harness agree, else `oracle -> harness`."""
    with open(truth_path) as fh:
        truth = json.load(fh)
    rows, bad = [], 0
    for cid, r in results.items():
        if cid not in truth:
            continue
        o, cells = truth[cid], []
        for k in COMPARED:
            a, b = o["figures"][k], r["figures"][k]
            bad += a != b
            txt = f"{a:,}" if isinstance(a, int) and not isinstance(a, bool) else "null" if a is None else str(a)
            cells.append(txt if a == b else f"**{a} -> {b}**")
        key = ("phase", "micro_batch", "start", "peak", "end", "num_alloc_events")
        same = [{k: p[k] for k in key} for p in o["steady"]["phases"]] == [
            {k: p[k] for k in key} for p in r["steady"]["phases"]
        ]
        bad += not same
        cells.append(f"{'equal' if same else '**differ**'} ({len(o['steady']['phases'])})")
        rows.append(f"| {cid} | " + " | ".join(cells) + " |")
    head = "| case | " + " | ".join(COMPARED) + " | steady phases |"
    print("\n".join([head, "|" + "---|" * (len(COMPARED) + 2), *rows]))
    print(f"\n{len(rows)} cases compared, {bad} differing cells")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    ap.add_argument("--compare", metavar="TRUTH", help="print a markdown table of OUT.json vs this truth.json")
    args = ap.parse_args()
    with open(args.cases) as fh:
        cases = json.load(fh)["cases"]
    if args.only:
        cases = [x for x in cases if x["id"] in args.only]
    results = {}
    for case in cases:
        results[case["id"]] = r = measure(case)
        f = r["figures"]
        print(
            f"{case['id']:32s} act={f['activation_bytes']:>11,} steady_peak={f['steady_peak_bytes']:>12,} "
            f"({f['steady_peak_phase']}) {r['seconds']}s",
            flush=True,
        )
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    if args.compare:
        compare(results, args.compare)


if __name__ == "__main__":
    main()
