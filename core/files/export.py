"""Exporting a plan: the formats, their default file names, rendering to text, and writing without loss.

Everything a front end needs is here, so the CLI's ``vramplan export`` and the TUI's export dialog stay thin:

- `FORMATS` (id -> extension, label), `format_for_path` (guess from an extension);
- `default_file_name(plan, fmt)`: a name derived from the plan (``llama-7b-8xa100-80gb-full-zero3.toml``);
- `render(fmt, plan, ...) -> Rendered`: the text and any warnings (what a DeepSpeed or accelerate config cannot
  express);
- `export_plan(path, fmt, plan, overwrite=...)`: render, then `core.files.safewrite.write_atomic` (never overwrites
  without ``overwrite=True``; raises `WriteError`/`OverwriteRefused`, one line each).

`core.files.review.review_extras` is the one place where other parts of vramplan add to every export: the checklist's
items (the TOML's ``[estimate.checklist]`` summary, the report's checklist section) and the step-time figures (the
report's step-time section, ``[estimate.time]``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vramplan.core.files.accelerate_export import accelerate_config
from vramplan.core.files.deepspeed_export import deepspeed_config
from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.review import ReviewExtras, markdown_report, review_extras
from vramplan.core.files.safewrite import check_target, write_atomic
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.describe import model_base, modified_keys
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.paths import user_path
from vramplan.core.plan.schema.plan import Plan


@dataclass(frozen=True)
class ExportFormat:
    id: str
    extension: str
    label: str


FORMATS: dict[str, ExportFormat] = {
    f.id: f
    for f in (
        ExportFormat("toml", ".toml", "plan file (TOML): reloads to the same plan"),
        ExportFormat("deepspeed", ".deepspeed.json", "DeepSpeed config (JSON)"),
        ExportFormat("accelerate", ".accelerate.yaml", "accelerate FSDP config (YAML)"),
        ExportFormat("markdown", ".md", "review report (Markdown)"),
    )
}


@dataclass(frozen=True)
class Rendered:
    format: str
    text: str
    warnings: tuple[str, ...] = ()
    written: Path | None = None  # the file `export_plan` wrote (a symlink's target)


def format_for_path(path: str | Path) -> str | None:
    """The format a file name asks for (``.toml``, ``.json``, ``.md``, ``.accelerate.yaml``); None if it does not
    say."""
    name = str(path).lower()
    if name.endswith(".toml"):
        return "toml"
    if name.endswith(".json"):
        return "deepspeed"
    if name.endswith((".md", ".markdown")):
        return "markdown"
    if name.endswith((".accelerate.yaml", ".accelerate.yml")):  # a bare .yaml could be any tool's config
        return "accelerate"
    return None


def output_format(path: str | Path) -> str:
    """The format ``-o PATH`` asks for: by its extension, TOML without one; an extension that names no format
    (``ds_config.yaml``) is a `PlanError` naming the formats, never a TOML file under a misleading name."""
    fmt = format_for_path(path)
    if fmt is not None:
        return fmt
    suffix = Path(path).suffix
    if suffix and not suffix[1:].isdigit():  # plan.v2 or run.3 are names, not formats
        raise PlanError(
            f"{suffix} is not an export format: .toml (plan), .json (DeepSpeed config), .md (Markdown report), "
            ".accelerate.yaml (accelerate config); or give --format toml|deepspeed|accelerate|markdown",
            "-o",
        )
    return "toml"


def default_file_name(plan: Plan, fmt: str = "toml") -> str:
    """A file name that says what the plan is: ``llama-7b-8xa100-80gb-full-zero3.toml``."""
    m, hw, t, s = plan.model, plan.hardware, plan.training, plan.strategy
    base = None if m.preset else model_base(m)  # a config.json: its model's name (mistral-nemo-base-2407)
    if m.preset:
        model = m.preset
    elif base is not None:
        model = base[0].rstrip("/").rsplit("/", 1)[-1] + ("-modified" if modified_keys(m, base) else "")
    else:
        model = f"{m.model_type}-{m.num_hidden_layers}l-{m.hidden_size}h"
    parts = [model, f"{hw.total_gpus}x{hw.gpu}", t.method, f"zero{s.zero_stage}"]
    if s.tensor_parallel > 1:
        parts.append(f"tp{s.tensor_parallel}")
    if s.pipeline_parallel > 1:
        parts.append(f"pp{s.pipeline_parallel}")
    if s.offload_optimizer != "none" or s.offload_parameters != "none":
        parts.append("offload")
    stem = re.sub(r"[^a-z0-9._-]+", "-", "-".join(parts).lower()).strip("-.") or "plan"
    return stem + FORMATS[fmt].extension


def render(
    fmt: str,
    plan: Plan,
    *,
    est: Estimate | None = None,
    title: str | None = None,
    note: str | None = None,
    created: str | None = None,
    extras: ReviewExtras | None = None,
    plan_dir: Path | None = None,
) -> Rendered:
    """The exported text of ``plan`` in format ``fmt`` (a key of `FORMATS`); ``plan_dir``: the directory a TOML
    plan is written to (its ``hf_config`` is stored relative to it)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
    if fmt in ("deepspeed", "accelerate"):
        config = deepspeed_config(plan) if fmt == "deepspeed" else accelerate_config(plan)
        warning = config.warning()
        return Rendered(fmt, config.text(), (warning,) if warning else ())
    if est is None:
        est = estimate(plan)
    if extras is None:
        extras = review_extras(plan, est)
    if fmt == "toml":
        text = plan_toml(
            plan,
            est,
            title=title,
            note=note,
            created=created,
            checklist=extras.checklist,
            time=extras.time,
            plan_dir=plan_dir,
        )
        return Rendered(fmt, text)
    return Rendered(fmt, markdown_report(est, title=title, note=note, created=created, extras=extras))


# the extensions each format's file may have (a name without one, or ``plan.3``, is any format's), and what it is
SUFFIXES = {
    "toml": (".toml",),
    "deepspeed": (".json",),
    "markdown": (".md", ".markdown"),
    "accelerate": (".yaml", ".yml"),
}
WHAT = {
    "toml": "a plan file",
    "deepspeed": "a DeepSpeed config",
    "markdown": "a report",
    "accelerate": "an accelerate config",
}


def export_target(text: str | Path, fmt: str, format_given: bool = False) -> Path:
    """The file an export goes to, from the path as the user typed it: ``~`` expanded, and refused in one line
    (`core.files.safewrite.WriteError`, `PlanError`) when it cannot be this format's file: a path ending in
    ``/`` (a directory: ``newdir/`` must not become a file ``newdir``), or an extension that names another format
    or none (TOML into ``x.yaml`` or ``x.json``), unless the format was given explicitly (``--format``).
    What the CLI and the app's export dialog both check, before anything is rendered."""
    typed = str(text)
    path = user_path(typed)
    if typed.endswith(("/", os.sep)):
        check_target(typed)  # "ends with / (a directory)": one WriteError, nothing written
    suffix, name = path.suffix.lower(), path.name.lower()
    if format_given or not suffix or suffix[1:].isdigit() or name.endswith(SUFFIXES[fmt]):
        return path
    other = next((f for f, ends in SUFFIXES.items() if name.endswith(ends)), None)
    better = f"name it {path.stem}{FORMATS[fmt].extension}"
    if other is None:
        raise PlanError(f"{path.suffix} is no export format's extension: {better}", typed)
    raise PlanError(f"the name of {WHAT[other]}, not {WHAT[fmt]}: {better}, or export {WHAT[other]}", typed)


def export_plan(
    path: str | Path, fmt: str, plan: Plan, *, overwrite: bool = False, format_given: bool = False, **options: Any
) -> Rendered:
    """Render ``plan`` and write it to ``path`` (as typed: `export_target`) atomically: the one writer of exports,
    the CLI's and the app's. Nothing is written if rendering fails; an existing file is replaced only with
    ``overwrite=True`` (else `core.files.safewrite.OverwriteRefused`)."""
    target = export_target(path, fmt, format_given)
    check_target(target, overwrite)  # before rendering: a FIFO or a missing folder is said at once
    rendered = render(fmt, plan, plan_dir=target.absolute().parent, **options)
    written = write_atomic(target, rendered.text, overwrite=overwrite)
    return replace(rendered, written=written)
