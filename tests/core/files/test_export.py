"""core.files.export: formats, default file names, rendering, the review report and its hooks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vramplan.core.files.export import FORMATS, default_file_name, export_plan, format_for_path, render
from vramplan.core.files.review import ReviewExtras, review_extras
from vramplan.core.files.safewrite import OverwriteRefused
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.describe import plan_title
from vramplan.core.plan.schema.plan import default_plan, plan_from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_default_file_names_say_what_the_plan_is() -> None:
    plan = default_plan()
    assert default_file_name(plan) == "llama-7b-8xa100-80gb-full-zero3.toml"
    assert default_file_name(plan, "deepspeed") == "llama-7b-8xa100-80gb-full-zero3.deepspeed.json"
    assert default_file_name(plan, "markdown") == "llama-7b-8xa100-80gb-full-zero3.md"
    raw = plan.dump()
    del raw["model"]["preset"]  # a custom model: named by its shape
    other = plan_from_dict(raw).with_changes(
        {
            "training.method": "lora",
            "strategy.zero_stage": 1,
            "strategy.pipeline_parallel": 2,
            "strategy.tensor_parallel": 2,
            "strategy.offload_optimizer": "cpu",
            "hardware.nodes": 2,
        }
    )
    assert default_file_name(other) == "llama-32l-4096h-16xa100-80gb-lora-zero1-tp2-pp2-offload.toml"


def test_format_for_path() -> None:
    assert format_for_path("a/plan.TOML") == "toml"
    assert format_for_path("ds_config.json") == "deepspeed"
    assert format_for_path("review.md") == "markdown"
    assert format_for_path("plan") is None
    assert all(format_for_path("x" + f.extension) == f.id for f in FORMATS.values())


def test_render_each_format() -> None:
    plan = default_plan()
    toml = render("toml", plan, title="T", created="2025-01-01T00:00:00Z")
    assert tomllib.loads(toml.text)["meta"]["title"] == "T" and toml.warnings == ()
    ds = render("deepspeed", plan)
    assert json.loads(ds.text)["zero_optimization"]["stage"] == 3
    md = render("markdown", plan)
    assert md.text.startswith(f"# {plan_title(plan)}\n")
    with pytest.raises(ValueError, match="unknown export format"):
        render("yaml", plan)


def test_deepspeed_warnings_come_with_the_rendering() -> None:
    plan = default_plan().with_changes({"strategy.gradient_checkpointing": "selective"})
    (warning,) = render("deepspeed", plan).warnings
    assert "strategy.gradient_checkpointing = selective" in warning


def test_markdown_report_shows_every_component_with_formula_and_source() -> None:
    plan = default_plan().with_changes({"hardware.gpu": "rtx-3070-8gb", "strategy.zero_stage": 0})
    est = estimate(plan)
    text = render("markdown", plan, est=est, note="Why not\nZeRO?").text
    assert "**Does not fit**" in text
    assert "> Why not\n> ZeRO?" in text
    for c in est.components.values():
        row = next(line for line in text.splitlines() if line.startswith(f"| {c.label} |"))
        assert f"{c.bytes:,}" in row
        assert c.formula.replace("|", "\\|") in row and c.source.replace("|", "\\|") in row
    for term in est.overhead_terms:
        assert f"| {term.name} | " in text
    assert f"**Peak ({est.peak_phase})**" in text and f"{est.total:,}" in text
    assert "| `training.seq_len` | 2048 |" in text
    assert "## Step time" in text and "| Step time |" in text  # the time model's figures
    # the checklist: the capacity item fails (ZeRO-0 on an 8 GiB card) and carries its measured fix
    section = text.split("## Checklist", 1)[1].split("## Step time", 1)[0]
    row = next(line for line in section.splitlines() if "| Fits in GPU memory |" in line)
    assert row.startswith("| FAIL | oom |") and "**Fix**:" in row and "--set " in row


def test_markdown_checklist_and_time_hooks() -> None:
    plan = default_plan()
    extras = ReviewExtras(
        checklist=({"id": "nan.clip", "group": "nan", "status": "fail", "title": "Clip gradients", "detail": "a|b"},),
        time={"step_seconds": 1.25, "tokens_per_second": 52000.0, "bottleneck": "compute", "fits": True},
    )
    text = render("markdown", plan, extras=extras).text
    assert "## Checklist" in text and "| FAIL | nan | Clip gradients | a\\|b |" in text
    assert "## Step time" in text and "| Step time | 1.25 s |" in text and "| Bottleneck | compute |" in text
    toml = tomllib.loads(render("toml", plan, extras=extras).text)
    assert toml["estimate"]["checklist"]["failing"] == ["nan.clip"]
    assert toml["estimate"]["time"]["step_seconds"] == 1.25


def test_review_extras_carry_the_step_time_and_the_checklist() -> None:
    from vramplan.core.advice.checklist import checklist
    from vramplan.core.time.step import step_time

    plan = default_plan().with_changes({"training.grad_clip": 0.0, "checklist.ticked": ["nan.data"]})
    extras = review_extras(plan, estimate(plan))
    assert extras.time == step_time(plan).to_json()
    assert extras.checklist == tuple(item.to_json() for item in checklist(plan))
    toml = tomllib.loads(render("toml", plan, extras=extras).text)
    summary = toml["estimate"]["checklist"]
    assert "nan.grad_clip" in summary["warning"] and summary["failing"] == []
    assert toml["checklist"]["ticked"] == ["nan.data"]  # the ticks travel in the plan's own [checklist] table
    md = render("markdown", plan, extras=extras).text
    assert "| checked by hand | nan | Every batch has targets |" in md
    assert "| check by hand | slow | Data loading keeps up |" in md


def test_export_plan_writes_atomically_and_refuses_to_overwrite(tmp_path: Path) -> None:
    plan = plan_from_dict({"model": {"preset": "qwen2.5-7b"}})
    path = tmp_path / default_file_name(plan)
    export_plan(path, "toml", plan)
    first = path.read_bytes()
    with pytest.raises(OverwriteRefused):  # a report into a .toml name: the format given, as --format gives it
        export_plan(path, "markdown", plan, format_given=True)
    assert path.read_bytes() == first
    export_plan(path, "markdown", plan, overwrite=True, format_given=True)
    assert path.read_text().startswith("# Qwen")
