"""Exported plan files: the plan tables, then ``[meta]`` and ``[estimate]`` for a reviewer.

An exported file is an ordinary plan file (every table of `Plan`, in its order, with every key spelled out) plus:

- ``[meta]``: ``format_version`` (`FORMAT_VERSION`; a newer one is refused with a clear error),
  ``vramplan_version``, ``created`` (ISO 8601 UTC), optional ``title`` and ``note``;
- ``[presets]``: the presets the plan names that are not built in (a user's model or GPU file, a GPU detected
  without a preset: `core.plan.catalogue.presets.carried_presets`), so that the file loads to the same estimate
  on a colleague's machine, or on this one when nvidia-smi is not asked; the loader registers the ones unknown
  there;
- ``[estimate]``: the computed breakdown in bytes and GiB, the fit verdict and the peak phase, the checklist's
  summary (``[estimate.checklist]``) and the step time (``[estimate.time]``), so the numbers can be read without
  running anything.

On load (`core.files.planio.load_plan_file`) these tables are stripped before the plan is validated. ``[estimate]``
is never used as input: the plan is re-estimated, and if the stored figures differ the loader says so.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from vramplan import __version__
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue.presets import carried_presets
from vramplan.core.plan.helpers.errors import PlanError, shown
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.training import TrainingConfig

FORMAT_VERSION = 1
META_KEYS = ("format_version", "vramplan_version", "created", "title", "note")
RESERVED_TABLES = ("meta", "presets", "estimate")
# The [estimate] figures that say whether the numbers changed (GiB and text are derived from these).
COMPARED_KEYS = ("total_bytes", "fits", "peak_phase", "gpu_capacity_bytes", "per_gpu_bytes")

HEADER = (
    "# vramplan plan file: open it with `vramplan FILE`, or `vramplan estimate FILE`.\n"
    "# [meta] and [estimate] are written for reviewers; loading recomputes the estimate and never reads it.\n\n"
)


def vramplan_version() -> str:
    return __version__


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.3.0"`` -> ``(0, 3, 0)``; pre-release suffixes are ignored (``"1.0rc1"`` -> ``(1, 0)``)."""
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d{1,9}", piece.strip())  # a 5000-digit "version" is no version (and int() refuses it)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


class Meta(NamedTuple):
    """The ``[meta]`` table of an exported plan."""

    format_version: int = FORMAT_VERSION
    vramplan_version: str | None = None
    created: str | None = None
    title: str | None = None
    note: str | None = None

    def dump(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in META_KEYS if getattr(self, k) is not None}

    @property
    def newer_than_this(self) -> bool:
        """Written by a vramplan newer than the one running."""
        if self.format_version > FORMAT_VERSION:
            return True
        return bool(self.vramplan_version) and version_tuple(self.vramplan_version or "") > version_tuple(
            vramplan_version()
        )


def utc_now() -> str:
    """Now, ISO 8601 in UTC to the second: ``2025-03-01T12:34:56Z``."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_meta(raw: Any) -> Meta:
    """Check a ``[meta]`` table read from a file. A newer format is refused with an upgrade hint."""
    if not isinstance(raw, dict):
        raise PlanError("must be a table ([meta])", "meta")
    fv = raw.get("format_version", FORMAT_VERSION)
    if isinstance(fv, bool) or not isinstance(fv, int) or not 1 <= fv <= 1_000_000:
        raise PlanError(f"must be a whole number from 1 to 1,000,000 (got {shown(fv)})", "meta.format_version")
    written_by = raw.get("vramplan_version")
    if written_by is not None and not isinstance(written_by, str):
        raise PlanError(f"must be a string (got {shown(written_by)})", "meta.vramplan_version")
    if fv > FORMAT_VERSION:
        by = f"vramplan {written_by}" if written_by else "a newer vramplan"
        raise PlanError(
            f"written by {by} in plan format {fv}; this vramplan {vramplan_version()} reads format "
            f"{FORMAT_VERSION} and older: upgrade vramplan to open it",
            "meta.format_version",
        )
    values: dict[str, Any] = {"format_version": fv, "vramplan_version": written_by}
    for key in ("created", "title", "note"):
        value = raw.get(key)
        if key == "created" and isinstance(value, _dt.datetime | _dt.date):  # a TOML date-time, not a string
            value = value.isoformat()
        if value is not None and not isinstance(value, str):
            raise PlanError(f"must be a string (got {shown(value)})", f"meta.{key}")
        values[key] = value
    meta = Meta(**values)
    unknown = [k for k in raw if k not in META_KEYS]
    if unknown:
        hint = newer_hint(meta)
        raise PlanError(f"unknown key{hint or ' (known: ' + ', '.join(META_KEYS) + ')'}", f"meta.{unknown[0]}")
    return meta


def newer_hint(meta: Meta | None) -> str:
    """``; written by vramplan 0.4.0, newer than this 0.1.0: upgrade vramplan`` when that explains an error."""
    if meta is None or not meta.newer_than_this:
        return ""
    by = f"vramplan {meta.vramplan_version}" if meta.vramplan_version else f"plan format {meta.format_version}"
    return f" (this plan was written by {by}, newer than this vramplan {vramplan_version()}: upgrade vramplan)"


# -- the [estimate] table -----------------------------------------------------------------------------------


def _gib(n: int) -> float:
    return round(n / GiB, 3)


def estimate_table(
    est: Estimate, checklist: tuple[Mapping[str, Any], ...] | None = None, time: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``[estimate]`` table: figures in bytes (exact) and GiB (rounded to 3 decimals, for reading).

    Hooks: ``checklist`` (the checklist's items, each with at least ``id`` and ``status``) adds
    ``[estimate.checklist]`` with counts per status and the failing and warning ids; ``time`` (the ``"time"`` object of
    ``vramplan estimate --json``) adds ``[estimate.time]``.
    """
    per_gpu = est.per_gpu()
    table: dict[str, Any] = {
        "fits": est.fits,
        "peak_phase": est.peak_phase,
        "peak_moment": est.peak.moment,
        "total_bytes": est.total,
        "total_gib": _gib(est.total),
        "gpu_capacity_bytes": est.gpu_capacity,
        "gpu_capacity_gib": _gib(est.gpu_capacity),
        "headroom_bytes": est.headroom,
        "headroom_gib": _gib(est.headroom),
        "headroom_percent": round(100 * est.headroom_fraction, 1),
        "busiest_stage": est.stage,
        "parameters_total": est.params_total,
        "parameters_trainable": est.params_trainable,
        "host_ram_per_node_bytes": est.cpu_per_node,
        "nvme_per_node_bytes": est.nvme_per_node,
        "per_gpu_bytes": per_gpu,
        "per_gpu_gib": {k: _gib(v) for k, v in per_gpu.items()},
        "live_at_peak_bytes": est.live_at_peak,
        "overhead_bytes": dict(est.overhead_bytes),
    }
    if checklist is not None:
        table["checklist"] = checklist_summary(checklist)
    if time:
        table["time"] = {k: v for k, v in time.items() if isinstance(v, int | float | str | bool)}
    return table


def checklist_summary(items: tuple[Mapping[str, Any], ...]) -> dict[str, Any]:
    counts = dict.fromkeys(("ok", "warn", "fail", "manual"), 0)
    for item in items:
        status = str(item.get("status", "manual"))
        counts[status] = counts.get(status, 0) + 1
    failing = [str(item.get("id")) for item in items if item.get("status") == "fail"]
    warning = [str(item.get("id")) for item in items if item.get("status") == "warn"]
    return {**counts, "failing": failing, "warning": warning}


def _bytes(value: Any) -> int | None:
    """A stored byte count, if it is one (a whole number a GPU could hold; a 400-digit one would overflow the
    division into GiB)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64 else None


def estimate_changes(stored: Mapping[str, Any], est: Estimate) -> str | None:
    """What differs between a file's stored ``[estimate]`` and the recomputed one, in words; None if nothing.
    ``[estimate]`` is never input: a value that is not what vramplan writes is only "different"."""
    fresh = estimate_table(est)
    if all(stored.get(k) == fresh[k] for k in COMPARED_KEYS):
        return None
    old_total = _bytes(stored.get("total_bytes"))
    parts = []
    if old_total is not None and old_total != est.total:
        parts.append(f"peak {old_total / GiB:.2f} -> {est.total / GiB:.2f} GiB per GPU")
    if stored.get("fits") != est.fits and isinstance(stored.get("fits"), bool):
        parts.append("now fits" if est.fits else "no longer fits")
    if stored.get("peak_phase") != est.peak_phase and isinstance(stored.get("peak_phase"), str):
        parts.append(f"peak phase {stored['peak_phase']} -> {est.peak_phase}")
    old_cap = _bytes(stored.get("gpu_capacity_bytes"))
    if old_cap is not None and old_cap != est.gpu_capacity:
        parts.append(f"GPU memory {old_cap / GiB:.1f} -> {est.gpu_capacity / GiB:.1f} GiB")
    if not parts:
        old = stored.get("per_gpu_bytes")
        old = old if isinstance(old, dict) else {}
        for kind, new in fresh["per_gpu_bytes"].items():
            if old.get(kind) != new:
                before = f"{old[kind] / GiB:.2f}" if _bytes(old.get(kind)) is not None else "none"
                parts.append(f"{kind} {before} -> {new / GiB:.2f} GiB")
                break
    return "; ".join(parts) or "stored figures unreadable"


# -- writing ------------------------------------------------------------------------------------------------


def relative_path(path: Path, start: Path) -> str:
    """``path`` relative to the directory ``start`` (``../models/config.json``), or as given where no relative
    path leads there (another drive)."""
    try:
        return Path(os.path.relpath(path, start)).as_posix()
    except ValueError:
        return str(path)


# The [training] keys of adapters and a quantized base: full fine-tuning reads none of them.
ADAPTER_KEYS = (
    "lora_rank",
    "lora_targets",
    "lora_dtype",
    "lora_dropout",
    "quantization",
    "double_quantization",
    "bnb_generation",
    "kbit_prepare",
    "quantized_modules",
    "quant_compute_dtype",
)


def without_adapter_defaults(training: dict[str, Any]) -> dict[str, Any]:
    """A full fine-tuning's ``[training]`` table without the adapter keys at their defaults (loaded back, the
    defaults return, so the plan is the same; a key set to another value stays, as the plan holds it)."""
    defaults = TrainingConfig.model_construct().model_dump(mode="json", include=set(ADAPTER_KEYS))
    return {k: v for k, v in training.items() if not (k in defaults and v == defaults[k])}


def plan_toml(
    plan: Plan,
    est: Estimate | None = None,
    *,
    title: str | None = None,
    note: str | None = None,
    created: str | None = None,
    checklist: tuple[Mapping[str, Any], ...] | None = None,
    time: Mapping[str, Any] | None = None,
    plan_dir: Path | None = None,
) -> str:
    """The exported TOML text of a plan. Same plan and ``created`` -> same bytes. ``plan_dir``: the directory
    the file goes to; ``[model] hf_config`` is written relative to it where possible (it is provenance: the
    model keys are all written, so the file opens without the config.json).

    The plan tables come from `Plan.dump` in the model's field order, so a table added to `Plan` is exported
    (and reloaded) without touching this function.
    """
    if est is None:
        from vramplan.core.memory.peak import estimate

        est = estimate(plan)
    data = plan.dump()
    if plan.training.method == "full":
        data["training"] = without_adapter_defaults(data["training"])
    hf_config = data.get("model", {}).get("hf_config")
    if plan_dir is not None and isinstance(hf_config, str):
        data["model"]["hf_config"] = relative_path(Path(hf_config), plan_dir)
    clash = [t for t in RESERVED_TABLES if t in data]
    if clash:  # pragma: no cover - a guard for whoever adds a table to Plan
        raise ValueError(f"plan table {clash[0]!r} collides with an export table")
    meta = Meta(vramplan_version=vramplan_version(), created=created or utc_now(), title=title, note=note)
    data["meta"] = meta.dump()
    carried = carried_presets(plan.hardware.gpu, plan.model.preset)
    if carried:
        data["presets"] = carried
    data["estimate"] = estimate_table(est, checklist, time)
    import tomli_w  # writing a plan file only: reading one (every command given a plan) never loads it

    return HEADER + tomli_w.dumps(data)
