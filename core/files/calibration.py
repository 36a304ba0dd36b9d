"""Calibration files: what one machine adds beyond a training step's tensors, measured by ``vramplan measure
--save-calibration FILE`` and applied to later estimates with ``--calibration FILE``.

A calibration holds integer bytes and where they were measured::

    format_version = 1

    [terms]
    cuda_context_bytes = 536870912     # what nvidia-smi sees beyond torch's reserved memory: context, kernels
    allocator_gap_bytes = 1073741824   # max_memory_reserved - max_memory_allocated of the measured step
    allocated_peak_bytes = 21474836480 # max_memory_allocated of that step (the gap is a share of it)
    nccl_bytes_per_group = 805306368   # NCCL's buffers per process group (only from a multi-GPU measurement)

    [time]                               # the measured step (from a CUDA measurement with a step time)
    measured_step_seconds = 1.234        # median of the measured steps
    modelled_step_seconds = 1.01         # what the time model gave for the same plan
    modelled_covered_seconds = 0.95      # of which the terms a measurement covers (core/time/anchor.py)
    gpu_preset = "h100-80gb"             # the plan's GPU preset and stack framework: the factor applies to
    framework = "transformers"           # plans on both only

    [measured_on]
    gpu = "NVIDIA H100 80GB HBM3"
    machine = "gpu-node-17"
    torch_version = "2.8.0+cu128"
    created = "2026-12-03T14:00:00Z"
    vramplan_version = "0.1.0"
    plan = "Llama-3.2-1B, full, bf16-autocast ..."

It applies through the plan's ``[overhead]`` terms (`core.memory.overhead.overhead_bytes`): the context as
``cuda_context_mib``, the gap as ``allocator_reserve_percent`` (gap / allocated peak, in place of the allocator's
rules), NCCL as ``nccl_mib_per_group``; ``overhead.calibrated_from`` records where they came from, so the estimate
says it is calibrated. ``[time]`` anchors the step time: ``overhead.step_time_factor`` = (measured - modelled
terms not covered) / modelled covered terms, with ``step_time_gpu`` and ``step_time_framework`` (`core.time.anchor`).
Reading is as safe as a plan file's (`core.plan.helpers.tomlio.read_toml`: regular files only, a size limit, one-line
errors); writing goes through `core.files.safewrite.write_atomic`."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomli_w

from vramplan.core.files.safewrite import OverwriteRefused, write_atomic
from vramplan.core.plan.helpers.errors import PlanError, printable, shown
from vramplan.core.plan.helpers.tomlio import loads, read_toml
from vramplan.core.plan.helpers.units import GiB, MiB
from vramplan.core.plan.schema.overhead import STEP_TIME_FACTOR_MAX, STEP_TIME_FACTOR_MIN
from vramplan.core.plan.schema.plan import Plan

FORMAT_VERSION = 1
# 1 TiB: no GPU's overhead is larger, and the [overhead] keys the terms become take at most 1,048,576 MiB
# (cuda_context_mib, nccl_mib_per_group): a value the file's own bound allows always applies
MAX_TERM_BYTES = 1 << 40
MAX_TEXT = 300  # characters of a provenance string
TERM_KEYS = ("cuda_context_bytes", "allocator_gap_bytes", "allocated_peak_bytes", "nccl_bytes_per_group")
TEXT_KEYS = ("gpu", "machine", "torch_version", "created", "vramplan_version", "plan")
TIME_SECONDS = ("measured_step_seconds", "modelled_step_seconds", "modelled_covered_seconds")
TIME_TEXT = ("gpu_preset", "framework")
MAX_SECONDS = 1e7  # about 4 months: no training step is longer
HEADER = (
    "# vramplan calibration: what this machine adds beyond a training step's tensors (integer bytes),\n"
    "# measured by `vramplan measure --save-calibration`; apply it with `vramplan estimate --calibration FILE`.\n\n"
)


@dataclass(frozen=True)
class StepTiming:
    """The ``[time]`` table: a measured step and what the model gave for the same plan."""

    measured_step_seconds: float
    modelled_step_seconds: float
    modelled_covered_seconds: float
    gpu_preset: str
    framework: str

    @property
    def factor(self) -> float:
        """`core.time.anchor`: (measured - modelled terms not covered) / modelled covered terms."""
        uncovered = self.modelled_step_seconds - self.modelled_covered_seconds
        return (self.measured_step_seconds - uncovered) / self.modelled_covered_seconds

    def overrides(self) -> dict[str, Any]:
        return {
            "overhead.step_time_factor": round(self.factor, 6),
            "overhead.step_time_gpu": self.gpu_preset,
            "overhead.step_time_framework": self.framework,
        }

    def line(self) -> str:
        return (
            f"step {self.measured_step_seconds:.4g} s measured, {self.modelled_step_seconds:.4g} s modelled on "
            f"{self.gpu_preset} with {self.framework}: GPU work x {self.factor:.3g}"
        )


@dataclass(frozen=True)
class Calibration:
    """One machine's overheads, in bytes, and where they were measured. ``allocator_gap_bytes`` and
    ``allocated_peak_bytes`` come together (None: the allocator's rules stay); ``nccl_bytes_per_group`` only
    from a measurement with more than one rank. ``source``: the file it was read from (not written)."""

    cuda_context_bytes: int
    allocator_gap_bytes: int | None = None
    allocated_peak_bytes: int | None = None
    nccl_bytes_per_group: int | None = None
    gpu: str = ""
    machine: str = ""
    torch_version: str = ""
    created: str = ""
    vramplan_version: str = ""
    plan: str = ""
    source: str = ""
    time: StepTiming | None = None

    @property
    def allocator_reserve_percent(self) -> float | None:
        """The allocator gap as a share of the allocated peak, in percent (at most 100: a larger gap is refused
        when the file is read)."""
        if self.allocator_gap_bytes is None or not self.allocated_peak_bytes:
            return None
        return round(100 * self.allocator_gap_bytes / self.allocated_peak_bytes, 3)

    def provenance(self) -> str:
        """``cal.toml (NVIDIA H100 80GB HBM3 on gpu-node-17, torch 2.8.0, 2026-12-03)``."""
        where = " on ".join(x for x in (self.gpu, self.machine) if x)
        parts = [x for x in (where, f"torch {self.torch_version}" if self.torch_version else "", self.created[:10])]
        detail = ", ".join(p for p in parts if p)
        name = self.source or "a calibration"
        return printable(f"{name} ({detail})" if detail else name)[:MAX_TEXT]

    def overrides(self) -> dict[str, Any]:
        """The ``[overhead]`` keys this calibration sets (`Plan.with_changes` takes them as they are)."""
        out: dict[str, Any] = {"overhead.cuda_context_mib": mib_up(self.cuda_context_bytes)}
        pct = self.allocator_reserve_percent
        if pct is not None:
            out["overhead.allocator_reserve_percent"] = pct
        if self.nccl_bytes_per_group is not None:
            out["overhead.nccl_mib_per_group"] = mib_up(self.nccl_bytes_per_group)
        out["overhead.calibrated_from"] = self.provenance()
        if self.time is not None:
            out |= self.time.overrides()
        else:  # a previous calibration's anchor would claim this file's provenance
            out |= dict.fromkeys(
                ("overhead.step_time_factor", "overhead.step_time_gpu", "overhead.step_time_framework")
            )
        return out

    def dump(self) -> dict[str, Any]:
        terms = {k: getattr(self, k) for k in TERM_KEYS if getattr(self, k) is not None}
        on = {k: getattr(self, k) for k in TEXT_KEYS if getattr(self, k)}
        out: dict[str, Any] = {"format_version": FORMAT_VERSION, "terms": terms}
        if self.time is not None:
            out["time"] = {k: getattr(self.time, k) for k in (*TIME_SECONDS, *TIME_TEXT)}
        return out | {"measured_on": on}

    def lines(self) -> list[str]:
        """What it holds, for people: one line per term."""
        out = [f"CUDA context and kernels {self.cuda_context_bytes / MiB:,.0f} MiB"]
        pct = self.allocator_reserve_percent
        if pct is not None and self.allocator_gap_bytes is not None:
            out.append(f"allocator gap {self.allocator_gap_bytes / GiB:.2f} GiB ({pct:g}% of the allocated peak)")
        if self.nccl_bytes_per_group is not None:
            out.append(f"NCCL {self.nccl_bytes_per_group / MiB:,.0f} MiB per process group")
        if self.time is not None:
            out.append(self.time.line())
        return out


def mib_up(n_bytes: int) -> int:
    """Bytes as the whole MiB the ``[overhead]`` keys take, rounded up (mem_get_info counts 2 MiB pages)."""
    return -(-n_bytes // MiB)


def apply_calibration(plan: Plan, cal: Calibration) -> Plan:
    """`plan` with the calibration's ``[overhead]`` terms (its other keys as they were); a problem names the file."""
    try:
        return plan.with_changes(cal.overrides())
    except PlanError as exc:
        raise exc.at(cal.source) if cal.source else exc from None


def _term(raw: dict[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise PlanError(f"must be a whole number of bytes, not {shown(value)}", f"{where}: terms.{key}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"must be a whole number of bytes (got {shown(value)})", f"{where}: terms.{key}")
    if not 0 <= value <= MAX_TERM_BYTES:
        raise PlanError(f"must be from 0 to {MAX_TERM_BYTES:,} bytes (got {shown(value)})", f"{where}: terms.{key}")
    return value


def _text(raw: dict[str, Any], key: str, where: str, table: str = "measured_on") -> str:
    value = raw.get(key, "")
    if isinstance(value, _dt.datetime | _dt.date):  # a TOML date-time written by hand
        value = value.isoformat()
    if not isinstance(value, str):
        raise PlanError(f"must be a string (got {shown(value)})", f"{where}: {table}.{key}")
    if len(value) > MAX_TEXT:
        raise PlanError(f"longer than {MAX_TEXT} characters", f"{where}: {table}.{key}")
    return printable(value)


def _seconds(raw: dict[str, Any], key: str, where: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"must be a number of seconds (got {shown(value)})", f"{where}: time.{key}")
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise PlanError(
            f"must be more than 0 and at most {MAX_SECONDS:g} s (got {shown(value)})", f"{where}: time.{key}"
        )
    return float(value)


def _timing(raw: dict[str, Any], where: str) -> StepTiming | None:
    """The ``[time]`` table checked (None when the file has none): every key present, the covered seconds within
    the modelled step, a factor within `overhead.step_time_factor`'s bounds."""
    if "time" not in raw:
        return None
    table = _table(raw, "time", (*TIME_SECONDS, *TIME_TEXT), where)
    missing = [k for k in (*TIME_SECONDS, *TIME_TEXT) if k not in table]
    if missing:
        raise PlanError("missing (vramplan measure writes every key of [time])", f"{where}: time.{missing[0]}")
    secs = {k: _seconds(table, k, where) for k in TIME_SECONDS}
    texts = {}
    for k in TIME_TEXT:
        text = _text(table, k, where, "time")
        if not text or len(text) > 100:
            raise PlanError("must be a preset or framework id of 1 to 100 characters", f"{where}: time.{k}")
        texts[k] = text
    if secs["modelled_covered_seconds"] > secs["modelled_step_seconds"]:
        raise PlanError("must not exceed modelled_step_seconds (it is a part of it)", f"{where}: time")
    timing = StepTiming(
        secs["measured_step_seconds"],
        secs["modelled_step_seconds"],
        secs["modelled_covered_seconds"],
        texts["gpu_preset"],
        texts["framework"],
    )
    lo, hi = STEP_TIME_FACTOR_MIN, STEP_TIME_FACTOR_MAX
    if not lo <= timing.factor <= hi:
        raise PlanError(f"gives a factor of {timing.factor:.3g}, outside {lo:g}-{hi:g}", f"{where}: time")
    return timing


def _table(raw: dict[str, Any], name: str, known: tuple[str, ...], where: str) -> dict[str, Any]:
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise PlanError("must be a table", f"{where}: {name}")
    unknown = [k for k in table if k not in known]
    if unknown:
        raise PlanError(f"unknown key (known: {', '.join(known)})", f"{where}: {name}.{shown(unknown[0])}")
    return table


def calibration_from_data(raw: dict[str, Any], where: str) -> Calibration:
    """A parsed calibration file checked: every problem is one `PlanError` naming the file and key."""
    fv = raw.get("format_version", FORMAT_VERSION)
    if isinstance(fv, bool) or not isinstance(fv, int) or not 1 <= fv <= 1_000_000:
        raise PlanError(f"must be a whole number from 1 to 1,000,000 (got {shown(fv)})", f"{where}: format_version")
    if fv > FORMAT_VERSION:
        raise PlanError(
            f"calibration format {fv} is newer than this vramplan reads ({FORMAT_VERSION}): upgrade vramplan",
            f"{where}: format_version",
        )
    unknown = [k for k in raw if k not in ("format_version", "terms", "time", "measured_on")]
    if unknown:
        raise PlanError(
            "unknown key (known: format_version, [terms], [time], [measured_on])", f"{where}: {shown(unknown[0])}"
        )
    terms = _table(raw, "terms", TERM_KEYS, where)
    on = _table(raw, "measured_on", TEXT_KEYS, where)
    values = {k: _term(terms, k, where) for k in TERM_KEYS}
    if values["cuda_context_bytes"] is None:
        raise PlanError(
            "missing (the CUDA context's bytes, written by vramplan measure)", f"{where}: terms.cuda_context_bytes"
        )
    if (values["allocator_gap_bytes"] is None) != (values["allocated_peak_bytes"] is None):
        raise PlanError(
            "allocator_gap_bytes and allocated_peak_bytes come together (the gap is a share of the peak)",
            f"{where}: terms",
        )
    if values["allocated_peak_bytes"] == 0:
        raise PlanError("must be more than 0 (the gap is a share of it)", f"{where}: terms.allocated_peak_bytes")
    gap, peak = values["allocator_gap_bytes"], values["allocated_peak_bytes"]
    if gap is not None and peak is not None and gap > peak:  # was shown as "100%", silently capped
        raise PlanError(
            f"more than allocated_peak_bytes ({gap:,} > {peak:,}): the gap applies as "
            "overhead.allocator_reserve_percent, at most 100% of the peak",
            f"{where}: terms.allocator_gap_bytes",
        )
    texts = {k: _text(on, k, where) for k in TEXT_KEYS}
    return Calibration(**values, **texts, source=where, time=_timing(raw, where))  # type: ignore[arg-type]


def read_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration file (regular file, a few MB at most, valid TOML); one `PlanError` otherwise."""
    return calibration_from_data(read_toml(path), str(path))


def calibration_toml(cal: Calibration) -> str:
    """The file's text; read back, it is the same calibration (but for ``source``)."""
    return HEADER + tomli_w.dumps(cal.dump())


def write_calibration(path: str | Path, cal: Calibration, *, overwrite: bool = False) -> Path:
    """Write `cal` atomically; an existing file only with ``overwrite`` (--force). Errors are one `PlanError`.
    Nothing is written that `read_calibration` would refuse (a measured allocator gap past the allocated peak, as a
    small plan's can be: the plan takes at most 100%): the reader's bounds are the writer's."""
    text = calibration_toml(cal)
    try:
        calibration_from_data(loads(text), str(path))
    except PlanError as exc:
        key = (exc.where or "").rpartition(": ")[2]
        said = f"not a calibration vramplan can read back ({key}: {exc.message}); nothing written"
        raise PlanError(said, str(path)) from None
    try:
        return write_atomic(path, text, overwrite=overwrite)
    except OverwriteRefused as exc:
        raise PlanError(f"{exc.message} (use --force to replace it)", exc.where) from None


def with_source(cal: Calibration, source: str) -> Calibration:
    return replace(cal, source=source)
