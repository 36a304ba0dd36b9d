"""The Markdown review report: inputs, the memory breakdown with each figure's formula and source, the verdict,
and (where vramplan has them) the checklist and step-time figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vramplan.core.advice.checklist import checklist
from vramplan.core.files.planfile import utc_now, vramplan_version
from vramplan.core.memory.kinds import KIND_LABELS
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.describe import gpu_name, method_label, model_name, plan_title
from vramplan.core.plan.helpers.errors import printable
from vramplan.core.plan.helpers.units import fmt_count, gib_text
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.step import step_time

STATUS_MARK = {"ok": "ok", "warn": "warning", "fail": "FAIL", "manual": "check by hand", "ticked": "checked by hand"}
TIME_LABELS = {
    "step_seconds": ("Step time", "s"),
    "tokens_per_second": ("Tokens per second", ""),
    "tokens_per_second_per_gpu": ("Tokens per second per GPU", ""),
    "mfu": ("Model FLOPs utilization", ""),
    "bottleneck": ("Bottleneck", ""),
    "flops_per_step": ("FLOPs per step", ""),
    "train_hours": ("Time to train", "h"),
    "gpu_hours": ("GPU-hours", ""),
}


@dataclass(frozen=True)
class ReviewExtras:
    """What other parts of vramplan contribute to a review; None where not available.

    ``checklist``: items as ``vramplan check --json`` gives them (``id``, ``group``, ``status``, ``title``,
    ``detail``). ``time``: the ``"time"`` object of ``vramplan estimate --json`` (``step_seconds``,
    ``tokens_per_second``, ...).
    """

    checklist: tuple[Mapping[str, Any], ...] | None = None
    time: Mapping[str, Any] | None = None


def review_extras(plan: Plan, est: Estimate) -> ReviewExtras:
    """The checklist (its items as ``vramplan check --json`` gives them) and the step-time figures (the time
    model's ``"time"`` object, as in ``vramplan estimate --json``) for a plan."""
    st = step_time(plan)
    items = tuple(item.to_json() for item in checklist(plan, est, st))
    return ReviewExtras(checklist=items, time=st.to_json())


def _cell(text: object) -> str:
    """A Markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _g(n: int) -> str:
    return gib_text(n, 2)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple | list):
        return ", ".join(str(x) for x in v)
    return str(v)


def markdown_report(
    est: Estimate,
    *,
    title: str | None = None,
    note: str | None = None,
    created: str | None = None,
    extras: ReviewExtras | None = None,
) -> str:
    plan = est.plan
    out = [f"# {printable(title or plan_title(plan))}", ""]  # a user's text: never a raw escape sequence (`printable`)
    if note:
        out += ["> " + printable(line) for line in note.splitlines()] + [""]
    out += [
        f"Memory plan by vramplan {vramplan_version()}, {created or utc_now()}. Every figure is per GPU, for the "
        "busiest rank at the worst moment of a steady-state training step.",
        "",
        "## Verdict",
        "",
        *_verdict(est),
        "",
        "## Inputs",
        "",
        *_inputs(est),
        "",
        "## Memory per GPU",
        "",
        *_breakdown(est),
    ]
    checklist = extras.checklist if extras else None
    if checklist is not None:
        out += ["", "## Checklist", "", *_checklist(checklist)]
    time = extras.time if extras else None
    if time:
        out += ["", "## Step time", "", *_time(time)]
    return "\n".join(out) + "\n"


def _verdict(est: Estimate) -> list[str]:
    cap = est.gpu_capacity
    if est.fits:
        head = (
            f"**Fits**: {_g(est.total)} GiB of {_g(cap)} GiB per GPU at the peak, {_g(est.headroom)} GiB free "
            f"({est.headroom_fraction:.0%} headroom)."
        )
    else:
        head = (
            f"**Does not fit**: {_g(est.total)} GiB needed of {_g(cap)} GiB per GPU, over by {_g(-est.headroom)} GiB."
        )
    lines = [head, "", f"Peak: {est.peak_phase} phase, {est.peak.moment}."]
    if est.stage != "all":
        lines.append(f"Busiest pipeline stage: the {est.stage}.")
    if est.cpu_per_node or est.nvme_per_node:
        lines.append(
            f"Offloaded: host RAM {_g(est.cpu_per_node)} GiB per node, NVMe {_g(est.nvme_per_node)} GiB per node."
        )
    return lines


def _inputs(est: Estimate) -> list[str]:
    plan = est.plan
    m, hw, t, s = plan.model, plan.hardware, plan.training, plan.strategy
    method = method_label(t)
    parallel = f"data parallel {plan.data_parallel}, tensor parallel {s.tensor_parallel}, "
    parallel += f"pipeline parallel {s.pipeline_parallel}, ZeRO stage {s.zero_stage}"
    lines = [
        f"- Model: {model_name(m)}, "
        f"{fmt_count(est.params_total)} parameters ({fmt_count(est.params_trainable)} trainable)",
        f"- Hardware: {hw.nodes} node(s) x {hw.gpus_per_node} {gpu_name(plan)}",
        f"- Training: {method}, {t.regime}, {t.optimizer}; micro-batch {t.micro_batch_size} x {t.seq_len} "
        f"tokens, gradient accumulation {t.grad_accum_steps}",
        f"- Parallelism: {parallel}; offload optimizer {s.offload_optimizer}, parameters {s.offload_parameters}",
        f"- Memory savers: checkpointing {s.gradient_checkpointing}, {s.attention} attention, activation "
        f"compression {s.activation_compression}, fused cross-entropy {_value(s.fused_cross_entropy)}",
        "",
        "<details><summary>Every plan key</summary>",
        "",
        "| key | value |",
        "|---|---|",
    ]
    for table, values in plan.dump().items():
        if isinstance(values, dict):
            lines += [f"| `{table}.{k}` | {_cell(_value(v))} |" for k, v in values.items()]
        else:
            lines.append(f"| `{table}` | {_cell(_value(values))} |")
    lines += ["", "</details>"]
    return lines


def _breakdown(est: Estimate) -> list[str]:
    live = est.live_at_peak
    lines = [
        "| Component | Largest (GiB) | At peak (GiB) | Bytes (largest) | Formula | Source |",
        "|---|---:|---:|---:|---|---|",
    ]
    for kind, c in est.components.items():
        lines.append(
            f"| {KIND_LABELS.get(kind, kind)} | {_g(c.bytes)} | {_g(live.get(kind, 0))} | {c.bytes:,} | "
            f"{_cell(c.formula)} | {_cell(c.source)} |"
        )
    lines.append(f"| **Peak ({est.peak_phase})** | | **{_g(est.total)}** | {est.total:,} | | |")
    lines += [
        "",
        "Largest: each kind at its largest moment of the step; at peak: what is alive at the peak moment "
        "(these sum to the peak).",
        "",
        "### Overhead terms",
        "",
        "| Term | GiB | Bytes | Formula | Source |",
        "|---|---:|---:|---|---|",
    ]
    for term in est.overhead_terms:
        lines.append(
            f"| {term.name} | {_g(term.bytes)} | {term.bytes:,} | {_cell(term.formula)} | {_cell(term.source)} |"
        )
    return lines


def _checklist(items: tuple[Mapping[str, Any], ...]) -> list[str]:
    if not items:
        return ["No checklist items."]
    lines = ["| Status | Group | Item | Detail |", "|---|---|---|---|"]
    for item in items:
        status = str(item.get("status", ""))
        if status == "manual" and item.get("ticked"):
            status = "ticked"
        detail = str(item.get("detail", ""))
        fix = item.get("fix")
        if isinstance(fix, Mapping) and fix.get("effect"):
            sets = " ".join(f"--set {a}" for a in fix.get("set", ()))
            detail += f" **Fix**: {fix['effect']}" + (f" (`{sets}`)" if sets else "")
        lines.append(
            f"| {STATUS_MARK.get(status, status)} | {_cell(item.get('group', ''))} | "
            f"{_cell(item.get('title', item.get('id', '')))} | {_cell(detail)} |"
        )
    return lines


def _flop(n: float) -> str:
    """``702.3 TFLOP``: a FLOP count with its unit."""
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} FLOP"


# Figures written for people: labels, percentages, units (the JSON keys stay as they are).
TIME_TEXT: dict[str, tuple[str, Callable[[Any], str]]] = {
    "assumed_figures": ("Assumed GPU figures", str),
    "flops_per_step": ("Model FLOPs per step", _flop),
    "hardware_flops_per_step": ("Hardware FLOPs per step (with recomputation)", _flop),
    "tokens_per_step": ("Tokens per step", lambda v: f"{v:,}"),
    "tokens_per_second": ("Tokens per second", lambda v: f"{v:,.0f}"),
    "tokens_per_second_per_gpu": ("Tokens per second per GPU", lambda v: f"{v:,.0f}"),
    "mfu": ("Model FLOPs utilization (MFU)", lambda v: f"{v:.1%}"),
    "mfu_setting": ("Matmul efficiency set by training.mfu", lambda v: f"{v:.1%} of peak"),
    "hfu": ("Hardware FLOPs utilization (HFU)", lambda v: f"{v:.1%}"),
    "peak_tflops": ("GPU peak (dense)", lambda v: f"{v:g} TFLOP/s"),
}


def _expected_error(ee: Mapping[str, Any]) -> str:
    """The step time's `expected_error` as the CLI writes it (``± 26% on 7 similar published runs ...``)."""
    worst = ee.get("worst_under_pct", 0)
    fast = f"worst {worst:.0f}% too fast" if worst else "none too fast"
    return f"± {ee.get('median_pct', 0):.0f}% on {ee.get('n_cases', 0)} similar published runs ({fast})"


def _time(time: Mapping[str, Any]) -> list[str]:
    lines = ["| Figure | Value |", "|---|---:|"]
    ee = time.get("expected_error")
    if isinstance(ee, Mapping):
        lines.append(f"| Expected error of the step time | {_cell(_expected_error(ee))} |")
    for key, value in time.items():
        if isinstance(value, Mapping | list | tuple) or value is None:
            continue
        if key in TIME_TEXT:
            label, show = TIME_TEXT[key]
            lines.append(f"| {_cell(label)} | {_cell(show(value))} |")
            continue
        label, unit = TIME_LABELS.get(key, (key.replace("_", " ").capitalize(), ""))
        if isinstance(value, bool):
            shown = _value(value)
        elif isinstance(value, float):
            shown = f"{value:,.4g}"
        else:
            shown = f"{value:,}" if isinstance(value, int) else str(value)
        lines.append(f"| {_cell(label)} | {_cell(shown)}{' ' + unit if unit else ''} |")
    return lines
