"""How far to trust the number (issue 28.5): every estimate's `expected_error`, from the published GPU runs nearest
to its plan (vramplan.core.memory.accuracy, reading core/memory/accuracy.json), in the JSON, the headline and the
OOM checklist item."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import pytest

from bench.data.published_rows import HERE, accuracy_rows, build_rows
from vramplan.cli.parser import run
from vramplan.cli.report import estimate_table
from vramplan.core.advice.checklist import checklist
from vramplan.core.advice.margin import need_bytes
from vramplan.core.memory import accuracy
from vramplan.core.memory.accuracy import COMMAND, MIN_CASES, expected_error, load_rows, stack_family
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.schema.plan import Plan, default_plan


def test_the_shipped_rows_are_what_the_estimator_gives_today(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freshness: the shipped file equals the rows recomputed in process from tests/data/published. Whoever changes
    the estimator (or the published copy) regenerates it."""
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    presets.reload()
    try:
        fresh = accuracy_rows(build_rows())
    finally:
        monkeypatch.undo()
        presets.reload()
    shipped = [r._asdict() for r in load_rows()]
    stale = sorted(
        {r["id"] for r in fresh} ^ {r["id"] for r in shipped}
        | {a["id"] for a, b in zip(fresh, shipped, strict=False) if a != b}
    )
    assert len(fresh) == 68
    assert fresh == shipped, f"core/memory/accuracy.json is stale for {stale}: regenerate it with `{COMMAND}`"


def test_estimate_json_has_the_five_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--json", "--set", "training.method=qlora"]) == 0
    ee = json.loads(capsys.readouterr().out)["memory"]["per_gpu"]["expected_error"]
    assert set(ee) == {"median_pct", "worst_under_pct", "n_cases", "basis", "p90_under_pct"}
    assert 0 < ee["median_pct"] < 100 and 0 <= ee["p90_under_pct"] <= ee["worst_under_pct"] < 100
    assert MIN_CASES <= ee["n_cases"] <= len(load_rows())
    assert ee["basis"].startswith("published GPU runs: qlora")


def _expected(rows: list[Any]) -> tuple[float, float, float]:
    """Median |error|, worst under and the 90th percentile of under-prediction (numpy's default: linear between the
    closest ranks, which `statistics.quantiles(method="inclusive")` also is)."""
    errors = [r.error_pct for r in rows]
    unders = [max(0.0, -e) for e in errors]
    p90 = statistics.quantiles(unders, n=10, method="inclusive")[-1]
    return round(statistics.median(abs(e) for e in errors), 1), round(max(unders), 1), round(p90, 1)


def test_a_qlora_plan_is_judged_by_the_nearest_qlora_runs() -> None:
    """A 7B QLoRA plan on a transformers stack: the QLoRA runs of transformers-family stacks within 2x of its
    parameters (Answer.AI's 7B runs, here), not the full fine-tuning ones; its figures are theirs."""
    est = estimate(default_plan().with_changes({"training.method": "qlora"}))
    ee = est.expected_error
    p = est.params_total
    near = [
        r
        for r in load_rows()
        if r.method == "qlora" and stack_family(r.framework) == "transformers" and p / 2 <= r.params <= 2 * p
    ]
    assert len(near) >= MIN_CASES and ee.n_cases == len(near)
    assert (ee.median_pct, ee.worst_under_pct, ee.p90_under_pct) == _expected(near)
    assert ee.basis.startswith("published GPU runs: qlora, transformers stacks") and "widened" not in ee.basis
    # not a constant: a full fine-tuning plan of the same model is judged by other runs, with other figures
    full = estimate(default_plan()).expected_error
    assert "full" in full.basis and full.median_pct != ee.median_pct and full.worst_under_pct < ee.worst_under_pct


def test_too_few_near_runs_widen_the_selection_and_say_so() -> None:
    """No full fine-tuning run of a transformers-family stack is published: a full plan widens to any stack (and
    keeps the size window), and `basis` says from what."""
    ee = expected_error("full", "hf-trainer", 7_000_000_000)
    rows = [r for r in load_rows() if r.method == "full" and 3.5e9 <= r.params <= 14e9]
    assert not [r for r in rows if stack_family(r.framework) == "transformers"]
    assert ee.n_cases == len(rows) >= MIN_CASES
    assert "full, any stack, 3.5B-14B parameters" in ee.basis
    assert "widened: fewer than 5 runs with full, transformers stacks" in ee.basis


def test_the_headline_shows_it() -> None:
    est = estimate(default_plan().with_changes({"training.method": "qlora"}))
    ee = est.expected_error
    text = estimate_table(est)
    runs = f"{ee.n_cases} similar published runs"
    under = f"90th percentile {ee.p90_under_pct:.0f}% under, worst {ee.worst_under_pct:.0f}%"
    assert f"estimate ± {ee.median_pct:.0f}% on {runs} ({under})" in " ".join(text.split())


def _qlora_with_headroom(fraction: float) -> Plan:
    """A 7B QLoRA plan on one RTX 3090 whose CUDA context is grown until ``fraction`` of the GPU is left free."""
    p = default_plan().with_changes(
        {"training.method": "qlora", "hardware.gpu": "rtx-3090", "hardware.gpus_per_node": 1, "strategy.zero_stage": 0}
    )
    est = estimate(p)
    extra_mib = int((est.headroom - fraction * est.gpu_capacity) // MiB)
    return p.with_changes({"overhead.cuda_context_mib": p.overhead.cuda_context_mib + extra_mib})


def test_oom_check_warns_inside_the_error_margin() -> None:
    """QLoRA 7B runs were under by 27% at the 90th percentile: 20% free is more than fragmentation asks (10%) but
    less than that margin, so the capacity item warns and says what the plan may need; 60% free keeps it."""
    edge = _qlora_with_headroom(0.20)
    est = estimate(edge)
    ee = est.expected_error
    assert ee.p90_under_pct > 25 and 0.19 < est.headroom_fraction < 0.21
    item = checklist(edge).item("oom.capacity")
    need = need_bytes(est)  # on-GPU peak / (1 - 0.27): more than the GPU holds
    assert need == math.ceil(est.on_gpu / (1 - ee.p90_under_pct / 100)) > est.gpu_capacity
    assert item.status == "warn", item.detail
    assert f"{ee.p90_under_pct:.0f}% under" in item.detail and f"may need up to {need / 2**30:.1f} GiB" in item.detail
    ample = checklist(_qlora_with_headroom(0.60)).item("oom.capacity")
    assert ample.status == "ok" and "may need up to" in ample.detail


def test_no_rows_no_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without data the error is not made up: zero cases, and the basis says there are none."""
    monkeypatch.setattr(accuracy, "load_rows", lambda: ())
    accuracy.expected_error.cache_clear()
    try:
        ee = accuracy.expected_error("lora", "custom", 7_000_000_000)
    finally:
        accuracy.expected_error.cache_clear()
    assert ee.n_cases == 0 and ee.basis.endswith("no published runs") and ee.p90_under_pct == 0
