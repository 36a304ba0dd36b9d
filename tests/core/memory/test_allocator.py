"""The caching allocator's rules (core/memory/allocator.py) against cases worked by hand from
c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size, should_split), and the reserve they give the
estimate: `reserved` beyond `allocated`, expandable segments, the user's percentage, the term's explanation."""

from __future__ import annotations

from vramplan.core.memory.allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    StepShapes,
    keeps_remainder,
    moment_requests,
    pack,
    round_size,
    segment_size,
)
from vramplan.core.memory.peak import allocator_waste, estimate
from vramplan.core.plan.helpers.units import KiB, MiB
from vramplan.core.plan.schema.plan import Plan, default_plan


def lora_plan(**changes: object) -> Plan:
    base = {"training.method": "lora", "hardware.gpus_per_node": 1, "strategy.zero_stage": 0}
    return default_plan().with_changes({**base, **changes})


def test_requests_round_up_to_512_bytes() -> None:
    assert round_size(1) == round_size(100) == round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(30 * MiB) == 30 * MiB


def test_roundup_power2_divisions() -> None:
    # 1,200,000 B with 4 divisions: floor power of two 1 MiB, divisions of 1 MiB >> 2 = 256 KiB, so 5 x 256 KiB
    assert round_size(1_200_000, 4) == 5 * 256 * KiB == 1_310_720
    assert round_size(1_200_000) == 2344 * 512  # off: 512 B rounding only
    assert round_size(1 * MiB, 4) == 1 * MiB  # a power of two stays
    assert round_size(1500, 4) == 1536  # not above 4 x 512 B: 512 B rounding


def test_segment_sizes() -> None:
    assert segment_size(512) == segment_size(1 * MiB) == SMALL_BUFFER == 2 * MiB  # small pool: <= 1 MiB
    assert segment_size(1 * MiB + 512) == segment_size(5 * MiB) == LARGE_BUFFER == 20 * MiB  # < 10 MiB
    assert segment_size(10 * MiB) == 10 * MiB
    assert segment_size(30 * MiB) == 30 * MiB
    assert segment_size(31 * MiB) == 32 * MiB  # rounded up to 2 MiB


def test_should_split() -> None:
    assert keeps_remainder(True, 512) and not keeps_remainder(True, 511)  # small pool: >= kMinBlockSize
    assert not keeps_remainder(False, 1 * MiB) and keeps_remainder(False, 1 * MiB + 512)  # large: > kSmallSize


def test_one_tensor_fills_its_segment() -> None:
    assert pack(((100, 1),)) == 2 * MiB  # 100 B -> a 512 B block in a 2 MiB small segment
    assert pack(((5 * MiB, 1),)) == 20 * MiB
    assert pack(((30 * MiB, 1),)) == 30 * MiB
    assert pack(((31 * MiB, 1),)) == 32 * MiB


def test_blocks_share_a_segment_while_they_fit() -> None:
    assert pack(((7 * MiB, 2),)) == 20 * MiB  # 14 MiB in one 20 MiB segment, the 6 MiB rest kept free
    assert pack(((7 * MiB, 3),)) == 40 * MiB  # 21 MiB > 20 MiB: the third needs a second segment
    assert pack(((6 * MiB, 3),)) == 20 * MiB  # 18 MiB: one segment, a 2 MiB rest
    assert pack(((512 * KiB, 4),)) == 2 * MiB  # small pool: four 512 KiB blocks in one 2 MiB segment
    assert pack(((512 * KiB, 5),)) == 4 * MiB
    # small and large requests never share a segment: 2 MiB + 20 MiB
    assert pack(((100, 1), (5 * MiB, 1))) == 22 * MiB


def test_a_kept_rest_serves_a_later_request() -> None:
    # 16.5 MiB -> an 18 MiB segment; the 1.5 MiB rest (> 1 MiB) stays a free block and holds a 1.5 MiB request
    assert pack(((16 * MiB + 512 * KiB, 1), (1 * MiB + 512 * KiB, 1))) == 18 * MiB
    # 11 MiB -> a 12 MiB segment; its 1 MiB rest is not split off (not > 1 MiB), so 1.5 MiB needs 20 MiB more
    assert pack(((11 * MiB, 1), (1 * MiB + 512 * KiB, 1))) == 32 * MiB


def test_expandable_segments_round_the_live_total() -> None:
    assert pack(((7 * MiB, 3),), expandable=True) == 22 * MiB  # 21 MiB rounded up to 2 MiB pages
    assert pack(((100, 1), (5 * MiB, 1)), expandable=True) == 2 * MiB + 6 * MiB  # one segment per pool
    assert pack(((30 * MiB, 4),), expandable=True) == 120 * MiB


def test_fsdp_shards_one_per_parameter_deepspeed_flat() -> None:
    """Adam's m and v of four 4096 x 4096 weights sharded over 8 ranks: 8 MiB each under FSDP (two per 20 MiB
    segment: 4 segments, 80 MiB); DeepSpeed's flat partition holds each state as one 32 MiB tensor (64 MiB)."""
    e = 4096 * 4096
    states = 2 * 4 * (4 * e // 8)  # m and v, fp32, 1/8 of the elements
    assert states == 64 * MiB
    shapes = StepShapes(((e, 4),), ((e, 4),), 8, 8, 8, (), 0, 0)
    per_param = moment_requests({"optimizer_states": states}, shapes, 2, 4)
    assert per_param == ((8 * MiB, 8),)
    assert pack(per_param) == 80 * MiB
    flat = moment_requests({"optimizer_states": states}, shapes._replace(flat=True), 2, 4)
    assert flat == ((32 * MiB, 2),) and pack(flat) == 64 * MiB


def test_waste_is_not_counted_twice_with_freed_logits() -> None:
    # the peak (moment 1) fills 110 B of segments for 100 B of tensors, plus 30 B of freed logits
    assert allocator_waste((90, 110), 1, 100, 30) == 10
    # an earlier moment filled more than the peak with its stranded block: the excess is reserve
    assert allocator_waste((150, 110), 1, 100, 30) == 20
    assert allocator_waste((100,), 0, 100, 0) == 0


def test_reserved_from_the_rules() -> None:
    est = estimate(lora_plan())
    terms = est.overhead_bytes
    assert est.plan.overhead.allocator_reserve_percent is None
    assert 0 < terms["allocator_reserve"] < est.peak.total // 10
    assert est.reserved == est.allocated + terms["allocator_reserve"] + terms.get("freed_logits", 0)
    assert est.allocated <= est.reserved <= est.total
    default = estimate(default_plan())
    assert default.allocated < default.reserved <= default.total


def test_expandable_segments_give_a_smaller_gap() -> None:
    plain = estimate(lora_plan())
    grown = estimate(lora_plan(**{"overhead.expandable_segments": True}))
    assert grown.allocated == plain.allocated
    gap_plain, gap_grown = plain.reserved - plain.allocated, grown.reserved - grown.allocated
    assert 0 < gap_grown < gap_plain
    assert gap_grown <= 4 * MiB  # two pools, each rounded up to a 2 MiB page


def test_the_users_percentage_replaces_the_rules() -> None:
    rules = estimate(lora_plan())
    five = estimate(lora_plan(**{"overhead.allocator_reserve_percent": 5.0}))
    zero = estimate(lora_plan(**{"overhead.allocator_reserve_percent": 0.0}))
    assert five.allocated == rules.allocated == zero.allocated
    assert five.overhead_bytes["allocator_reserve"] == int(five.peak.total * 5 / 100)
    assert zero.overhead_bytes["allocator_reserve"] == 0
    assert five.overhead_bytes["allocator_reserve"] != rules.overhead_bytes["allocator_reserve"]


def test_the_terms_explanation() -> None:
    term = {t.name: t for t in estimate(lora_plan()).overhead_terms}["allocator_reserve"]
    assert "512 B" in term.formula and "segments" in term.formula
    assert "CUDACachingAllocator.cpp" in term.source and "Not modelled" in term.source
    pct = {t.name: t for t in estimate(lora_plan(**{"overhead.allocator_reserve_percent": 7.5})).overhead_terms}
    assert pct["allocator_reserve"].formula == "7.5% of the tensor peak (overhead.allocator_reserve_percent)"
    grown = {t.name: t for t in estimate(lora_plan(**{"overhead.expandable_segments": True})).overhead_terms}
    assert "expandable_segments" in grown["allocator_reserve"].formula
