"""The GPU selection guide (`core.advice.gpuguide`): every preset, the fewest GPUs that fit, why not, the advisor's
change, time and cost. Each figure is checked against the estimator and the time model it comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramplan.core.advice.gpuguide import COUNTS, MAX_GPUS, gpu_guide, sort_rows
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.step import step_time


def at(plan: Plan, gpu: str, gpus_per_node: int, nodes: int = 1) -> Plan:
    return plan.with_changes({"hardware.gpu": gpu, "hardware.gpus_per_node": gpus_per_node, "hardware.nodes": nodes})


def test_every_preset_has_a_row_with_the_fewest_gpus_that_fit() -> None:
    plan = default_plan()  # LLaMA-7B full fine-tuning, ZeRO-3, full checkpointing
    guide = gpu_guide(plan, advise=False)
    assert sorted(r.gpu for r in guide.rows) == sorted(presets.registry().gpus)
    for r in guide.rows:
        assert r.fits, r.why  # 7B with ZeRO-3 fits on every preset at some count up to 1024
        gpn, nodes = r.layout
        assert gpn * nodes == r.min_gpus
        assert estimate(at(plan, r.gpu, gpn, nodes)).fits
        fewer = [c for c in COUNTS if c[0] * c[1] < r.min_gpus]
        assert all(not estimate(at(plan, r.gpu, *c)).fits for c in fewer)  # none of the smaller counts fits
    a100 = next(r for r in guide.rows if r.gpu == "a100-80gb")
    # 6.74e9 params x 16 B (bf16 weights + grads, fp32 master + Adam) = 108 GB > 80 GB on 1 GPU; ZeRO-3 halves it
    assert a100.min_gpus == 2
    st = step_time(at(plan, "a100-80gb", 2))
    assert a100.step_seconds == st.step_seconds and a100.tokens_per_second == st.tokens_per_second


def test_a_plan_that_fits_nowhere_says_why() -> None:
    # 405B without ZeRO: every GPU holds all 4.06e11 parameters in fp32 (bf16-autocast keeps fp32 weights):
    # 4.06e11 x 4 B = 1.62e12 B = 1511.9 GiB, more than any GPU has
    plan = default_plan().with_changes({"model.preset": "llama-3.1-405b", "strategy.zero_stage": 0})
    params = estimate(plan).params_total
    guide = gpu_guide(plan, advise=False)
    for r in guide.rows:
        assert not r.fits and r.min_gpus is None
        assert r.why.startswith(f"at {MAX_GPUS} GPUs:"), r.why
        assert f"parameters alone ({params * 4 / GiB:.1f} GiB) exceed the GPU" in r.why
    data = guide.to_json()
    assert all(g["min_gpus"] is None and g["fits"] is False and g["step_seconds"] is None for g in data["gpus"])


def test_tensor_parallel_plans_start_at_their_degree() -> None:
    plan = default_plan().with_changes({"strategy.tensor_parallel": 8, "strategy.zero_stage": 1})
    rows = gpu_guide(plan, advise=False).rows
    assert all(r.min_gpus >= 8 for r in rows if r.min_gpus is not None)  # 1, 2, 4 GPUs cannot hold TP 8: skipped
    assert next(r for r in rows if r.gpu == "a100-80gb").min_gpus == 8


def test_the_advisor_change_fits_on_fewer_gpus() -> None:
    plan = default_plan()
    row = next(r for r in gpu_guide(plan, advisor_seconds=120).rows if r.gpu == "h100-80gb")  # no budget cut
    assert row.min_gpus == 2 and row.change is not None
    c = row.change
    assert c.gpus < row.min_gpus
    changed = at(plan, "h100-80gb", c.gpus).with_changes(dict(c.changes))
    assert estimate(changed).fits
    assert c.step_seconds == step_time(changed).step_seconds


def test_time_and_cost_to_train_with_a_budget_and_prices() -> None:
    plan = default_plan().with_changes({"training.tokens": "10B", "hardware.price_per_gpu_hour": 1.5})
    guide = gpu_guide(plan, prices={"h100-80gb": 2.5}, advise=False)
    rows = {r.gpu: r for r in guide.rows}
    h100, a100, t4 = rows["h100-80gb"], rows["a100-80gb"], rows["t4"]
    # hours = 1e10 tokens / tokens per second / 3600; cost = hours x GPUs x price
    assert h100.train_hours == pytest.approx(1e10 / h100.tokens_per_second / 3600)
    assert h100.cost == pytest.approx(h100.train_hours * h100.min_gpus * 2.5)
    assert a100.cost == pytest.approx(a100.train_hours * a100.min_gpus * 1.5)  # the plan's price: its own GPU
    assert t4.train_hours is not None and t4.cost is None  # no preset price, none given
    everyone = gpu_guide(plan, prices={"*": 1.0}, advise=False)
    assert all(r.cost is not None for r in everyone.rows if r.fits)


def test_sorting_by_cost_and_by_time() -> None:
    plan = default_plan().with_changes({"training.tokens": "1B"})
    by_cost = gpu_guide(plan, sort="cost", prices={"*": 2.0, "h100-80gb": 1.0}, advise=False).rows
    costs = [r.cost for r in by_cost if r.fits]
    assert costs == sorted(costs)
    by_time = gpu_guide(plan, sort="time", advise=False).rows
    hours = [r.train_hours for r in by_time if r.fits]
    assert hours == sorted(hours)
    with pytest.raises(PlanError):
        sort_rows(by_time, "speed")


def test_json_is_strict_and_has_the_contract_fields() -> None:
    data = gpu_guide(default_plan()).to_json()
    text = json.dumps(data, allow_nan=False)
    for g in json.loads(text)["gpus"]:
        assert {"gpu", "min_gpus", "fits", "step_seconds", "tokens_per_second", "train_hours", "cost"} <= set(g)


def test_user_gpu_presets_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hw = tmp_path / "cfg" / "hardware"
    hw.mkdir(parents=True)
    spec = presets.gpu("a100-80gb").model_dump(exclude={"id", "match"})
    lines = [f"{k} = {json.dumps(v)}" for k, v in spec.items() if v is not None]
    text = "\n".join([*lines, "price_per_gpu_hour = 0.9"]).replace('name = "', 'name = "Lab ', 1)
    (hw / "lab-gpu.toml").write_text(text)
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "cfg"))
    presets.reload()
    row = next(r for r in gpu_guide(default_plan().with_changes({"training.tokens": "1B"})).rows if r.gpu == "lab-gpu")
    assert row.user and row.min_gpus == 2 and row.price_per_gpu_hour == 0.9
    assert row.cost == pytest.approx(row.train_hours * 2 * 0.9)


def test_the_advisor_stays_within_its_time_budget() -> None:
    rows = gpu_guide(default_plan().with_changes({"model.preset": "qwen2.5-7b"}), advisor_seconds=0).rows
    assert all(r.change is None and r.change_note == "not searched: time budget" for r in rows)
    # the fewest GPUs are always searched (plain estimates), up to the largest count where none fits
    assert all(r.min_gpus is not None or r.why.startswith(f"at {MAX_GPUS} GPUs:") for r in rows)
    assert sum(r.min_gpus is not None for r in rows) > len(rows) // 2
