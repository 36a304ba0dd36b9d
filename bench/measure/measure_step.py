#!/usr/bin/env python3
"""Measure the memory of LLM training steps on real PyTorch (CPU), the way /work/shared/oracle/README.md does.

Usage:  /work/rvenv/bin/python bench/measure/measure_step.py CASES.json -o OUT.json [--only ID ...] [--compare TRUTH]
CASES.json is {"cases": [...]} with the keys of the oracle's cases.json (missing keys take the oracle's defaults,
see DEFAULTS). OUT.json maps each case id to {resolved_case, figures, steady, peak, activations, ...} shaped like
the oracle's truth.json (its MemTracker cross-check and live_at_peak breakdown are not repeated). --compare prints
a markdown table of OUT.json against a truth.json. Figure definitions: the oracle README, "What each figure means".

Families: llama, qwen2, mistral and bloom from the oracle's size keys; gpt2, gpt_neox, falcon, gemma and phi3 from a
case key "hf_config" holding the model's HF config.json keys (AutoConfig.for_model, every dropout set to 0).
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
import bisect
import gc
import itertools
import json
import platform
import re
import time
import warnings
from collections import defaultdict
from contextlib import nullcontext

import peft
import torch
import transformers
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

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
CAST_OPS = {"_to_copy", "clone"}


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
    """The transformers config of a case given as "hf_config" (config.json keys of its family)."""
    fam = c["family"]
    zero = HF_FAMILIES.get(fam, {"attention_dropout": 0.0})
    return transformers.AutoConfig.for_model(fam, **{**c["hf_config"], **zero, "use_cache": False})


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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if c["method"] == "lora":
        t = c["lora_targets"]
        t = QV_TARGETS.get(fam, ["q_proj", "v_proj"]) if t == "qv" else t
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model = peft.get_peft_model(
                model,
                peft.LoraConfig(
                    r=c["lora_rank"],
                    lora_alpha=c["lora_alpha"],
                    lora_dropout=c["lora_dropout"],
                    target_modules=t,
                    task_type="CAUSAL_LM",
                ),
            )
    params = [p for p in model.parameters() if p.requires_grad]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=c["lr"], foreach=c["optimizer_impl"] == "foreach")
    else:
        opt = torch.optim.SGD(
            params,
            lr=c["lr"],
            momentum=0.9 if c["optimizer"] == "sgd-momentum" else 0.0,
            foreach=c["optimizer_impl"] == "foreach",
        )
    return model, opt, ids, ids.clone()


def autocast(c):
    return torch.autocast("cpu", dtype=torch.bfloat16) if c["precision"] == "bf16-mixed" else nullcontext()


def storage_bytes(tensors):
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def opt_state(opt):
    by_key, n = defaultdict(int), 0
    for st in opt.state.values():
        for k, v in st.items():
            if torch.is_tensor(v):
                by_key[k] += v.untyped_storage().nbytes()
                n += 1
    return {"bytes": sum(by_key.values()), "by_key": dict(by_key), "num_tensors": n}


def grads_info(model):
    g = [p.grad for p in model.parameters() if p.grad is not None]
    return {"bytes": storage_bytes(g), "num_tensors": len(g), "dtypes": sorted({str(x.dtype)[6:] for x in g})}


# ----------------------------------------------------------------------------------------------- profile pass
def profile_pass(c):
    ga, steps, info = c["grad_accum_steps"], c["steps"], {}
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, opt, ids, labels = build(c)
        for step in range(1, steps + 1):
            for mb in range(1, ga + 1):
                with record_function(f"VP:{step}:forward:{mb}"):
                    with autocast(c):
                        out = model(input_ids=ids, labels=labels)
                        loss = out.loss
                        if ga > 1:
                            loss = loss / ga
                    del out
                with record_function(f"VP:{step}:backward:{mb}"):
                    loss.backward()
                if step == 1 and mb == 1:
                    info["grads"] = grads_info(model)
                if step == steps and mb == 1:
                    info["steady_grads"] = grads_info(model)
                info.setdefault("losses", []).append(loss.item())
                if not (step == 1 and mb == ga):
                    del loss
            with record_function(f"VP:{step}:optimizer:0"):
                opt.step()
            if step == 1:
                del loss
                info["optimizer"] = opt_state(opt)
            with record_function(f"VP:{step}:zero_grad:0"):
                opt.zero_grad(set_to_none=True)
            if step == steps - 1 or steps == 1:
                info["enumerated"] = {
                    "params": storage_bytes(list(model.parameters())),
                    "buffers": storage_bytes(list(model.buffers())),
                    "inputs": storage_bytes([ids, labels]),
                    "optimizer_state": opt_state(opt)["bytes"] if steps > 1 else 0,
                }
        info["params"] = {
            "total": sum(q.numel() for q in model.parameters()),
            "trainable": sum(q.numel() for q in model.parameters() if q.requires_grad),
            "bytes": storage_bytes(list(model.parameters())),
            "buffers_bytes": storage_bytes(list(model.buffers())),
        }
        info["optimizer"]["impl"] = c["optimizer_impl"]
        del model, opt, ids, labels
        gc.collect()
    return prof, info


def analyse(prof, c):
    """Allocation events in time order, and each phase's start/peak/end from the running total."""
    from torch._C._profiler import _EventType

    allocs, ranges, kernels = [], [], set()
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation:
            x = e.extra_fields
            if x.device.type == "cpu":
                allocs.append((e.start_time_ns, x.alloc_size, x.total_allocated, e.parent.name if e.parent else ""))
        elif e.name.startswith("VP:"):
            _, step, ph, mb = e.name.split(":")
            ranges.append((e.start_time_ns, e.end_time_ns, int(step), ph, int(mb) or None))
        elif e.name.startswith("aten::_scaled_dot_product") and not e.name.endswith("_backward"):
            kernels.add(e.name.split("::")[-1])
    allocs.sort(key=lambda a: a[0])
    # The allocator's counter is process-wide and keeps blocks of earlier profiling sessions (freed after they
    # stopped): measure from this session's starting value.
    offset = allocs[0][2] - allocs[0][1]
    allocs = [(t, n, tot - offset, par) for t, n, tot, par in allocs]
    consistent = all(b[2] == a[2] + b[1] for a, b in itertools.pairwise(allocs))
    times = [a[0] for a in allocs]
    phases = []
    for t0, t1, step, ph, mb in sorted(ranges):
        i, j = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
        start = allocs[i - 1][2] if i else 0
        ev = allocs[i:j]
        peak = max([start] + [a[2] for a in ev])
        first = next((k for k, a in enumerate(ev) if a[2] == peak), None)
        phases.append(
            {
                "step": step,
                "phase": ph,
                "micro_batch": mb,
                "start": start,
                "peak": peak,
                "end": ev[-1][2] if ev else start,
                "num_alloc_events": sum(a[1] > 0 for a in ev),
                "_first_peak_t": ev[first][0] if first is not None else t0,
            }
        )
    per_step = []
    for step in range(1, c["steps"] + 1):
        ps = [p for p in phases if p["step"] == step]
        base = ps[0]["start"]
        top = max(p["peak"] for p in ps)
        at = min((p for p in ps if p["peak"] == top), key=lambda p: p["_first_peak_t"])
        per_step.append(
            {
                "step": step,
                "baseline_bytes": base,
                "peak_bytes": top,
                "peak_above_baseline_bytes": top - base,
                "peak_phase": at["phase"],
                "peak_micro_batch": at["micro_batch"],
                "end_bytes": ps[-1]["end"],
                "phases": ps,
            }
        )
    for p in phases:
        del p["_first_peak_t"]
    return per_step, consistent, sorted(kernels), len(allocs), offset, allocs[-1][2]


# ------------------------------------------------------------------------------------------------- saved pass
class CastTracker(TorchDispatchMode):
    """Remembers the storages that casts/clones of parameter storages produce (autocast's weight copies)."""

    def __init__(self, param_ptrs):
        super().__init__()
        self.src, self.copies, self.keep = param_ptrs, {}, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in CAST_OPS and args and torch.is_tensor(args[0]) and torch.is_tensor(out):
            p = args[0].untyped_storage().data_ptr()
            if p in self.src or p in self.copies:
                self.copies[out.untyped_storage().data_ptr()] = self.src.get(p) or self.copies[p]
                self.keep.append(out)
        return out


def saved_pass(c):
    model, _, ids, labels = build(c)
    pptr = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
    bptr = {b.untyped_storage().data_ptr() for b in model.buffers()}
    stack, state, recs, keep, calls = ["<root>"], {"head": False}, {}, [], [0]
    names = {m: n for n, m in model.named_modules()}

    def pre(m, *_):
        n = names[m] or "<root>"
        stack.append(n)
        if n.endswith("lm_head"):
            state["head"] = True

    def post(m, *_):
        stack.pop()

    hooks = [m.register_forward_pre_hook(pre) for m in model.modules()]
    hooks += [m.register_forward_hook(post) for m in model.modules()]
    tracker = CastTracker(pptr)

    def pack(t):
        calls[0] += 1
        s = t.untyped_storage()
        k = s.data_ptr()
        if k not in recs and s.nbytes():
            keep.append(t)
            cat = (
                "param"
                if k in pptr
                else "param_copy"
                if k in tracker.copies
                else "buffer"
                if k in bptr
                else "input"
                if t is ids or k == ids.untyped_storage().data_ptr()
                else "activation"
            )
            recs[k] = {
                "bytes": s.nbytes(),
                "category": cat,
                "dtype": str(t.dtype)[6:],
                "shape": list(t.shape),
                "module": stack[-1],
                "producer": type(t.grad_fn).__name__ if t.grad_fn else None,
                "head": state["head"],
                "src": tracker.copies.get(k),
            }
        return t

    t0 = time.time()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), tracker, autocast(c):
        out = model(input_ids=ids, labels=labels)
        loss = out.loss / c["grad_accum_steps"] if c["grad_accum_steps"] > 1 else out.loss
    for h in hooks:
        h.remove()
    del out, loss
    return summarise(c, recs, calls[0], time.time() - t0, len(set(tracker.copies.values())))


def summarise(c, recs, calls, secs, n_sources):
    act = [r for r in recs.values() if r["category"] in ("activation", "input")]
    excl = {k: sum(r["bytes"] for r in recs.values() if r["category"] == k) for k in ("param", "param_copy", "buffer")}
    by_region, per_layer, sub, by_dtype = defaultdict(int), defaultdict(int), defaultdict(int), defaultdict(int)
    for r in act:
        mod = r["module"]
        m = re.search(r"\.(?:layers|h)\.(\d+)(?:\.([^.]+))?", mod)
        if r["head"]:
            region = "head_and_loss"
        elif m:
            region = "layers"
            per_layer[int(m.group(1))] += r["bytes"]
            sub[m.group(2) or "layer_body"] += r["bytes"]
        elif "embed" in mod or re.search(r"\.(wte|wpe)$", mod):
            region = "embedding"
        elif re.search(r"(\.norm|ln_f|final_layer_norm)$", mod):
            region = "final_norm"
        else:
            region = "model_other"
        r["region"] = region
        by_region[region] += r["bytes"]
        by_dtype[r["dtype"]] += r["bytes"]
    total = sum(r["bytes"] for r in act)
    logits = [
        {k: r[k] for k in ("bytes", "dtype", "module", "producer", "shape")}
        for r in act
        if r["shape"] and r["shape"][-1] == c["vocab_size"]
    ]
    top = sorted(act, key=lambda r: -r["bytes"])[:12]
    return {
        "bytes": total,
        "by_region": dict(by_region),
        "by_dtype": dict(by_dtype),
        "per_layer": [per_layer[i] for i in sorted(per_layer)],
        "layer_sub_total": dict(sub),
        "excluded": excl,
        "param_copy_sources": n_sources,
        "head_and_loss_bytes": by_region.get("head_and_loss", 0),
        "bytes_excluding_head_and_loss": total - by_region.get("head_and_loss", 0),
        "input_bytes": sum(r["bytes"] for r in act if r["category"] == "input"),
        "lora_module_bytes": sum(r["bytes"] for r in act if ".lora_" in r["module"]),
        "logits_like": logits,
        "logits_like_bytes": sum(x["bytes"] for x in logits),
        "num_distinct_storages": len(act),
        "num_pack_calls": calls,
        "seconds": round(secs, 2),
        "top": [{k: v for k, v in r.items() if k not in ("head", "src")} for r in top],
    }


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
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "python": platform.python_version(),
        },
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
