"""The GPU selection guide: for a plan's model and method, every GPU preset with the fewest GPUs that fit.

For each hardware preset (built-in and the user's), the plan is moved onto that GPU and tried at a ladder of GPU
counts (`COUNTS`: 1, 2, 4 and 8 on one node, then 2, 4, 8... nodes of 8, up to `MAX_GPUS`) with everything else as
the plan has it: its strategies (TP, PP, ZeRO, offload, checkpointing), its micro-batch and accumulation (so the
global batch grows with the data-parallel size; the figures are throughput, the same tokens take the same work).
A count the plan's strategies cannot use (tensor parallelism 8 on 4 GPUs, heads that do not split) is skipped.
The first count that fits is ``min_gpus``; there the time model gives the step time and tokens/s and, with a
token budget (``training.tokens``) and a price per GPU-hour, the hours and the cost to train.

Where a change would let fewer GPUs do (or any at all), the fit advisor (`core.advice.advisor.suggestions`) is asked,
at the count just below ``min_gpus`` (or at the largest count when none fits), for its cheapest change (best tier,
then least step time) of one move, or of up to two moves when no single move keeps the training the same (tier 0);
the fewest GPUs with that change are then found with plain estimates. The advisor is the slow part (tens to
hundreds of ms per GPU), so it is asked at one count per GPU, within a time budget (`ADVISOR_SECONDS`).

Prices: a preset's ``price_per_gpu_hour``; the plan's ``hardware.price_per_gpu_hour`` is the price of the plan's
own GPU only (it is what the user pays for that card); `prices` (GPU id -> price, ``"*"`` for every GPU without
one) overrides both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vramplan.core.advice.advisor import Suggestion, suggestions
from vramplan.core.advice.whatif import WhatIf
from vramplan.core.memory.accuracy import ExpectedError
from vramplan.core.memory.kinds import ALL_KINDS, KIND_LABELS
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.describe import short_gpu_name
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.units import fmt_seconds, gib_text
from vramplan.core.plan.keys import set_args
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.accuracy import plan_expected_error
from vramplan.core.time.step import step_time

NODE_GPUS = 8  # GPUs per node beyond one node (an HGX/DGX board)
MAX_GPUS = 1024  # the ladder's top: 128 nodes of 8
COUNTS: tuple[tuple[int, int], ...] = (
    (1, 1),
    (2, 1),
    (4, 1),
    *((NODE_GPUS, n) for n in (1, 2, 4, 8, 16, 32, 64, MAX_GPUS // NODE_GPUS)),
)  # (gpus_per_node, nodes)
ADVISOR_SECONDS = 3.0  # the advisor's time budget over all GPUs (each call takes tens of ms)
SORTS = ("time", "cost")


@dataclass(frozen=True)
class Change:
    """The advisor's cheapest change that fits with fewer GPUs (or at all), and the fewest GPUs with it."""

    title: str
    changes: Mapping[str, Any]
    gpus: int
    step_seconds: float
    tokens_per_second: float

    def text(self) -> str:
        """``1 GPU with optimizer offload to CPU (step 2.64 s, 777 tokens/s)``."""
        gpus = f"{self.gpus} GPU" + ("" if self.gpus == 1 else "s")
        return (
            f"{gpus} with {self.title} (step {fmt_seconds(self.step_seconds)}, {self.tokens_per_second:,.0f} tokens/s)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "set": list(set_args(self.changes)),
            "gpus": self.gpus,
            "step_seconds": self.step_seconds,
            "tokens_per_second": self.tokens_per_second,
        }


@dataclass(frozen=True)
class GpuRow:
    """One GPU preset in the guide: the fewest GPUs that fit with the plan's strategies and what they give."""

    gpu: str  # preset id
    name: str
    memory_bytes: int
    user: bool  # a user preset
    price_per_gpu_hour: float | None
    min_gpus: int | None = None  # None: no count up to MAX_GPUS fits
    layout: tuple[int, int] | None = None  # (gpus_per_node, nodes) at min_gpus
    per_gpu_bytes: int | None = None  # the estimate's on-GPU peak at min_gpus (or at the largest count tried)
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    train_hours: float | None = None  # None: no token budget (training.tokens), or no fit
    cost: float | None = None  # None: no token budget or no price, or no fit
    why: str = ""  # why it does not fit ("" when it fits)
    change: Change | None = None  # the advisor's cheapest change for fewer GPUs (None: none needed or found)
    change_note: str = ""  # why there is no change ("not searched: time budget")

    @property
    def fits(self) -> bool:
        return self.min_gpus is not None

    @property
    def gpus_text(self) -> str:
        """``2``, ``4x8`` (nodes x GPUs per node), ``no fit``."""
        if self.layout is None:
            return "no fit"
        gpn, nodes = self.layout
        return str(gpn) if nodes == 1 else f"{nodes}x{gpn}"

    def cells(self) -> tuple[str, ...]:
        """GPU, its GiB, GPUs, GiB per GPU, step, tokens/s, time to train, cost: the CLI's and the app's table."""
        fits = self.fits

        def shown(value: float | None, fmt: Callable[[float], str]) -> str:
            return "-" if value is None or not fits else fmt(value)

        return (
            short_gpu_name(self.name) + (" (user)" if self.user else ""),
            gib_text(self.memory_bytes, 0),
            self.gpus_text,
            shown(self.per_gpu_bytes, gib_text),
            shown(self.step_seconds, fmt_seconds),
            shown(self.tokens_per_second, lambda v: f"{v:,.0f}"),
            shown(self.train_hours, lambda h: fmt_seconds(h * 3600)),
            shown(self.cost, lambda v: f"{v:,.0f}"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "name": self.name,
            "memory_gib": round(self.memory_bytes / 2**30, 2),
            "user_preset": self.user,
            "min_gpus": self.min_gpus,
            "fits": self.fits,
            "gpus_per_node": self.layout[0] if self.layout else None,
            "nodes": self.layout[1] if self.layout else None,
            "memory_per_gpu": self.per_gpu_bytes,
            "step_seconds": self.step_seconds,
            "tokens_per_second": self.tokens_per_second,
            "train_hours": self.train_hours,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "cost": self.cost,
            "why": self.why or None,
            "change": self.change.to_json() if self.change else None,
            "change_note": self.change_note or None,
        }


@dataclass(frozen=True)
class Guide:
    plan: Plan
    rows: tuple[GpuRow, ...]  # sorted (`sort_rows`)
    sort: str
    seconds: float  # how long the guide took

    @property
    def time_error(self) -> ExpectedError:
        """How far to trust every row's step time, time and cost: the step time's error on the published timings
        nearest to the plan (`core.time.accuracy`; the same for every GPU of the guide)."""
        return plan_expected_error(self.plan, self.plan.model.arch().total_params)

    def to_json(self) -> dict[str, Any]:
        t = self.plan.training
        return {
            "gpus": [r.to_json() for r in self.rows],
            "time_expected_error": self.time_error.to_json(),
            "sort": self.sort,
            "tokens": t.tokens,
            "max_gpus": MAX_GPUS,
            "note": "min_gpus: the fewest GPUs (1, 2, 4, 8 on one node, then nodes of 8) that fit with the plan's "
            "strategies, micro-batch and accumulation; times and cost at that count",
        }


def _on_gpu(plan: Plan, gpu_id: str, price: float | None) -> Plan | None:
    """The plan on another GPU (its price: the one given, else the preset's), or None if not a valid plan."""
    try:
        return plan.with_changes({"hardware.gpu": gpu_id, "hardware.price_per_gpu_hour": price})
    except PlanError:
        return None


def _at(plan: Plan, gpus_per_node: int, nodes: int) -> Plan | None:
    try:
        return plan.with_changes({"hardware.gpus_per_node": gpus_per_node, "hardware.nodes": nodes})
    except PlanError:  # the plan's TP x PP does not divide this count, or another strategy cannot use it
        return None


def _why(est: Estimate, gpus: int) -> str:
    """Why the plan does not fit even at its largest count: the first kind (parameters first: the root cause) that
    alone exceeds the GPU, else the largest kind."""
    cap = est.gpu_capacity
    live = est.live_at_peak
    head = f"at {gpus} GPUs: {gib_text(est.on_gpu)} GiB per GPU of {gib_text(cap)}"
    alone = [k for k in ALL_KINDS if live.get(k, 0) > cap]
    if alone:
        k = alone[0]
        return f"{head}; {KIND_LABELS[k].lower()} alone ({gib_text(live[k])} GiB) exceed the GPU"
    kind, most = max(live.items(), key=lambda kv: kv[1])
    return f"{head}; largest: {KIND_LABELS.get(kind, kind).lower()} {gib_text(most)} GiB"


def _ladder(plan: Plan) -> list[tuple[tuple[int, int], Plan]]:
    """The valid (layout, plan) pairs of the count ladder, fewest GPUs first."""
    out = []
    for gpn, nodes in COUNTS:
        p = _at(plan, gpn, nodes)
        if p is not None:
            out.append(((gpn, nodes), p))
    return out


def _first_fit(ladder: list[tuple[tuple[int, int], Plan]]) -> int | None:
    """Index of the first rung that fits (per-GPU memory only shrinks as data parallelism grows: ZeRO shards)."""
    for i, (_, p) in enumerate(ladder):
        if estimate(p).fits:
            return i
    return None


def _cheapest_change(ladder: list[tuple[tuple[int, int], Plan]], below: int) -> Change | None:
    """The advisor's best change at rung ``below`` (one call), then the fewest GPUs with it (estimates only)."""
    _, at = ladder[below]
    w = WhatIf(at)
    found: tuple[Suggestion, ...] = ()
    # one move first (a few dozen plans); pairs (hundreds) only when no single move keeps the training the same
    found, _ = suggestions(w, 0.0, limit=1, max_moves=1)
    if not found or found[0].tier > 0:
        found, _ = suggestions(w, 0.0, limit=1, max_moves=2)
    if not found:
        return None
    best = found[0]
    changes = {k: v for k, v in best.changes.items() if not k.startswith("hardware.")}
    for (gpn, nodes), p in ladder[: below + 1]:
        try:
            q = p.with_changes(changes)
        except PlanError:
            continue
        if estimate(q).fits:
            st = step_time(q)
            return Change(best.title, changes, gpn * nodes, st.step_seconds, st.tokens_per_second)
    return None


@memoised(256)
def gpu_row(plan: Plan, gpu_id: str, price: float | None) -> GpuRow:
    """One GPU's row without the advisor's change (memoised: a plan and a GPU give the same row)."""
    spec = presets.gpu(gpu_id)
    head = GpuRow(gpu_id, spec.name, spec.memory_bytes, presets.registry().is_user("hardware", gpu_id), price)
    moved = _on_gpu(plan, gpu_id, price)
    ladder = [] if moved is None else _ladder(moved)
    if not ladder:
        why = "the plan's strategies are not valid on this GPU at any count"
        if moved is None:
            try:
                plan.with_changes({"hardware.gpu": gpu_id})
            except PlanError as exc:
                why = exc.line()
        return replace(head, why=why)
    i = _first_fit(ladder)
    if i is None:
        (gpn, nodes), top = ladder[-1]
        est = estimate(top)
        return replace(head, per_gpu_bytes=est.on_gpu, why=_why(est, gpn * nodes))
    (gpn, nodes), p = ladder[i]
    st = step_time(p)
    return replace(
        head,
        min_gpus=gpn * nodes,
        layout=(gpn, nodes),
        per_gpu_bytes=estimate(p).on_gpu,
        step_seconds=st.step_seconds,
        tokens_per_second=st.tokens_per_second,
        train_hours=st.train_hours,
        cost=st.cost,
    )


@memoised(256)
def change_for(plan: Plan, gpu_id: str, price: float | None) -> tuple[Change | None, str]:
    """The advisor's cheapest change for fewer GPUs than `gpu_row`'s min_gpus (or for any fit), and a note when
    there is none: "" when none is needed (the plan fits on the fewest GPUs its strategies allow)."""
    moved = _on_gpu(plan, gpu_id, price)
    ladder = [] if moved is None else _ladder(moved)
    if not ladder:
        return None, ""
    i = _first_fit(ladder)
    below = len(ladder) - 1 if i is None else i - 1
    if below < 0:
        return None, ""
    change = _cheapest_change(ladder, below)
    if change is None:
        (gpn, nodes), _ = ladder[below]
        return None, f"the advisor found no change that fits at {gpn * nodes} GPUs"
    return change, ""


def price_for(plan: Plan, gpu_id: str, prices: Mapping[str, float]) -> float | None:
    """The price per GPU-hour the guide uses for one GPU (see the module docstring)."""
    if gpu_id in prices:
        return prices[gpu_id]
    if gpu_id == plan.hardware.gpu and plan.hardware.price_per_gpu_hour is not None:
        return plan.hardware.price_per_gpu_hour
    preset = presets.gpu(gpu_id).price_per_gpu_hour
    return preset if preset is not None else prices.get("*")


def _sort_key(sort: str) -> Any:
    def key(r: GpuRow) -> tuple[Any, ...]:
        if not r.fits:
            return (2, -r.memory_bytes, r.gpu)
        time_key = 1 / r.tokens_per_second if r.tokens_per_second else math.inf
        if sort == "cost":
            has = r.cost is not None
            return (0 if has else 1, r.cost if has else 0.0, time_key, r.gpu)
        return (0, time_key, r.gpu)

    return key


def sort_rows(rows: tuple[GpuRow, ...] | list[GpuRow], sort: str) -> tuple[GpuRow, ...]:
    """Fitting GPUs first, by time per token (``time``: also time to train) or by cost (those without a cost after,
    by time); then those that do not fit, largest memory first."""
    if sort not in SORTS:
        raise PlanError(f"sort by {' or '.join(SORTS)}, not {sort!r}", "--sort")
    return tuple(sorted(rows, key=_sort_key(sort)))


def gpu_guide(
    plan: Plan,
    *,
    sort: str = "time",
    prices: Mapping[str, float] | None = None,
    advise: bool = True,
    advisor_seconds: float = ADVISOR_SECONDS,
) -> Guide:
    """Every GPU preset's row for the plan's model and method (see the module docstring)."""
    if sort not in SORTS:
        raise PlanError(f"sort by {' or '.join(SORTS)}, not {sort!r}", "--sort")
    start = time.perf_counter()
    prices = dict(prices or {})
    unknown = [g for g in prices if g != "*" and g not in presets.registry().gpus]
    if unknown:
        presets.gpu(unknown[0], "--price")  # raises, naming close matches
    rows = []
    for spec in presets.registry().sorted_gpus():
        price = price_for(plan, spec.id, prices)
        row = gpu_row(plan, spec.id, price)
        if advise:
            if time.perf_counter() - start > advisor_seconds:
                row = replace(row, change_note="not searched: time budget")
            else:
                change, note = change_for(plan, spec.id, price)
                row = replace(row, change=change, change_note=note)
        rows.append(row)
    return Guide(plan, sort_rows(rows, sort), sort, time.perf_counter() - start)
