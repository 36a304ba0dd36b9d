"""How far to trust a step time (issue 38, point 6): `time.expected_error` from the published timings nearest to
the plan (vramplan.core.time.accuracy, reading core/time/accuracy.json), in the JSON, the CLI's time section, the
planner and `vramplan gpus`; and what a GPU preset must state for the time model (point 2)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from bench.data.time_accuracy import rows
from vramplan.cli.parser import run
from vramplan.core.memory.accuracy import MIN_CASES, stack_family
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.time.accuracy import COMMAND, KIND_TEXT, load_rows, plan_kind, step_kind
from vramplan.core.time.step import step_time

ROOT = Path(__file__).resolve().parents[3]


def test_the_shipped_rows_are_what_the_model_gives_today() -> None:
    """Freshness: the shipped file equals the rows recomputed in process from tests/data/published_time.json.
    Whoever changes the time model, a GPU preset or the figures regenerates it."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        fresh = rows()
    finally:
        os.chdir(cwd)
        presets.reload()
    shipped = [{**r._asdict(), "step_kind": k} for k, r in load_rows()]
    stale = sorted({a["id"] for a, b in zip(fresh, shipped, strict=False) if a != b})
    assert len(fresh) == len(json.loads((ROOT / "tests/data/published_time.json").read_text())["figures"])
    assert fresh == shipped, f"core/time/accuracy.json is stale for {stale}: regenerate it with `{COMMAND}`"


def test_estimate_json_has_time_expected_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--json"]) == 0
    time = json.loads(capsys.readouterr().out)["time"]
    ee = time["expected_error"]
    assert set(ee) == {"median_pct", "worst_under_pct", "n_cases", "basis", "p90_under_pct"}  # issue 40.3's record
    assert 0 < ee["median_pct"] < 100 and ee["n_cases"] >= MIN_CASES
    assert ee["basis"].startswith(KIND_TEXT["short"])


def test_a_plan_is_judged_by_the_nearest_timings_of_its_kind() -> None:
    """The default plan (LLaMA-7B full, a custom stack: the transformers family, 2k): the short-context full
    fine-tuning timings of that family within 2x of its parameters; its figures are those rows'."""
    plan = default_plan()
    st = step_time(plan)
    ee = st.expected_error
    p = plan.model.arch().total_params
    family = stack_family(plan.stack.framework)
    near = [
        r
        for k, r in load_rows()
        if k == "short" and r.method == "full" and stack_family(r.framework) == family and p / 2 <= r.params <= 2 * p
    ]
    assert len(near) >= MIN_CASES and ee.n_cases == len(near)
    assert ee.median_pct == round(statistics.median(abs(r.error_pct) for r in near), 1)
    assert ee.worst_under_pct == round(max(0.0, -min(r.error_pct for r in near)), 1)
    assert ee.basis == f"{KIND_TEXT['short']}; published GPU runs: full, {family} stacks, 3.37B-13.5B parameters"
    # long context is judged by the long-context timings, not the short ones
    long = step_time(plan.with_changes({"training.seq_len": 65536, "strategy.gradient_checkpointing": "full"}))
    assert plan_kind(long.plan) == "long" and long.expected_error.basis.startswith(KIND_TEXT["long"])
    assert long.expected_error != ee


def test_a_stack_with_enough_timings_is_judged_by_its_own() -> None:
    plan = default_plan().with_changes({"stack.framework": "torchtitan", "model.preset": "llama-3.1-8b"})
    ee = step_time(plan).expected_error
    p = plan.model.arch().total_params
    near = [
        r
        for k, r in load_rows()
        if k == "short" and r.method == "full" and stack_family(r.framework) == "torchtitan"
        and p / 2 <= r.params <= 2 * p
    ]  # fmt: skip
    assert len(near) >= MIN_CASES and ee.n_cases == len(near) and "widened" not in ee.basis


def test_rl_steps_fall_back_to_every_timing_and_say_so() -> None:
    assert step_kind(True, 1024) == "rl" and step_kind(False, 32768) == "long" and step_kind(False, 32767) == "short"
    plan = default_plan().with_changes({"training.objective": "grpo", "training.micro_batch_size": 8})
    ee = step_time(plan).expected_error
    n_rl = sum(k == "rl" for k, _ in load_rows())
    if n_rl < MIN_CASES:
        assert ee.basis.startswith(f"any step ({n_rl} published RL steps, fewer than {MIN_CASES})")
    else:
        assert ee.basis.startswith(KIND_TEXT["rl"])


def test_cli_planner_text_and_gpus_show_it(capsys: pytest.CaptureFixture[str]) -> None:
    st = step_time(default_plan())
    assert run(["estimate"]) == 0
    out = capsys.readouterr().out
    assert f"step time {st.error_text()}" in out and "% too fast, worst " in out
    assert run(["gpus", "--gpu", "a100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "step, train and cost: ± " in out and "similar published runs" in out
    assert run(["gpus", "--json"]) == 0
    guide = json.loads(capsys.readouterr().out)
    assert guide["time_expected_error"]["median_pct"] == st.expected_error.median_pct


def test_a_gpu_preset_without_the_time_fields_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Point 2: a user GPU preset written for the old model (no SM count, matmul efficiency, kernel overhead,
    generation, sources) is refused with one line naming them; using it exits 2."""
    text = (ROOT / "presets/hardware/a100-80gb.toml").read_text()
    keep = [
        line for line in text.splitlines()
        if not line.startswith(("id ", "sm_count", "matmul_efficiency", "kernel_overhead_us", "time_source",
                                "generation"))
    ]  # fmt: skip
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "old-a100.toml").write_text("\n".join(keep) + "\n")
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    presets.reload()
    try:
        assert run(["estimate", "--gpu", "old-a100"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "old-a100.toml" in err[0]
        assert "generation, sm_count, matmul_efficiency, kernel_overhead_us, time_source" in err[0]
    finally:
        monkeypatch.undo()
        presets.reload()


def test_every_built_in_gpu_cites_its_time_figures() -> None:
    for g in presets.registry().gpus.values():
        assert g.sm_count > 0 and 0 < g.matmul_efficiency <= 1 and g.kernel_overhead_us > 0, g.id
        assert "sm_count" in g.time_source and "matmul_efficiency" in g.time_source, g.id
