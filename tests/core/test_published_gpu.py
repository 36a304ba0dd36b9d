"""The estimate against training steps other people measured on real GPUs and published (tests/data/published, a
copy of ../shared/published): what that directory's check.py does through the CLI, run in process.

Each case is the closest plan as `vramplan estimate` arguments (`vramplan_args`, parsed by the CLI's own parser and
resolved as the CLI resolves them), plus each of its `future_sets` keys that the plan accepts, added one at a time
in order (a key the plan refuses is left out, as check.py leaves it out). The three GPUs the presets lack come from
the copy's user presets (VRAMPLAN_CONFIG_DIR); GPU detection is off. A figure is compared the way it was measured:
peak_allocated -> `allocated` (torch.cuda.max_memory_allocated), peak_reserved -> `reserved`
(max_memory_reserved), nvidia_smi -> `total`; throughput rows compare tokens/s/GPU at the default MFU; bound rows
(a run that fit, or ran out of memory) compare the verdict.

The bounds are issue 12's and 13's acceptance: memory median |error| <= 8%, no run that fit predicted not to fit,
throughput median |error| <= 15%. They are medians on purpose: several sources leave settings unstated or measure
something the plan does not describe (each case's `notes`; README "Training stacks" names the rows that stay off and
why), so single rows are not held to a bound except where the mechanism is known (litgpt's 4-bit rows below).
"""

from __future__ import annotations

import json
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vramplan.cli.commands import build_parser
from vramplan.core.files.planio import resolve_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.result import Estimate
from vramplan.core.plan import presets
from vramplan.core.plan.errors import PlanError
from vramplan.core.plan.plan import Plan
from vramplan.core.time.result import StepTime
from vramplan.core.time.step import step_time

HERE = Path(__file__).parent.parent / "data" / "published"
CASES: list[dict[str, Any]] = json.loads((HERE / "cases.json").read_text())
GiB = 2**30

# litgpt's 4-bit rows ran bitsandbytes 0.41.1 (each 4-bit linear keeps its input until its backward: PR #1270
# removed that in 0.43.2) under Lightning's BitsandbytesPrecision, which quantizes every linear including lm_head,
# with litgpt's LoRA dropout 0.05 (litgpt finetune/lora.py defaults). With today's defaults they are about 24% under.
LITGPT_4BIT_SETS = (
    'training.bnb_generation="legacy"',
    'training.quantized_modules="all-linears"',
    "training.lora_dropout=0.05",
)


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
        return self.compared_bytes() / GiB / float(self.case["published_gib"]) - 1

    def throughput_error(self) -> float:
        return self.st.tokens_per_second_per_gpu / float(self.case["published_tokens_per_s_per_gpu"]) - 1


def _args(case: dict[str, Any], extra: tuple[str, ...] = ()) -> tuple[str | None, str | None, list[str], str | None]:
    argv = [str(HERE / x) if x.startswith("configs/") else x for x in case["vramplan_args"]]
    a = build_parser().parse_args(argv)
    assert a.json and a.plan is None, case["id"]
    return a.model, a.gpu, [*a.sets, *extra], a.hf_config


def _run(case: dict[str, Any], sets: list[str], model: str | None, gpu: str | None, hf: str | None) -> Row:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PlanNotices: the CLI prints them on stderr, exit code unchanged
        plan = resolve_plan(None, model, gpu, sets, hf)
        return Row(case, plan, estimate(plan), step_time(plan), ())


def build_row(case: dict[str, Any], extra: tuple[str, ...] = ()) -> Row:
    """The case's plan and estimate, with each `future_sets` key the plan accepts (check.py's `estimate`)."""
    model, gpu, sets, hf = _args(case, extra)
    row = _run(case, sets, model, gpu, hf)
    accepted: list[str] = []
    for key, value in case.get("future_sets", {}).items():
        try:
            row = _run(case, [*sets, f"{key}={value}"], model, gpu, hf)
        except PlanError:
            continue
        sets.append(f"{key}={value}")
        accepted.append(key)
    return Row(row.case, row.plan, row.est, row.st, tuple(accepted))


@pytest.fixture(scope="module")
def published_env() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
        mp.setenv("VRAMPLAN_DETECT", "0")
        presets.reload()
        yield
    presets.reload()


@pytest.fixture
def rows(published_env: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Row]:
    # The suite's autouse fixture points VRAMPLAN_CONFIG_DIR at an empty folder before each test: point it back.
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
    presets.reload()
    return _rows()


_CACHE: dict[str, Row] = {}


def _rows() -> dict[str, Row]:
    if not _CACHE:
        for c in CASES:
            _CACHE[c["id"]] = build_row(c)
    return _CACHE


def memory_rows(rows: dict[str, Row]) -> list[Row]:
    return [
        r
        for r in rows.values()
        if "published_bound" not in r.case and r.case["figure_kind"] != "throughput" and r.case.get("published_gib")
    ]


def test_every_case_has_an_estimate_and_every_technique_is_expressible(rows: dict[str, Row]) -> None:
    """All 40 cases resolve; every `future_sets` key (the techniques the run used) is accepted by its plan."""
    assert len(rows) == len(CASES) == 40
    refused = {r.id: sorted(set(r.case.get("future_sets", {})) - set(r.accepted)) for r in rows.values()}
    # The one refusal: the user preset of torchtitan's 96 GB H100 (copied unchanged) gives no fp8 TFLOP/s, so
    # vramplan refuses Float8 on it as on any GPU without fp8 tensor cores; check.py leaves the key out the same way.
    assert {k: v for k, v in refused.items() if v} == {"torchtitan-70b-2d-256xh100": ["strategy.float8"]}
    assert rows["torchtitan-70b-2d-256xh100"].plan.hardware.gpu == "h100-96gb-gt"
    assert presets.registry().gpus["h100-96gb-gt"].fp8_tflops is None
    assert all(r.plan.hardware.gpu for r in rows.values())
    # the user presets were used (the three GPUs the built-in presets lack)
    assert {r.plan.hardware.gpu for r in rows.values()} >= {"h100-96gb-gt", "rtx-a6000"}


def test_memory_median_error_within_8_percent(rows: dict[str, Row]) -> None:
    errors = {r.id: r.memory_error() for r in memory_rows(rows)}
    assert len(errors) == 34
    median = statistics.median(abs(e) for e in errors.values())
    assert median <= 0.08, f"memory median |error| {median:.1%}: {errors}"


def test_allocated_reserved_total_are_ordered(rows: dict[str, Row]) -> None:
    for r in rows.values():
        assert r.est.allocated <= r.est.reserved <= r.est.total, r.id
        assert r.est.on_gpu <= r.est.total, r.id


# Runs that ran out of memory which the estimate places just under the GPU; why each is not held (source notes):
OOM_NOT_HELD = {
    # litgpt's LoRA rows are 2-10% under (its loading peak and Lightning's buffers are not in the plan); 38.8 GiB
    # of a 40 GiB A100 is within that of running out.
    "litgpt-llama2-7b-lora-mb4-oom": 0.10,
    # litgpt quantizes Falcon-40B while loading it: the OOM is most likely the loading peak, not the step's.
    "litgpt-falcon40b-qlora-nf4dq-oom": 0.20,
}


def test_no_run_that_fit_is_predicted_not_to_fit(rows: dict[str, Row]) -> None:
    """Every memory row measured on the GPU its source names ran there: each must be predicted to fit. The bound
    rows are runs that ran out of memory (`over`): check.py's verdict (predicted over the bound, or not fitting)
    holds for each except those in OOM_NOT_HELD, which must still come within their stated margin of the GPU."""
    ran = [r for r in memory_rows(rows) if r.case.get("gpu_named_in_source", True)]
    assert len(ran) >= 20 and [r.id for r in ran if not r.est.fits] == []
    bound = [r for r in rows.values() if "published_bound" in r.case]
    assert {r.case["published_bound"] for r in bound} == {"over"} and len(bound) == 3
    for r in bound:
        b = r.case["published_bound_gib"]
        total_gib = r.est.total / GiB
        agrees = total_gib > b * 0.985 or not r.est.fits
        if r.id in OOM_NOT_HELD:
            assert total_gib >= b * (1 - OOM_NOT_HELD[r.id]), f"{r.id}: {total_gib:.1f} GiB, ran out on {b} GiB"
        else:
            assert agrees, f"{r.id}: {total_gib:.1f} GiB predicted; the run ran out of memory on {b} GiB"


def test_throughput_median_error_within_15_percent(rows: dict[str, Row]) -> None:
    thr = [r for r in rows.values() if "published_bound" not in r.case and r.case["figure_kind"] == "throughput"]
    assert len(thr) == 3
    for r in thr:
        assert r.plan.training.mfu is None  # the default MFU, not one fitted to the run
    errors = {r.id: r.throughput_error() for r in thr}
    median = statistics.median(abs(e) for e in errors.values())
    assert median <= 0.15, f"throughput median |error| {median:.1%}: {errors}"


def test_litgpt_4bit_rows_within_10_percent_with_litgpt_settings(published_env: None, monkeypatch: Any) -> None:
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(HERE / "user_presets"))
    presets.reload()
    cases = [c for c in CASES if c["id"].startswith("litgpt-") and "qlora" in c["id"] and c.get("published_gib")]
    assert len(cases) == 4
    errors = {c["id"]: build_row(c, LITGPT_4BIT_SETS).memory_error() for c in cases}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    # with today's defaults (bitsandbytes >= 0.43.2, transformers' block linears only, no dropout) they are under
    default = {c["id"]: build_row(c).memory_error() for c in cases}
    assert all(default[k] < errors[k] for k in errors), (default, errors)
