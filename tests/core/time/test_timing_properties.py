"""Properties of the time model over many plans (hypothesis, explicit strategies per field)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramplan.core.plan.catalogue.presets import gpu
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, plan_from_dict
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS
from vramplan.core.time.record import CATEGORIES
from vramplan.core.time.step import step_time

MODELS = ["tinyllama-1.1b", "llama-7b", "bloom-7b1", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "llama-2-70b"]
GPUS = ["a100-80gb", "h100-80gb", "rtx-4090", "t4", "mi300x", "v100-32gb"]


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    model = draw(st.sampled_from(MODELS))
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    targets = ["qkv"] if model.startswith("bloom") else draw(st.sampled_from([["q", "v"], ["all-linear"]]))
    return {
        "model": {"preset": model},
        "hardware": {
            "gpu": draw(st.sampled_from(GPUS)),
            "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
            "nodes": draw(st.sampled_from([1, 1, 2, 4])),
        },
        "training": {
            "micro_batch_size": draw(st.integers(1, 8)),
            "seq_len": draw(st.sampled_from([128, 512, 2048, 4096])),
            "grad_accum_steps": draw(st.integers(1, 8)),
            "precision": draw(st.sampled_from(PRECISIONS)),
            "optimizer": draw(st.sampled_from(OPTIMIZERS)),
            "method": method,
            "lora_targets": targets,
            "mfu": draw(st.sampled_from([None, 0.3, 0.55])),
        },
        "strategy": {
            "gradient_checkpointing": draw(st.sampled_from(["none", "selective", "full"])),
            "attention": draw(st.sampled_from(["eager", "flash"])),
            "zero_stage": draw(st.integers(0, 3)),
            "offload_optimizer": draw(st.sampled_from(["none", "none", "cpu", "nvme"])),
            "offload_parameters": draw(st.sampled_from(["none", "none", "cpu"])),
            "tensor_parallel": draw(st.sampled_from([1, 1, 2, 4])),
            "pipeline_parallel": draw(st.sampled_from([1, 1, 2])),
        },
    }


def valid(data: dict[str, Any]) -> Plan:
    try:
        return plan_from_dict(data)
    except PlanError:
        assume(False)
        raise


def changed(plan: Plan, changes: dict[str, Any]) -> Plan:
    try:
        return plan.with_changes(changes)
    except PlanError:
        assume(False)
        raise


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@SETTINGS
@given(plans())
def test_any_plan_has_a_consistent_step(data: dict[str, Any]) -> None:
    plan = valid(data)
    s = step_time(plan)
    assert s.step_seconds > 0 and s.tokens_per_second > 0
    assert sum(t.exposed for t in s.terms) == pytest.approx(s.step_seconds, rel=1e-9)
    for t in s.terms:
        assert 0 <= t.exposed <= t.seconds * (1 + 1e-9) + 1e-15, t
        assert t.category in CATEGORIES
    assert s.bottleneck in CATEGORIES
    # achieved MFU never beats the matmuls' efficiency (the setting, or the GPU's measured best): the step is at
    # least the math, model FLOPs at most hardware FLOPs
    best = s.mfu_setting if s.mfu_setting is not None else gpu(plan.hardware.gpu).matmul_efficiency
    assert 0 < s.mfu <= best * (1 + 1e-9)
    assert s.flops_per_step <= s.hardware_flops_per_step
    assert s.tokens_per_second_per_gpu * s.gpus == pytest.approx(s.tokens_per_second)
    assert set(s.explain()) >= {t.name for t in s.terms}


@SETTINGS
@given(plans())
def test_checkpointing_never_faster(data: dict[str, Any]) -> None:
    """Recomputation adds its kernels to the step, whatever the matmuls' efficiency."""
    plan = valid(data)
    times = [
        step_time(changed(plan, {"strategy.gradient_checkpointing": c})).step_seconds
        for c in ("none", "selective", "full")
    ]
    assert times[0] <= times[1] * (1 + 1e-9) and times[1] <= times[2] * (1 + 1e-9)


@SETTINGS
@given(plans())
def test_more_gpus_never_slower_per_token_in_pure_compute(data: dict[str, Any]) -> None:
    plan = valid(data)
    more = changed(plan, {"hardware.nodes": plan.hardware.nodes * 2})  # twice the data-parallel ranks
    a, b = step_time(plan), step_time(more)
    # each GPU does the same work per step, so the compute time per token halves with twice the GPUs
    compute_a, compute_b = a.by_category()["compute"], b.by_category()["compute"]
    assert compute_b == pytest.approx(compute_a)
    assert b.tokens_per_step == 2 * a.tokens_per_step
    assert compute_b / b.tokens_per_step < compute_a / a.tokens_per_step


@SETTINGS
@given(plans(), st.sampled_from(["a100-80gb", "h100-80gb"]), st.sampled_from([2, 4]))
def test_more_gpus_never_slower_with_fast_links(data: dict[str, Any], gpu: str, per_node: int) -> None:
    """Within one node (NVLink-class links, no offload), doubling data parallelism never lowers throughput.

    From two GPUs on: going from one to two adds the collectives themselves (a ZeRO-3 all-gather of a 1B model
    behind 128 tokens of compute is slower than no all-gather: true, and the model says so); doubling an existing
    group only grows their (n-1)/n factor while the tokens per step double."""
    plan = changed(
        valid(data),
        {
            "hardware.gpu": gpu,
            "hardware.nodes": 1,
            "hardware.gpus_per_node": per_node,
            "strategy.offload_optimizer": "none",
            "strategy.offload_parameters": "none",
        },
    )
    more = changed(plan, {"hardware.gpus_per_node": per_node * 2})
    assert step_time(more).tokens_per_second >= step_time(plan).tokens_per_second * (1 - 1e-9)


@SETTINGS
@given(plans(), st.sampled_from(["training.micro_batch_size", "training.seq_len", "training.grad_accum_steps"]))
def test_step_time_monotone_in_batch_and_sequence(data: dict[str, Any], key: str) -> None:
    plan = valid(data)
    table, field = key.split(".")
    value = getattr(getattr(plan, table), field)
    bigger = changed(plan, {key: value * 2})
    assert step_time(plan).step_seconds <= step_time(bigger).step_seconds * (1 + 1e-9)


@SETTINGS
@given(plans())
def test_zero3_never_faster_than_zero2(data: dict[str, Any]) -> None:
    plan = valid(data)
    z2 = changed(
        plan, {"strategy.zero_stage": 2, "strategy.offload_parameters": "none", "strategy.pipeline_parallel": 1}
    )
    z3 = changed(z2, {"strategy.zero_stage": 3})
    assert step_time(z2).step_seconds <= step_time(z3).step_seconds * (1 + 1e-9)


@SETTINGS
@given(plans())
def test_offload_never_faster(data: dict[str, Any]) -> None:
    plan = valid(data)
    base = changed(plan, {"strategy.offload_optimizer": "none", "strategy.offload_parameters": "none"})
    assume(base.strategy.zero_stage >= 1)
    cpu = changed(base, {"strategy.offload_optimizer": "cpu"})
    assert step_time(base).step_seconds <= step_time(cpu).step_seconds * (1 + 1e-9)
    if base.strategy.zero_stage == 3:
        params = changed(cpu, {"strategy.offload_parameters": "cpu"})
        assert step_time(cpu).step_seconds <= step_time(params).step_seconds * (1 + 1e-9)


@SETTINGS
@given(plans())
def test_lower_mfu_never_faster(data: dict[str, Any]) -> None:
    plan = valid(data)
    slow = changed(plan, {"training.mfu": 0.2})
    fast = changed(plan, {"training.mfu": 0.6})
    assert step_time(fast).step_seconds <= step_time(slow).step_seconds * (1 + 1e-9)


@SETTINGS
@given(plans(), st.booleans())
def test_int8_activations_never_faster(data: dict[str, Any], sp: bool) -> None:
    plan = valid(data)
    if sp and plan.strategy.tensor_parallel > 1:
        plan = changed(plan, {"strategy.sequence_parallel": True})
    int8 = changed(plan, {"strategy.activation_compression": "int8"})
    plain, packed = step_time(plan), step_time(int8)
    assert plain.step_seconds <= packed.step_seconds * (1 + 1e-9)  # equal when it hides exposed transfers
    assert packed.seconds("activation_compression") > 0 and "activation_compression" in packed.explain()
    assert sum(t.exposed for t in packed.terms) == pytest.approx(packed.step_seconds)
