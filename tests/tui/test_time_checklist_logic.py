"""The plain logic behind the step-time figures, the strategy effects and the checklist rows (no app running)."""

from __future__ import annotations

import pytest

from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import checklist
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB, number_text, parse_number
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.time.step import step_time
from vramplan.tui.effects import alternatives, brief, effects_line, toggle_effects
from vramplan.tui.widgets.checklist_rows import advice_rows, checklist_rows

OVER = {"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"}


@pytest.mark.parametrize(
    ("text", "integer", "value"),
    [
        ("2T", True, 2 * 10**12),
        ("300b", True, 300 * 10**9),
        ("1e9", True, 10**9),
        ("2,000_000", True, 2_000_000),
        ("0.4", False, 0.4),
        ("45%", False, 0.45),
        ("$2.5", False, 2.5),
        ("  ", False, None),
    ],
)
def test_parse_number(text: str, integer: bool, value: float | None) -> None:
    parsed = parse_number(text, integer)
    assert parsed is None if value is None else parsed == pytest.approx(value)
    assert isinstance(parsed, int) or not integer


@pytest.mark.parametrize(("text", "integer"), [("abc", False), ("1.5", True), ("inf", False), ("nan", True)])
def test_parse_number_rejects_what_is_not_a_number(text: str, integer: bool) -> None:
    with pytest.raises(ValueError, match="number"):
        parse_number(text, integer)


def test_number_text_reads_back() -> None:
    assert number_text(2 * 10**12, integer=True) == "2T"
    assert number_text(1_500_000_000, integer=True) == "1.5B"
    assert number_text(1234567, integer=True) == "1234567"
    assert number_text(0.45) == "0.45"
    for value in (2 * 10**12, 1_500_000_000, 1234567, 7):
        assert parse_number(number_text(value, integer=True), integer=True) == value


def test_alternatives_start_with_the_next_choice() -> None:
    plan = default_plan()  # full checkpointing, TP 1
    assert alternatives(plan, "strategy.gradient_checkpointing") == [
        ("none", "none"),
        ("selective", "selective"),
        ("op", "op"),
    ]
    assert alternatives(plan, "strategy.tensor_parallel") == [("2", 2)]
    tp2 = plan.with_changes({"strategy.tensor_parallel": 2})
    assert alternatives(tp2, "strategy.tensor_parallel") == [("4", 4), ("1", 1)]


def test_toggle_effects_are_re_estimates_and_skip_impossible_choices() -> None:
    plan = default_plan()
    est, st = estimate(plan), step_time(plan)
    effects = toggle_effects(plan, est, ("strategy.gradient_checkpointing", "strategy.offload_parameters"))
    assert effects["strategy.offload_parameters"] == []  # needs the optimizer offloaded too: blocked, not shown
    (label, none), *_ = effects["strategy.gradient_checkpointing"]
    changed = plan.with_changes({"strategy.gradient_checkpointing": "none"})
    assert label == "none"
    assert none.memory_delta == estimate(changed).total - est.total > 0
    assert none.relative_token_time == pytest.approx(step_time(changed).step_seconds / st.step_seconds)
    delta = f"{none.memory_delta / GiB:+.1f} GiB"
    assert brief(none) == f"{delta}, {(none.relative_token_time - 1) * 100:+.0f}% time"
    assert effects_line([(label, none)]) == f"→ none: {brief(none)}"
    assert effects_line([]) == ""


def test_brief_marks_a_choice_that_does_not_fit_and_large_slowdowns() -> None:
    plan = default_plan()
    effects = dict(toggle_effects(plan, estimate(plan), ("strategy.zero_stage", "strategy.offload_optimizer")))
    off = dict(effects["strategy.zero_stage"])["off"]  # DDP: 140 GiB on an 80 GiB GPU
    assert not off.fits and "(over)" in brief(off)
    over = plan.with_changes({"strategy.zero_stage": 0})
    back = dict(dict(toggle_effects(over, estimate(over), ("strategy.zero_stage",)))["strategy.zero_stage"])
    assert back["3"].fits and "(fits)" in brief(back["3"])
    nvme = dict(effects["strategy.offload_optimizer"])["nvme"]
    assert nvme.relative_token_time >= 2 and f"×{nvme.relative_token_time:.1f} time" in brief(nvme)


def test_rows_select_what_can_be_applied_and_stale_advice_cannot() -> None:
    plan = default_plan().with_changes(OVER)
    est = estimate(plan)
    cl, advice = checklist(plan, est), advise(plan, est=est)
    rows = {r.id: r for r in advice_rows(advice, est, 60) + checklist_rows(cl, 60)}
    for item in cl:
        assert rows[item.id].selectable == (item.fix is not None or item.status == "manual")
        assert item.title in rows[item.id].prompt.plain
    assert rows["oom.capacity"].prompt.plain.startswith("✘ FAIL")
    assert all(rows[f"advice.s{n}"].selectable for n in range(len(advice.suggestions)))
    assert advice.suggestions[0].title in rows["advice.s0"].prompt.plain
    assert not rows["group.oom"].selectable
    other = estimate(plan.with_changes({"training.seq_len": 1024}))  # the advice is for another plan now
    stale = advice_rows(advice, other, 60)
    assert "updating" in stale[0].prompt.plain and not any(r.selectable for r in stale)
    assert all(len(line) <= 60 for r in rows.values() for line in r.prompt.plain.splitlines())
