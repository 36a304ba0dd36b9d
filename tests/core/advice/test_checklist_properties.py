"""Properties of the checklist's fixes and the advisor's suggestions over many plans (hypothesis)."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramplan.core.advice.advisor import advise, gpu_layout
from vramplan.core.advice.checklist import apply_fix, checklist
from vramplan.core.advice.whatif import Effect
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import FRAGMENTATION_RISK
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.keys import parse_set
from vramplan.core.plan.schema.plan import Plan, plan_from_dict
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS
from vramplan.core.time.step import step_time

MODELS = ["tinyllama-1.1b", "llama-7b", "bloom-7b1", "qwen2.5-7b", "llama-2-13b", "llama-2-70b"]
GPUS = ["a100-80gb", "h100-80gb", "rtx-4090", "t4", "v100-32gb", "a10"]


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    model = draw(st.sampled_from(MODELS))
    method = draw(st.sampled_from(["full", "full", "lora", "qlora"]))
    targets = ["qkv"] if model.startswith("bloom") else draw(st.sampled_from([["q", "v"], ["all-linear"]]))
    zero = draw(st.integers(0, 3))
    return {
        "model": {"preset": model},
        "hardware": {
            "gpu": draw(st.sampled_from(GPUS)),
            "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
            "nodes": draw(st.sampled_from([1, 1, 2])),
        },
        "training": {
            "micro_batch_size": draw(st.sampled_from([1, 2, 4, 8])),
            "seq_len": draw(st.sampled_from([512, 2048, 4096, 16384])),
            "grad_accum_steps": draw(st.sampled_from([1, 2, 4])),
            "precision": draw(st.sampled_from(PRECISIONS)),
            "optimizer": draw(st.sampled_from(OPTIMIZERS)),
            "method": method,
            "lora_targets": targets,
            "loss_scaling": draw(st.sampled_from(["dynamic", "static", "none"])),
            **({"learning_rate": draw(st.sampled_from([2e-5, 3e-4, 3e-3]))} if draw(st.booleans()) else {}),
        },
        "strategy": {
            "gradient_checkpointing": draw(st.sampled_from(["none", "selective", "full"])),
            "attention": draw(st.sampled_from(["eager", "flash"])),
            "activation_compression": draw(st.sampled_from(["none", "none", "int8"])),
            "fused_cross_entropy": draw(st.booleans()),
            "zero_stage": zero,
            "offload_optimizer": draw(st.sampled_from(["none", "none", "cpu"])) if zero else "none",
            "tensor_parallel": draw(st.sampled_from([1, 1, 2])),
            "pipeline_parallel": draw(st.sampled_from([1, 1, 2])) if zero <= 1 else 1,
        },
    }


def valid(data: dict[str, Any]) -> Plan:
    try:
        return plan_from_dict(data)
    except PlanError:
        assume(False)
        raise


def as_plan_values(changes: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}


def check_effect(plan: Plan, base_total: int, e: Effect) -> None:
    changed = plan.with_changes(dict(e.changes))
    total = estimate(changed).total
    assert total == e.memory_total and e.memory_delta == total - base_total
    if e.memory_delta < 0:  # it claims to save memory: it does
        assert total < base_total
    assert step_time(changed).step_seconds == e.step_seconds
    assert dict(parse_set(a) for a in e.set_args()) == as_plan_values(e.changes)  # what `--set` would apply


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@SETTINGS
@given(plans())
def test_fixes_do_what_they_claim(data: dict[str, Any]) -> None:
    plan = valid(data)
    base = estimate(plan).total
    cl = checklist(plan)
    for item in cl:
        assert (item.fix is None) or item.status in ("warn", "fail"), item.id  # ok items carry no fix
        for e in (item.fix, *item.alternatives):
            if e is None:
                continue
            check_effect(plan, base, e)
            if item.group == "oom":  # memory remedies: never a change that does not lower the peak
                assert e.saves_memory, (item.id, e.title)
        if item.fix is not None and item.group == "slow":  # speed fixes: fit, and are at least 5% faster
            assert item.fix.fits and item.fix.relative_token_time < 0.95
            assert estimate(apply_fix(plan, item.fix)).fits


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(plans())
def test_advice_suggestions_fit_and_are_minimal(data: dict[str, Any]) -> None:
    plan = valid(data)
    advice = advise(plan)
    base, margin = advice.est, advice.margin  # every suggestion and limit keeps the safety margin free
    assert margin.fraction >= FRAGMENTATION_RISK  # unset: never less than fragmentation's
    if margin.keeps(base):
        assert advice.suggestions == () and not advice.needed
    ranked = [(s.tier == 2, s.effect.relative_step_time) for s in advice.suggestions]
    assert ranked == sorted(ranked)
    for s in advice.suggestions:
        changed = plan.with_changes(s.changes)
        est = estimate(changed)
        assert est.total == s.effect.memory_total and est.fits
        assert margin.keeps(est) and est.headroom_fraction >= margin.for_estimate(est) - 1e-12
        for k in range(1, len(s.moves)):  # no subset of its moves reaches the goal
            for sub in combinations(s.moves, k):
                merged = {key: v for mv in sub for key, v in mv.changes}
                try:
                    smaller = estimate(plan.with_changes(merged))
                except PlanError:
                    continue
                assert not margin.keeps(smaller), (s.title, [m.title for m in sub])  # GPU, host memory or NVMe
        if s.speedups:  # the speed moves its spare memory pays for make it faster than its memory moves alone
            alone = plan.with_changes({key: v for mv in s.moves for key, v in mv.changes})
            assert s.effect.step_seconds < step_time(alone).step_seconds, s.title
    mb = advice.max_micro_batch_size
    if mb:
        assert margin.keeps(estimate(plan.with_changes({"training.micro_batch_size": mb})))
    if mb < 1_000_000:
        assert not margin.keeps(estimate(plan.with_changes({"training.micro_batch_size": mb + 1})))
    if advice.min_gpus is not None:
        layout = advice.min_gpus_changes
        assert margin.keeps(estimate(plan.with_changes(layout)))
        unit = plan.strategy.tensor_parallel * plan.strategy.pipeline_parallel
        for dp in range(1, advice.min_gpus // unit):  # no smaller layout fits
            smaller = gpu_layout(plan, dp)
            if smaller is not None:
                assert not margin.keeps(estimate(plan.with_changes(smaller))), (dp, smaller)
