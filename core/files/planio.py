"""Plan files: read a TOML plan (one-line errors naming file and key), parse ``--set table.key=value``.

A plan file may be an exported one (`core.files.planfile`): its ``[meta]`` is checked (a newer format is refused with an
upgrade hint) and its ``[estimate]`` is set aside, recomputed, and compared; a difference becomes a notice.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from vramplan.core.files.planfile import Meta, estimate_changes, newer_hint, parse_meta
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue.presets import register_carried
from vramplan.core.plan.helpers.errors import PlanError, PlanNotice
from vramplan.core.plan.helpers.paths import absolute, user_path
from vramplan.core.plan.helpers.tomlio import read_toml
from vramplan.core.plan.keys import apply_overrides
from vramplan.core.plan.schema.plan import Plan, default_only, default_plan, over_default_plan, plan_from_dict


class PlanFile(NamedTuple):
    """A plan read from a file, with what an exported file carries besides the plan."""

    path: str
    plan: Plan
    meta: Meta | None = None  # None: a hand-written plan without [meta]
    stored_estimate: dict[str, Any] | None = None  # as read; never used as input
    notices: tuple[str, ...] = ()  # one line each, e.g. the estimate changed since export


def load_plan_file(path: str | Path) -> PlanFile:
    """Read and validate a plan file (hand-written or exported); errors are one `PlanError` naming file and key.
    ``[model] hf_config`` is relative to the plan file's directory (the plan keeps it as an absolute path)."""
    raw = read_toml(path)
    model = raw.get("model")
    missing = ""
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str) and model["hf_config"].strip():
        model["hf_config"] = str(absolute(Path(path).parent / user_path(model["hf_config"])))
        if not Path(model["hf_config"]).exists():
            missing = model["hf_config"]
    pf = plan_file_from_data(raw, str(path))
    if missing:  # the plan loaded, so its model keys are all there: the config.json is only provenance
        line = f"{path}: model.hf_config {missing} not found; the model keys in the file are used"
        pf = pf._replace(notices=(line, *pf.notices))
    return pf


def in_file(exc: PlanError, raw: dict[str, Any], hint: str) -> PlanError:
    """A plan's problem as its file's, each of its others too (every bad key of the file): a key the default plan
    alone has is said so; from a newer vramplan (``hint``), an unknown key is most likely new, not misspelt."""
    if not hint:
        message = exc.message + default_only(raw, exc.where or "")
    else:
        message = " ".join(exc.message.split()[:2]) if exc.message.startswith("unknown ") else exc.message
        message = message.rstrip(",;") + hint
    return PlanError(message, exc.where, tuple(in_file(e, raw, hint) for e in exc.others))


def plan_file_from_data(raw: dict[str, Any], where: str) -> PlanFile:
    """A parsed plan file (``tomllib`` output) validated: ``[meta]`` checked, ``[estimate]`` set aside, compared."""
    raw = dict(raw)
    try:
        meta = parse_meta(raw.pop("meta")) if "meta" in raw else None
        if "presets" in raw:  # what the plan names that is not built in: known here from now on
            register_carried(raw.pop("presets"), f"{where} (carried by the plan file)")
        stored = raw.pop("estimate", None)
        if stored is not None and not isinstance(stored, dict):
            raise PlanError("must be a table (it is written by vramplan export)", "estimate")
        try:
            plan = plan_from_dict(over_default_plan(raw))
        except PlanError as exc:
            raise in_file(exc, raw, newer_hint(meta)) from None
    except PlanError as exc:
        raise exc.at(where) from None
    notices: list[str] = []
    if stored is not None:
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


def resolve_plan(
    path: str | None = None,
    model: str | None = None,
    gpu: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    hf_config: str | None = None,
    start: Callable[[], Plan] = default_plan,
) -> Plan:
    """The plan a headless command works on: a file (or ``start()``, called only without one: the CLI passes
    `vramplan.machine.nvidia_smi.starting_plan`, the default plan on this machine's GPUs), then --model or --hf-config,
    --gpu, --set."""
    if model and hf_config:
        raise PlanError("give --model or --hf-config, not both", "--hf-config")
    return apply_overrides(load_plan(path) if path else start(), model, gpu, sets, hf_config)
