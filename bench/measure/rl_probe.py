"""Instrumentation for measure_rl.py: record_function ranges hooked into TRL's trainers, the allocation events'
analysis (innermost range wins), tensor enumeration and saved-tensor hooks. The profiler's event walk, the tensor
helpers (storage de-duplication, optimizer states) and the saved-tensor recorder and its summary are the package's
own (`vramplan.measure.cpu`, `vramplan.measure.tensors`, `vramplan.measure.saved`), so that this harness counts bytes
as `vramplan measure` does."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.profiler import record_function

from vramplan.measure import saved
from vramplan.measure.cpu import events, from_session_start
from vramplan.measure.tensors import grads_info, optimizer_state, storage_bytes

# what rl_truth.json's activations keep of the package's summary (its logits_like_bytes is this module's own)
SUMMARY_KEYS = (
    "bytes",
    "by_region",
    "by_dtype",
    "per_layer",
    "excluded",
    "head_and_loss_bytes",
    "input_bytes",
    "num_distinct_storages",
    "top",
)
FINAL_NORM = re.compile(r"(^|\.)model\.norm$")


def summarise(recs, vocab_size):
    """Saved activations (inputs included; parameters, their cast copies and buffers excluded) by region: the
    package's summary (`vramplan.measure.saved.summarise`) with the keys this harness records, and one rule of its
    own: a logit is a vocab-sized tensor saved by the head (an MLP as wide as a tiny vocabulary is not a logit)."""
    s = saved.summarise(vocab_size, recs, 0, 0.0, 0)
    out = {k: s[k] for k in SUMMARY_KEYS}
    act = [r for r in recs.values() if r["category"] in ("activation", "input")]
    out["logits_like_bytes"] = sum(r["bytes"] for r in act if r["head"] and r["shape"] and r["shape"][-1] == vocab_size)
    return out


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
    ev = events(prof, "VP:")
    ranges = []
    for t0, t1, name in ev.ranges:
        _, step, ph = name.split(":")
        ranges.append((t0, t1, int(step), ph))
    allocs, _ = from_session_start(sorted(ev.allocs))
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


def saved_tensors(models, inputs):
    """The package's saved-tensor recorder (`vramplan.measure.saved.SavedTensors`) over one forward of the policy (and
    the reference): storages de-duplicated and classified as measure_step.py's saved pass does, the ``*_ids`` inputs
    counted as inputs. TRL's fused LM head never calls the lm_head module, so head_and_loss is everything saved after
    the backbone's final norm returned under grad (the policy's forward, not the no-grad reference forward that DPO
    runs inside compute_loss)."""
    ids = {v.untyped_storage().data_ptr() for k, v in inputs.items() if k.endswith("_ids") and torch.is_tensor(v)}
    return saved.SavedTensors(
        models,
        ids,
        head_enters=lambda name: False,
        head_leaves=lambda name: bool(FINAL_NORM.search(name)) and torch.is_grad_enabled(),
    )
