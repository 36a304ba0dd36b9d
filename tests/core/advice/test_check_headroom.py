"""The checklist's capacity item and memory fix keep the margin a plan asks for (advice.headroom_percent, vramplan
check --headroom), and word the allocator's reserve as the estimate now models it (issue 32.1)."""

from __future__ import annotations

from vramplan.core.advice.checklist import checklist
from vramplan.core.plan.schema.plan import default_plan


def _capacity(plan):  # type: ignore[no-untyped-def]
    return next(i for i in checklist(plan).items if i.id == "oom.capacity")


def test_check_headroom_asks_the_memory_fix_for_that_much_free() -> None:
    plan = default_plan()  # 77% free
    assert _capacity(plan).status == "ok"
    item = _capacity(plan.with_changes({"advice.headroom_percent": 85}))
    assert item.status == "warn" and "85% advice.headroom_percent" in item.detail
    assert item.fix is not None and item.fix.headroom_fraction >= 0.85


def test_under_fragmentations_share_outside_the_error_band_names_the_allocators_reserve() -> None:
    """7B full fine-tuning without checkpointing, 3 x 2,736 tokens: 9% free, outside the estimate's error band
    (full fine-tuning: a few percent) but under the 10% fragmentation takes. The reserve is the allocator's rules
    now (overhead.allocator_reserve_percent unset), which the text once printed as a percentage."""
    plan = default_plan().with_changes(
        {"strategy.gradient_checkpointing": "none", "training.micro_batch_size": 3, "training.seq_len": 2736}
    )
    item = _capacity(plan)
    assert item.status == "warn" and "less than fragmentation can take" in item.detail
    assert "caching allocator's rounding and segments" in item.detail
    set5 = _capacity(plan.with_changes({"overhead.allocator_reserve_percent": 5}))
    assert "5% of the tensor peak" in set5.detail
