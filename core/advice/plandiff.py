"""Plan diff: the keys two plans differ in, and what the difference does to memory per GPU and to the step time.

Both plans are complete (a plan file is the default plan plus what it wrote, `core.plan.schema.plan.over_default_plan`),
so a key differs when its value after defaults differs; an unset optional key (``training.precision``) shows as
``None``. Memory is compared at each plan's peak moment, by the estimator's kinds
(`core.memory.record.KINDS`: the live bytes at the peak plus the overhead terms), so the kinds' deltas
add up to the total's delta. Each key's effect is that key's change alone applied to A (`Plan.with_changes`,
validated): a change that is only valid with another (tensor parallelism 8 needs 8 GPUs) says why it is not a
plan on its own. A different model (another preset or config.json) is one change, ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramplan.core.advice.whatif import plain
from vramplan.core.memory.kinds import KIND_LABELS, KINDS, RL_KINDS
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.describe import model_name
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.keys import set_value
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time

MODEL_SOURCES = ("preset", "hf_config")  # a change of either is a change of model


@dataclass(frozen=True)
class Figures:
    """One plan's figures as the diff compares them."""

    memory: dict[str, int]  # bytes per GPU at the peak, by kind (every kind of KINDS; 0 where absent)
    peak_phase: str  # forward | backward | optimizer: the moment the peak is at
    total: int
    on_gpu: int
    gpu_capacity: int
    fits: bool
    step_seconds: float
    tokens_per_second: float

    @classmethod
    def of(cls, est: Estimate, st: StepTime) -> Figures:
        live = est.live_at_peak
        return cls(
            # every kind of KINDS; an RL plan's kinds (core.memory.record.RL_KINDS) where it has them
            memory={k: live.get(k, 0) for k in KINDS} | {k: live[k] for k in RL_KINDS if live.get(k)},
            peak_phase=est.peak_phase,
            total=est.total,
            on_gpu=est.on_gpu,
            gpu_capacity=est.gpu_capacity,
            fits=est.fits,
            step_seconds=st.step_seconds,
            tokens_per_second=st.tokens_per_second,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "memory_per_gpu": self.memory,
            "peak_phase": self.peak_phase,
            "total": self.total,
            "on_gpu": self.on_gpu,
            "gpu_capacity": self.gpu_capacity,
            "fits": self.fits,
            "step_seconds": self.step_seconds,
            "tokens_per_second": self.tokens_per_second,
        }


@dataclass(frozen=True)
class Delta:
    """B (or A with one change) minus A."""

    memory: dict[str, int]  # by kind, only the kinds that change
    total: int
    step_seconds: float
    relative_step_time: float  # new / A's
    fits: bool  # whether the changed plan fits

    @classmethod
    def between(cls, a: Figures, b: Figures) -> Delta:
        kinds = (*KINDS, *(k for k in RL_KINDS if k in a.memory or k in b.memory))
        memory = {k: b.memory.get(k, 0) - a.memory.get(k, 0) for k in kinds if b.memory.get(k) != a.memory.get(k)}
        return cls(
            memory=memory,
            total=b.total - a.total,
            step_seconds=b.step_seconds - a.step_seconds,
            relative_step_time=b.step_seconds / a.step_seconds,
            fits=b.fits,
        )

    def text(self) -> str:
        """``+31.1 GiB per GPU (Parameters +22.0, Autocast cache +12.1), +5% step time``: the three largest kinds."""
        if not self.memory:
            mem = "no memory change"
        else:
            parts = sorted(self.memory.items(), key=lambda kv: -abs(kv[1]))
            shown = ", ".join(f"{KIND_LABELS[k]} {signed_gib(v)}" for k, v in parts[:3] if abs(v) >= GiB // 16)
            mem = f"{signed_gib(self.total)} GiB per GPU" + (f" ({shown})" if shown else "")
        return f"{mem}, {relative_text(self.relative_step_time)}" + ("" if self.fits else "; does not fit")

    def to_json(self) -> dict[str, Any]:
        return {
            "memory_per_gpu": self.memory,
            "total": self.total,
            "step_seconds": self.step_seconds,
            "relative_step_time": self.relative_step_time,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class KeyDiff:
    """One key that differs, and its change alone applied to A (``error``: why that is not a valid plan)."""

    key: str  # dotted ("strategy.zero_stage"), or "model" for another model
    a: Any
    b: Any
    alone: Delta | None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "a": plain(self.a),
            "b": plain(self.b),
            "alone": self.alone.to_json() if self.alone else None,
            "error": self.error or None,
        }


@dataclass(frozen=True)
class PlanDiff:
    a: Plan
    b: Plan
    fa: Figures
    fb: Figures
    keys: tuple[KeyDiff, ...]

    @property
    def delta(self) -> Delta:
        return Delta.between(self.fa, self.fb)

    @property
    def same(self) -> bool:
        return not self.keys

    @property
    def keys_differ(self) -> str:
        """``1 key differs``, ``3 keys differ``."""
        n = len(self.keys)
        return f"{n} key differs" if n == 1 else f"{n} keys differ"

    def to_json(self) -> dict[str, Any]:
        return {
            "keys": [k.to_json() for k in self.keys],
            "a": self.fa.to_json(),
            "b": self.fb.to_json(),
            "delta": self.delta.to_json(),
        }


def value_text(value: Any) -> str:
    """A plan value as ``--set`` writes it; ``(unset)`` for an optional key left unset."""
    if value is None:
        return "(unset)"
    try:
        return set_value(value)
    except TypeError:
        return str(value)


def signed_gib(n: int) -> str:
    """``+3.1``, ``-0.8`` (GiB); ``0`` for a change that rounds to nothing."""
    return f"{n / GiB:+.1f}" if abs(n) >= 0.05 * GiB else "0"


def relative_text(rel: float) -> str:
    """``+33% step time``, ``same step time``."""
    pct = (rel - 1) * 100
    return "same step time" if abs(pct) < 0.5 else f"{pct:+.0f}% step time"


def flat(plan: Plan) -> dict[str, Any]:
    """The plan as dotted keys (None for an optional key left unset is simply absent)."""
    out: dict[str, Any] = {}
    for table, values in plan.model_dump(mode="python").items():
        for key, value in values.items():
            out[f"{table}.{key}"] = value
    return out


def changes_between(a: Plan, b: Plan) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (A's value, B's value) for each key that differs; another model is the one key ``model``."""
    fa, fb = flat(a), flat(b)
    out: dict[str, tuple[Any, Any]] = {}
    other_model = any(fa.get(f"model.{k}") != fb.get(f"model.{k}") for k in MODEL_SOURCES)
    if other_model:
        out["model"] = (model_name(a.model), model_name(b.model))
    for key in sorted({*fa, *fb}, key=_key_order):
        if other_model and key.startswith("model."):
            continue
        va, vb = fa.get(key), fb.get(key)
        if va != vb:
            out[key] = (va, vb)
    return out


_TABLE_ORDER = ("model", "hardware", "training", "strategy", "overhead", "checklist")


def _key_order(key: str) -> tuple[int, str]:
    table = key.partition(".")[0]
    return (_TABLE_ORDER.index(table) if table in _TABLE_ORDER else len(_TABLE_ORDER), key)


def _alone(a: Plan, b: Plan, key: str) -> dict[str, Any]:
    """The change set that moves A's `key` to B's value (``model``: B's whole model table)."""
    if key == "model":
        model = b.model.model_dump(mode="python", exclude_none=True)
        changes = {f"model.{k}": v for k, v in model.items()}
        # the model's source first: with_changes drops A's model keys when the source changes
        return dict(sorted(changes.items(), key=lambda kv: kv[0] not in ("model.preset", "model.hf_config")))
    return {key: flat(b).get(key)}


def figures(plan: Plan) -> Figures:
    return Figures.of(estimate(plan), step_time(plan))


def plan_diff(a: Plan, b: Plan) -> PlanDiff:
    """The keys that differ between A and B, the total deltas, and each key's change alone applied to A."""
    fa, fb = figures(a), figures(b)
    keys = []
    for key, (va, vb) in changes_between(a, b).items():
        try:
            changed = a.with_changes(_alone(a, b, key))
        except PlanError as exc:
            keys.append(KeyDiff(key, va, vb, None, f"not a valid plan on its own: {exc.line()}"))
            continue
        keys.append(KeyDiff(key, va, vb, Delta.between(fa, figures(changed))))
    return PlanDiff(a, b, fa, fb, tuple(keys))
