"""The estimate against training steps other people measured on real GPUs and published (tests/data/published, a
copy of ../shared/published made by bench/data/copy_published.py): what that directory's check.py does through the
CLI, run in process (bench/data/published_rows.py builds each case's plan and estimate; bench/data/accuracy.py
writes the estimate's expected error from the same rows). Throughput rows compare tokens/s/GPU at the default MFU;
bound rows (a run that fit, or ran out of memory) compare the verdict.

The bounds are issue 12's and 13's acceptance: memory median |error| <= 8% (7.2% over the 55 memory rows at
2026-12-03, 7.2% over the 68 of the 81 cases copied on 2026-12-06), no run that fit predicted not to fit, throughput
median |error| <= 15%. They are medians on purpose: several sources leave settings unstated or measure something the
plan does not describe (each case's `notes`; docs/accuracy.md names the rows that stay off and why), so single rows
are not held to a bound except where the mechanism is known (litgpt's 4-bit rows below).
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from bench.data.published_rows import CASES, HERE, GiB, Row, build_rows, case_args, memory_rows, run_case
from vramplan.core.plan.catalogue import presets
from vramplan.core.time.step import step_time


@pytest.fixture(scope="module")
def published_env() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
        mp.setenv("VRAMPLAN_DETECT", "0")
        presets.reload()
        yield
    presets.reload()


@pytest.fixture
def rows(published_env: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Row]:
    # The suite's autouse fixture points VRAMPLAN_CONFIG_DIR at an empty folder before each test: point it back.
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
    presets.reload()
    return _rows()


_CACHE: dict[str, Row] = {}


def _rows() -> dict[str, Row]:
    if not _CACHE:
        _CACHE.update(build_rows())
    return _CACHE


def test_every_case_has_an_estimate_and_every_technique_is_expressible(rows: dict[str, Row]) -> None:
    """All 81 cases resolve; every `future_sets` key (the techniques and the stack the run used) is accepted by its
    plan, `stack.framework` and `strategy.checkpoint_impl` included."""
    assert len(rows) == len(CASES) == 81
    refused = {r.id: sorted(set(r.case.get("future_sets", {})) - set(r.accepted)) for r in rows.values()}
    # The QLoRA paper's case states bitsandbytes' optimizer as ``optimizer_impl = "fused"`` (no foreach
    # temporaries) and its paged AdamW in future_sets; PyTorch has no fused paged AdamW, so the plan refuses the pair
    # with one line and the case keeps plain AdamW's states (on the safe side of its "fits" bound).
    assert {k: v for k, v in refused.items() if v} == {"qlora-paper-llama65b-48gb": ["training.optimizer"]}
    # The copied user presets of the three GPUs (torchtitan's 96 GB H100, RTX A6000, RTX A5000) predate the step-time
    # model's fields (issue 38): they are refused, one line each, and the built-in presets of the same ids are used;
    # the built-in 96 GB H100 states the SXM part's fp8 peak, so torchtitan's Float8 row is expressed.
    reg = presets.registry()
    assert {reg.origin[f"hardware/{g}"] for g in ("h100-96gb-gt", "rtx-a6000", "rtx-a5000")} == {"built-in"}
    assert rows["torchtitan-70b-2d-256xh100"].plan.hardware.gpu == "h100-96gb-gt"
    assert reg.gpus["h100-96gb-gt"].fp8_tflops == 1979.0
    assert all(r.plan.hardware.gpu for r in rows.values())
    assert {r.plan.hardware.gpu for r in rows.values()} >= {"h100-96gb-gt", "rtx-a6000"}
    # every case names its stack, and the plan runs it
    for r in rows.values():
        assert f'"{r.plan.stack.framework}"' == r.case["future_sets"]["stack.framework"], r.id
        if "strategy.checkpoint_impl" in r.case["future_sets"]:
            assert f'"{r.plan.strategy.checkpoint_impl}"' == r.case["future_sets"]["strategy.checkpoint_impl"], r.id


def test_memory_median_error_within_8_percent(rows: dict[str, Row]) -> None:
    """7.2% over the 68 memory rows of the 81 cases at 2026-12-06 (7.2% over the 55 rows at 2026-12-03; 3.8% over
    the first 34; the released cases, Answer.AI's, PEFT's, LLaMA-Factory's and Unsloth's, are mostly under:
    docs/estimate.md, "Training stacks")."""
    errors = {r.id: r.memory_error() for r in memory_rows(rows)}
    assert len(errors) == 68
    median = statistics.median(abs(e) for e in errors.values())
    assert median <= 0.08, f"memory median |error| {median:.1%}: {errors}"


def test_allocated_reserved_total_are_ordered(rows: dict[str, Row]) -> None:
    for r in rows.values():
        assert r.est.allocated <= r.est.reserved <= r.est.total, r.id
        assert r.est.on_gpu <= r.est.total, r.id


# Runs that ran out of memory which the estimate places just under the GPU; why each is not held (source notes):
OOM_NOT_HELD = {
    # litgpt's LoRA rows are 2-10% under (its loading peak and Lightning's buffers are not in the plan); 38.8 GiB
    # of a 40 GiB A100 is within that of running out.
    "litgpt-llama2-7b-lora-mb4-oom": 0.10,
    # litgpt quantizes Falcon-40B while loading it: the OOM is most likely the loading peak, not the step's.
    "litgpt-falcon40b-qlora-nf4dq-oom": 0.20,
}


def test_no_run_that_fit_is_predicted_not_to_fit(rows: dict[str, Row]) -> None:
    """Every memory row measured on the GPU its source names ran there: each must be predicted to fit. The bound
    rows are runs that ran out of memory (`over`): check.py's verdict (predicted over the bound, or not fitting)
    holds for each except those in OOM_NOT_HELD, which must still come within their stated margin of the GPU."""
    ran = [r for r in memory_rows(rows) if r.case.get("gpu_named_in_source", True)]
    assert len(ran) >= 40 and [r.id for r in ran if not r.est.fits] == []
    bound = [r for r in rows.values() if "published_bound" in r.case]
    assert {r.case["published_bound"] for r in bound} == {"over", "under"} and len(bound) == 6
    for r in bound:
        b = r.case["published_bound_gib"]
        total_gib = r.est.total / GiB
        if r.case["published_bound"] == "under":  # a run that fit in `b` (the QLoRA paper's 65B, ZeRO-Offload's 10B)
            assert total_gib <= b, f"{r.id}: {total_gib:.1f} GiB predicted; the run fit in {b} GiB"
            continue
        agrees = total_gib > b * 0.985 or not r.est.fits
        if r.id in OOM_NOT_HELD:
            assert total_gib >= b * (1 - OOM_NOT_HELD[r.id]), f"{r.id}: {total_gib:.1f} GiB, ran out on {b} GiB"
        else:
            assert agrees, f"{r.id}: {total_gib:.1f} GiB predicted; the run ran out of memory on {b} GiB"


def test_reentrant_checkpointing_frees_the_legacy_4bit_inputs(rows: dict[str, Row]) -> None:
    """Answer.AI's 7B QLoRA DDP run (batch 8 x 2048 on two 24 GB RTX 3090s, bitsandbytes <= 0.43.1, reentrant
    checkpointing) ran. bitsandbytes' legacy MatMul4Bit keeps each 4-bit linear's input in ``ctx.tensors``; under
    non-reentrant checkpointing that input lives through the whole forward (about 24 GiB more here: 41 GiB, does
    not fit), under reentrant checkpointing the forward runs without autograd and it is not kept (17.5 GiB)."""
    r = rows["aai-llama2-7b-qlora-ddp-bs8"]
    assert r.plan.strategy.checkpoint_impl == "reentrant" and r.plan.training.bnb_generation == "legacy"
    assert r.est.fits
    model, gpu, sets, hf = case_args(r.case)
    kept = run_case(
        r.case,
        [*sets, *(f"{k}={v}" for k, v in r.case["future_sets"].items() if "checkpoint" not in k)],
        model,
        gpu,
        hf,
    )
    assert kept.plan.strategy.checkpoint_impl == "non-reentrant"
    assert not kept.est.fits and kept.est.total - r.est.total > 16 * GiB


def test_throughput_within_the_step_times_expected_error(rows: dict[str, Row]) -> None:
    """torchtitan's three A100 throughputs: the op-level step time (issue 38) is 20-25% too fast on them, as on
    torchtitan's other eager FSDP runs (docs/accuracy.md): each within what its own `time.expected_error` says
    (the worst too-fast error of the timings nearest to it), not a bound fitted to these three."""
    thr = [r for r in rows.values() if "published_bound" not in r.case and r.case["figure_kind"] == "throughput"]
    assert len(thr) == 7
    # fms-fsdp's four (released 2026-12) are not held here: the step-time model's accuracy on them is issue 38's
    thr = [r for r in thr if r.id.startswith("torchtitan-")]
    assert len(thr) == 3
    for r in thr:
        assert r.plan.training.mfu is None  # the matmuls' efficiency modelled, not fitted to the run
        st = step_time(r.plan)
        worst = st.expected_error.worst_under_pct / 100
        # tokens/s over by e means the step time under by e / (1 + e)
        e = r.throughput_error()
        assert -worst <= -e / (1 + e) <= worst, (r.id, e, st.expected_error)


def test_litgpt_4bit_rows_within_10_percent_with_litgpt_settings(rows: dict[str, Row]) -> None:
    """litgpt's 4-bit rows ran bitsandbytes 0.41.1 (each 4-bit linear keeps its input until its backward: PR #1270
    removed that in 0.43.2) under Lightning's BitsandbytesPrecision, which quantizes every linear including lm_head,
    with litgpt's LoRA dropout 0.05 (litgpt finetune/lora.py defaults): the cases' `future_sets` state them."""
    cases = [c for c in CASES if c["id"].startswith("litgpt-") and "qlora" in c["id"] and c.get("published_gib")]
    assert len(cases) == 4
    errors = {c["id"]: rows[c["id"]].memory_error() for c in cases}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    for c in cases:
        assert rows[c["id"]].plan.training.bnb_generation == "legacy", c["id"]
        assert rows[c["id"]].plan.training.quantized_modules == "all-linears", c["id"]
    # with the case's arguments only (the custom stack's defaults: bitsandbytes >= 0.43.2, transformers' block
    # linears only, no dropout) they are further under
    default = {}
    for c in cases:
        model, gpu, sets, hf = case_args(c)
        default[c["id"]] = run_case(c, sets, model, gpu, hf).memory_error()
    assert all(default[k] < errors[k] for k in errors), (default, errors)
