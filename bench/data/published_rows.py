"""The published GPU cases (tests/data/published) as plans and estimates, run in process as that directory's check.py
runs them through the CLI. Used by tests/core/memory/test_published_gpu.py, tests/core/memory/test_accuracy.py and
bench/data/accuracy.py (which writes the estimate's expected error, core/memory/accuracy.json, from `accuracy_rows`);
import it as `bench.data.published_rows` with the repository root on the path (pytest from the root; `python -m
bench.data.accuracy`).

Each case is the closest plan as `vramplan estimate` arguments (`vramplan_args`, parsed by the CLI's own parser and
resolved as the CLI resolves them), plus each of its `future_sets` keys that the plan accepts, added one at a time
in order (a key the plan refuses is left out, as check.py leaves it out). The three GPUs the presets lack come from
the copy's user presets (VRAMPLAN_CONFIG_DIR, `published_presets`); GPU detection is off. A figure is compared the
way it was measured: peak_allocated -> `allocated` (torch.cuda.max_memory_allocated), peak_reserved -> `reserved`
(max_memory_reserved), nvidia_smi -> `total`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramplan.cli.parser import build_parser
from vramplan.core.files.planio import resolve_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "data" / "published"
CASES: list[dict[str, Any]] = json.loads((HERE / "cases.json").read_text())
GiB = 2**30


@dataclass(frozen=True)
class Row:
    case: dict[str, Any]
    plan: Plan
    est: Estimate
    st: StepTime
    accepted: tuple[str, ...]  # the future_sets keys the plan accepted

    @property
    def id(self) -> str:
        return str(self.case["id"])

    def compared_bytes(self) -> int:
        kind = self.case["figure_kind"]
        if kind == "peak_allocated":
            return self.est.allocated
        if kind == "peak_reserved":
            return self.est.reserved
        assert kind == "nvidia_smi", kind
        return self.est.total

    def memory_error(self) -> float:
        """Signed: predicted / published - 1 (negative: the estimate is under)."""
        return self.compared_bytes() / GiB / float(self.case["published_gib"]) - 1

    def throughput_error(self) -> float:
        return self.st.tokens_per_second_per_gpu / float(self.case["published_tokens_per_s_per_gpu"]) - 1


Args = tuple[str | None, str | None, list[str], str | None]


def case_args(case: dict[str, Any], extra: tuple[str, ...] = ()) -> Args:
    """The case's `vramplan_args` as the CLI parses them: model, GPU, ``--set`` arguments (plus ``extra``), config."""
    argv = [str(HERE / x) if x.startswith("configs/") else x for x in case["vramplan_args"]]
    a = build_parser().parse_args(argv)
    assert a.json and a.plan is None, case["id"]
    return a.model, a.gpu, [*a.sets, *extra], a.hf_config


def run_case(case: dict[str, Any], sets: list[str], model: str | None, gpu: str | None, hf: str | None) -> Row:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PlanNotices: the CLI prints them on stderr, exit code unchanged
        plan = resolve_plan(None, model, gpu, sets, hf)
        return Row(case, plan, estimate(plan), step_time(plan), ())


def build_row(case: dict[str, Any], extra: tuple[str, ...] = ()) -> Row:
    """The case's plan and estimate, with each `future_sets` key the plan accepts (check.py's `estimate`)."""
    model, gpu, sets, hf = case_args(case, extra)
    row = run_case(case, sets, model, gpu, hf)
    accepted: list[str] = []
    for key, value in case.get("future_sets", {}).items():
        try:
            row = run_case(case, [*sets, f"{key}={value}"], model, gpu, hf)
        except PlanError:
            continue
        sets.append(f"{key}={value}")
        accepted.append(key)
    return Row(row.case, row.plan, row.est, row.st, tuple(accepted))


@contextmanager
def presets_from(folder: Path | str) -> Iterator[None]:
    """User presets read from ``folder`` (as VRAMPLAN_CONFIG_DIR), GPU detection off; both restored on exit."""
    saved = {k: os.environ.get(k) for k in ("VRAMPLAN_CONFIG_DIR", "VRAMPLAN_DETECT")}
    os.environ["VRAMPLAN_CONFIG_DIR"] = str(folder)
    os.environ["VRAMPLAN_DETECT"] = "0"
    presets.reload()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        presets.reload()


@contextmanager
def published_presets() -> Iterator[None]:
    """The copy's user GPU presets on, GPU detection off (as check.py runs the CLI); restored on exit."""
    with presets_from(HERE / "user_presets"):
        yield


def build_rows() -> dict[str, Row]:
    """Every case by id (call inside `published_presets`)."""
    return {str(c["id"]): build_row(c) for c in CASES}


def memory_rows(rows: dict[str, Row]) -> list[Row]:
    """The rows with a published memory figure (no throughput rows, no out-of-memory bounds)."""
    return [
        r
        for r in rows.values()
        if "published_bound" not in r.case and r.case["figure_kind"] != "throughput" and r.case.get("published_gib")
    ]


def accuracy_rows(rows: dict[str, Row]) -> list[dict[str, Any]]:
    """One compact row per memory row, for core/memory/accuracy.json (read by vramplan.core.memory.accuracy): id,
    method, stack framework, total parameters, figure kind, signed error in percent (one decimal)."""
    return [
        {
            "id": r.id,
            "method": r.plan.training.method,
            "framework": r.plan.stack.framework,
            "params": r.est.params_total,
            "figure_kind": r.case["figure_kind"],
            "error_pct": round(100 * r.memory_error(), 1),
        }
        for r in memory_rows(rows)
    ]
