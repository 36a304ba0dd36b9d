"""Plan files: read a TOML plan (one-line errors naming file and key), parse ``--set table.key=value``.

A plan file may be an exported one (`core.planfile`): its ``[meta]`` is checked (a newer format is refused with an
upgrade hint) and its ``[estimate]`` is set aside, recomputed, and compared; a difference becomes a notice.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import PlanError, PlanNotice
from core.plan import Plan, default_plan, plan_from_dict
from core.planfile import Meta, estimate_changes, newer_hint, parse_meta
from core.tomlio import loads, read_toml


@dataclass(frozen=True)
class PlanFile:
    """A plan read from a file, with what an exported file carries besides the plan."""

    path: str
    plan: Plan
    meta: Meta | None = None  # None: a hand-written plan without [meta]
    stored_estimate: dict[str, Any] | None = None  # as read; never used as input
    notices: tuple[str, ...] = ()  # one line each, e.g. the estimate changed since export


def load_plan_file(path: str | Path) -> PlanFile:
    """Read and validate a plan file (hand-written or exported); errors are one `PlanError` naming file and key."""
    return plan_file_from_data(read_toml(path), str(path))


def plan_file_from_data(raw: dict[str, Any], where: str) -> PlanFile:
    """A parsed plan file (``tomllib`` output) validated: ``[meta]`` checked, ``[estimate]`` set aside, compared."""
    raw = dict(raw)
    try:
        meta = parse_meta(raw.pop("meta")) if "meta" in raw else None
        stored = raw.pop("estimate", None)
        if stored is not None and not isinstance(stored, dict):
            raise PlanError("must be a table (it is written by vramplan export)", "estimate")
        try:
            plan = plan_from_dict(raw)
        except PlanError as exc:
            hint = newer_hint(meta)
            if not hint:
                raise
            # A key this vramplan does not know is most likely new: say so rather than guess a misspelling.
            message = " ".join(exc.message.split()[:2]) if exc.message.startswith("unknown ") else exc.message
            raise PlanError(message.rstrip(",;") + hint, exc.where) from None
    except PlanError as exc:
        raise exc.at(where) from None
    notices: list[str] = []
    if stored is not None:
        from core.estimate import estimate

        change = estimate_changes(stored, estimate(plan))
        if change:
            by = f" with vramplan {meta.vramplan_version}" if meta and meta.vramplan_version else ""
            notices.append(f"{where}: estimate changed since this plan was exported{by}: {change} (recomputed)")
    return PlanFile(where, plan, meta, stored, tuple(notices))


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file. Its notices are emitted as `PlanNotice` warnings (the CLI prints them)."""
    pf = load_plan_file(path)
    for line in pf.notices:
        warnings.warn(line, PlanNotice, stacklevel=2)
    return pf.plan


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (``3``, ``true``, ``["q","v"]``, ``"x"``), else a bare string."""
    try:
        return loads(f"v = {text}")["v"]
    except PlanError:
        return text


def parse_set(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise PlanError(f"expected table.key=value, got {item!r}", "--set")
    if key.count(".") != 1:
        raise PlanError("keys are table.key, e.g. strategy.zero_stage", f"--set {key}")
    return key, parse_value(value.strip())


def apply_overrides(
    plan: Plan, model: str | None = None, gpu: str | None = None, sets: list[str] | tuple[str, ...] = ()
) -> Plan:
    """``--model``, ``--gpu`` and ``--set table.key=value`` applied to a plan (validated)."""
    changes: dict[str, Any] = {}
    if model:
        changes["model.preset"] = model
    if gpu:
        changes["hardware.gpu"] = gpu
    for item in sets:
        key, value = parse_set(item)
        changes[key] = value
    return plan.with_changes(changes) if changes else plan


def resolve_plan(
    path: str | None = None, model: str | None = None, gpu: str | None = None, sets: list[str] | tuple[str, ...] = ()
) -> Plan:
    """The plan a headless command works on: a file (or the default plan), then --model, --gpu, --set."""
    return apply_overrides(load_plan(path) if path else default_plan(), model, gpu, sets)
