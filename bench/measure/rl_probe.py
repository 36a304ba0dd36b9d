"""Instrumentation for measure_rl.py: record_function ranges hooked into TRL's trainers, the allocation events'
analysis (innermost range wins), tensor enumeration and saved-tensor hooks. The tensor helpers (storage de-duplication,
optimizer states, the cast tracker) are the package's own, `vramplan.measure.tensors` and `vramplan.measure.saved`,
so that this harness counts bytes as `vramplan measure` does."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.profiler import record_function

from vramplan.measure.saved import CastTracker
from vramplan.measure.tensors import grads_info, optimizer_state, storage_bytes


def summarise(recs, vocab_size):
    """Saved activations (inputs included; parameters, their cast copies and buffers excluded) by region."""
    act = [r for r in recs.values() if r["category"] in ("activation", "input")]
    excl = {k: sum(r["bytes"] for r in recs.values() if r["category"] == k) for k in ("param", "param_copy", "buffer")}
    by_region, by_dtype, per_layer = defaultdict(int), defaultdict(int), defaultdict(int)
    for r in act:
        m = re.search(r"\.layers\.(\d+)", r["module"])
        region = (
            "head_and_loss"
            if r["head"]
            else "layers"
            if m
            else "embedding"
            if "embed" in r["module"]
            else ("final_norm" if r["module"].endswith(".norm") else "model_other")
        )
        if m and not r["head"]:
            per_layer[int(m.group(1))] += r["bytes"]
        r["region"] = region
        by_region[region] += r["bytes"]
        by_dtype[r["dtype"]] += r["bytes"]
    # vocab-sized tensors saved by the head (an MLP as wide as a tiny vocabulary is not a logit)
    logits = [r for r in act if r["head"] and r["shape"] and r["shape"][-1] == vocab_size]
    top = sorted(act, key=lambda r: -r["bytes"])[:12]
    return {
        "bytes": sum(r["bytes"] for r in act),
        "by_region": dict(by_region),
        "by_dtype": dict(by_dtype),
        "per_layer": [per_layer[i] for i in sorted(per_layer)],
        "excluded": excl,
        "head_and_loss_bytes": by_region.get("head_and_loss", 0),
        "input_bytes": sum(r["bytes"] for r in act if r["category"] == "input"),
        "logits_like_bytes": sum(r["bytes"] for r in logits),
        "num_distinct_storages": len(act),
        "top": [{k: v for k, v in r.items() if k not in ("head", "src")} for r in top],
    }


class Ranges:
    """record_function ranges named VP:<step>:<phase>, opened and closed by the trainer's own hooks."""

    def __init__(self, trainer):
        self.t, self.open, self.in_generation, self.shapes = trainer, {}, False, defaultdict(list)

    def step(self):
        return self.t.state.global_step + 1

    def enter(self, phase):
        r = record_function(f"VP:{self.step()}:{phase}")
        r.__enter__()
        self.open.setdefault(phase, []).append(r)

    def exit(self, phase):
        self.open[phase].pop().__exit__(None, None, None)

    @contextmanager
    def span(self, phase):
        self.enter(phase)
        try:
            yield
        finally:
            self.exit(phase)

    def wrap(self, obj, name, phase, pre=None):
        fn = getattr(obj, name)

        def wrapped(*a, **kw):
            if pre:
                pre(*a, **kw)
            with self.span(phase):
                return fn(*a, **kw)

        setattr(obj, name, wrapped)

    def scoring_hooks(self, module):
        """A forward of the policy or the reference under no_grad, outside generation: a scoring forward."""

        def pre(m, *_):
            m._vp_scoring = not torch.is_grad_enabled() and not self.in_generation
            if m._vp_scoring:
                self.enter("scoring")

        def post(m, *_):
            if m._vp_scoring:
                self.exit("scoring")

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)


def instrument(trainer, c):
    """Wrap the trainer's methods in record_function ranges (see the module docstring)."""
    import transformers

    r = Ranges(trainer)
    step_open = [False]

    def step_pre(model, inputs, *_):
        if not step_open[0]:
            r.enter("step")
            step_open[0] = True
        if c["objective"] == "dpo":
            r.shapes["input_ids"].append(list(inputs["input_ids"].shape))

    def loss_pre(model, inputs, *_, **__):
        if c["objective"] == "grpo":
            r.shapes["completion_ids"].append(list(inputs["completion_ids"].shape))
            r.shapes["prompt_ids"].append(list(inputs["prompt_ids"].shape))
        if c["objective"] == "dpo":
            r.shapes["loss_input_ids"].append(list(inputs["input_ids"].shape))

    r.wrap(trainer, "training_step", "other", pre=step_pre)
    r.wrap(trainer, "compute_loss", "forward", pre=loss_pre)
    r.wrap(trainer.accelerator, "backward", "backward")
    if c["objective"] == "grpo":
        gen = trainer._generate_single_turn

        def generate(*a, **kw):
            r.in_generation = True
            try:
                with r.span("generation"):
                    return gen(*a, **kw)
            finally:
                r.in_generation = False

        trainer._generate_single_turn = generate
        r.wrap(trainer, "_calculate_rewards", "reward")
    else:
        r.wrap(trainer, "compute_ref_log_probs", "precompute")
    r.scoring_hooks(trainer.model)
    if trainer.ref_model is not None:
        r.scoring_hooks(trainer.ref_model)

    class Phases(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, *_, **__):
            r.enter("optimizer")

        def on_optimizer_step(self, *_, **__):
            r.exit("optimizer")
            r.enter("after")

        def on_step_end(self, *_, **__):
            r.exit("after")
            r.exit("step")
            step_open[0] = False

    trainer.add_callback(Phases())
    return r


def enumerate_baseline(trainer):
    """What is allocated before a step: the policy's and the reference's parameters and buffers, the optimizer's
    states, and any gradient left (none after zero_grad(set_to_none=True))."""
    models = [trainer.model] + ([trainer.ref_model] if trainer.ref_model is not None else [])
    params = [p for m in models for p in m.parameters()]
    return {
        "params": storage_bytes(params),
        "buffers": storage_bytes([b for m in models for b in m.buffers()]),
        "optimizer_state": optimizer_state(trainer.optimizer)["bytes"],
        "grads": storage_bytes([p.grad for p in params if p.grad is not None]),
    }


class Probe:
    """Grads after the first backward, optimizer states after the first step (read inside the run)."""

    def __init__(self, trainer):
        self.info = {}
        back = trainer.accelerator.backward

        def backward(*a, **kw):
            out = back(*a, **kw)
            self.info.setdefault("grads", grads_info(trainer.model))
            return out

        trainer.accelerator.backward = backward
        probe = self

        import transformers

        class After(transformers.TrainerCallback):
            def on_step_begin(self, args, state, *_, **__):
                probe.info.setdefault("baseline_enumerated", []).append(enumerate_baseline(trainer))

            def on_optimizer_step(self, *_, **__):
                probe.info.setdefault("optimizer", optimizer_state(trainer.optimizer))

        trainer.add_callback(After())


def analyse(prof):
    """Allocation events in time order, each given the innermost VP range holding it."""
    from torch._C._profiler import _EventType

    allocs, ranges = [], []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation:
            x = e.extra_fields
            if x.device.type == "cpu":
                allocs.append((e.start_time_ns, x.alloc_size, x.total_allocated))
        elif e.name.startswith("VP:"):
            _, step, ph = e.name.split(":")
            ranges.append((e.start_time_ns, e.end_time_ns, int(step), ph))
    allocs.sort()
    offset = allocs[0][2] - allocs[0][1]
    allocs = [(t, n, tot - offset) for t, n, tot in allocs]
    times = [a[0] for a in allocs]
    owner = [None] * len(allocs)
    for t0, t1, step, ph in sorted(ranges, key=lambda x: x[1] - x[0], reverse=True):  # outer first, inner overwrite
        for i in range(bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)):
            owner[i] = (step, ph)
    return allocs, ranges, owner


def step_figures(allocs, ranges, owner, step):
    """Baseline, peak and phases of one optimizer step."""
    times = [a[0] for a in allocs]
    (t0, t1) = next((a, b) for a, b, s, ph in ranges if s == step and ph == "step")
    i, j = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
    base = allocs[i - 1][2] if i else 0
    phases, top, at = {}, base, None
    for k in range(i, j):
        ph = owner[k][1] if owner[k] and owner[k][0] == step else "other"
        ph = "other" if ph == "step" else ph
        tot = allocs[k][2]
        p = phases.setdefault(ph, {"start": allocs[k - 1][2] if k else 0, "peak": tot, "end": tot, "events": 0})
        p["peak"], p["end"], p["events"] = max(p["peak"], tot), tot, p["events"] + 1
        if tot > top:
            top, at = tot, ph
    return {
        "baseline_bytes": base,
        "peak_bytes": top,
        "peak_above_baseline_bytes": top - base,
        "peak_phase": at,
        "end_bytes": allocs[j - 1][2],
        "phases": phases,
    }


def precompute_figures(allocs, ranges, owner):
    ks = [k for k, o in enumerate(owner) if o and o[1] == "precompute"]
    if not ks:
        return None
    return {"start": allocs[ks[0] - 1][2], "peak": max(allocs[k][2] for k in ks)}


class SavedTensors:
    """Saved-tensor hooks over one forward: storages de-duplicated and classified as measure_step.saved_pass does;
    the innermost module running when a storage is first saved names its region. TRL's fused LM head never calls
    the lm_head module, so head_and_loss is everything saved after the backbone's final norm returned (under grad:
    the policy's forward, not the no-grad reference forward that DPO runs inside compute_loss)."""

    def __init__(self, models, inputs):
        self.pptr = {p.untyped_storage().data_ptr(): n for m in models for n, p in m.named_parameters()}
        self.bptr = {b.untyped_storage().data_ptr() for m in models for b in m.buffers()}
        self.ids = {
            v.untyped_storage().data_ptr() for k, v in inputs.items() if k.endswith("_ids") and torch.is_tensor(v)
        }
        self.recs, self.keep, self.calls, self.stack, self.head = {}, [], 0, ["<root>"], False
        self.tracker = CastTracker(self.pptr)
        self.hooks = []
        for m in models:
            for name, mod in m.named_modules():
                final_norm = bool(re.search(r"(^|\.)model\.norm$", name))
                self.hooks.append(mod.register_forward_pre_hook(self.pre(name or "<root>")))
                self.hooks.append(mod.register_forward_hook(self.post(final_norm)))

    def pre(self, name):
        def hook(*_):
            self.stack.append(name)

        return hook

    def post(self, final_norm):
        def hook(*_):
            self.stack.pop()
            self.head = self.head or (final_norm and torch.is_grad_enabled())

        return hook

    def pack(self, t):
        self.calls += 1
        s = t.untyped_storage()
        k = s.data_ptr()
        if k not in self.recs and s.nbytes():
            self.keep.append(t)
            cat = (
                "param"
                if k in self.pptr
                else "param_copy"
                if k in self.tracker.copies
                else "buffer"
                if k in self.bptr
                else "input"
                if k in self.ids
                else "activation"
            )
            self.recs[k] = {
                "bytes": s.nbytes(),
                "category": cat,
                "dtype": str(t.dtype)[6:],
                "shape": list(t.shape),
                "module": self.stack[-1],
                "producer": type(t.grad_fn).__name__ if t.grad_fn else None,
                "head": self.head,
                "src": self.tracker.copies.get(k),
            }
        return t

    @contextmanager
    def active(self):
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t), self.tracker:
            yield
        for h in self.hooks:
            h.remove()
