"""The caching allocator, replayed (core/memory/caching_allocator.py), case by case against the rules of
c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch at 001074d25084: the function each case exercises is named) and
the PyTorch docs, "CUDA semantics: Memory management" / "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF".
Every expected figure is worked by hand in the test."""

from __future__ import annotations

import pytest

from vramplan.core.memory.alloc_conf import AllocatorConfig, parse_alloc_conf
from vramplan.core.memory.caching_allocator import (
    ALLOC,
    EMPTY_CACHE,
    FREE,
    CachingAllocator,
    Event,
    next_division,
    replay,
    round_size,
)
from vramplan.core.plan.helpers.units import GiB, KiB, MiB

DEFAULT = AllocatorConfig()


def a(i: int, n: int, stream: int = 0) -> Event:
    return (ALLOC, i, n, stream)


def f(i: int) -> Event:
    return (FREE, i, 0, 0)


def test_every_request_is_rounded_to_512_bytes() -> None:
    # round_size: max(512, ceil(n / 512) x 512); `allocated` counts the rounded block
    assert round_size(1, DEFAULT) == round_size(512, DEFAULT) == 512
    assert round_size(513, DEFAULT) == 1024
    r = replay([a(1, 1), a(2, 513)])
    assert r.allocated == (512, 512 + 1024)


def test_small_requests_share_one_2_mib_segment() -> None:
    # get_pool: <= 1 MiB is the small pool; get_allocation_size: its segments are kSmallBuffer = 2 MiB, split down to
    # 512 B (should_split, small pool); 4 x 512 KiB fill one segment, the fifth needs a second
    r = replay([a(i, 512 * KiB) for i in range(5)])
    assert r.reserved[:4] == (2 * MiB,) * 4
    assert r.reserved[4] == 4 * MiB
    assert r.peak_allocated == 5 * 512 * KiB


def test_a_request_of_1_to_10_mib_gets_a_20_mib_segment_split_for_the_next() -> None:
    # get_allocation_size: 1 MiB < 3 MiB < kMinLargeAlloc (10 MiB) -> kLargeBuffer = 20 MiB; should_split (large
    # pool): 17 MiB remain > 1 MiB, so a 5 MiB request is carved from the rest, no new segment
    r = replay([a(1, 3 * MiB), a(2, 5 * MiB)])
    assert r.reserved == (20 * MiB, 20 * MiB)
    assert r.allocated == (3 * MiB, 8 * MiB)


def test_a_large_request_is_rounded_to_2_mib_and_keeps_a_remainder_of_1_mib_or_less() -> None:
    # 11 MiB + 1 B: round_size -> 11 MiB + 512; get_allocation_size -> 12 MiB (kRoundLarge); should_split: the
    # remainder (1 MiB - 512 B) is not > kSmallSize, so the request keeps the whole 12 MiB block: allocated 12 MiB
    r = replay([a(1, 11 * MiB + 1)])
    assert r.reserved == (12 * MiB,)
    assert r.allocated == (12 * MiB,)


def test_freed_blocks_stay_reserved_and_serve_the_best_fit() -> None:
    # free_block: the block is cached, not returned (reserved unchanged); get_free_block takes the smallest cached
    # block of the stream that holds the request (best fit), so the 30 MiB request reuses the 40 MiB segment (its
    # 10 MiB rest is split off: > 1 MiB), not the 100 MiB one
    ev = [a(1, 100 * MiB), a(2, 40 * MiB), f(1), f(2), a(3, 30 * MiB)]
    r = replay(ev)
    assert r.reserved == (100 * MiB, 140 * MiB, 140 * MiB, 140 * MiB, 140 * MiB)
    assert r.allocated[-1] == 30 * MiB
    al = CachingAllocator()
    b1, b2 = al.malloc(100 * MiB), al.malloc(40 * MiB)
    assert b1 is not None and b2 is not None
    al.free(b1)
    al.free(b2)
    b3 = al.malloc(30 * MiB)
    assert b3 is not None and b3.segment is b2.segment


def test_freed_neighbours_merge_back_into_one_block() -> None:
    # try_merge_blocks: two 8 MiB blocks split from one 20 MiB segment merge with the free 4 MiB rest when freed,
    # so a 20 MiB request fits the whole segment again: no new segment
    ev = [a(1, 8 * MiB), a(2, 8 * MiB), f(1), f(2), a(3, 20 * MiB)]
    r = replay(ev)
    assert r.reserved[-1] == 20 * MiB
    assert r.allocated[-1] == 20 * MiB


def test_a_block_serves_only_its_own_stream() -> None:
    # BlockComparatorSize orders blocks by stream first; get_free_block's lower_bound stops at another stream: a
    # block freed on stream 1 is not reused on stream 0 (the per-stream pools)
    r = replay([a(1, 50 * MiB, stream=1), f(1), a(2, 50 * MiB, stream=0)])
    assert r.reserved[-1] == 100 * MiB
    same = replay([a(1, 50 * MiB, stream=1), f(1), a(2, 50 * MiB, stream=1)])
    assert same.reserved[-1] == 50 * MiB


def test_max_split_size_keeps_oversize_blocks_whole() -> None:
    # max_split_size_mb:100 -> 100 MiB. get_free_block: an oversize cached block (>= 100 MiB) does not serve a
    # smaller request (30 MiB gets a new segment) and serves a larger one only within kLargeBuffer (20 MiB): the
    # 150 MiB block serves 140 MiB (10 MiB more) but not 120 MiB (30 MiB more)
    conf = parse_alloc_conf("max_split_size_mb:100")
    assert conf.max_split_size == 100 * MiB
    r = replay([a(1, 150 * MiB), f(1), a(2, 30 * MiB)], conf)
    assert r.reserved[-1] == 180 * MiB
    r = replay([a(1, 150 * MiB), f(1), a(2, 140 * MiB)], conf)
    assert r.reserved[-1] == 150 * MiB and r.allocated[-1] == 150 * MiB  # not split: should_split needs < 100 MiB
    r = replay([a(1, 150 * MiB), f(1), a(2, 120 * MiB)], conf)
    assert r.reserved[-1] == 270 * MiB
    # without the setting the 150 MiB block is split for the 30 MiB request
    assert replay([a(1, 150 * MiB), f(1), a(2, 30 * MiB)]).reserved[-1] == 150 * MiB


def test_out_of_memory_frees_cached_segments_and_retries() -> None:
    # malloc: no cached block fits 60 MiB and cudaMalloc would pass the 100 MiB capacity (50 cached + 60), so
    # release_cached_blocks frees every unsplit cached segment (the free 50 MiB) and alloc_block retries: it fits
    conf = AllocatorConfig(capacity_bytes=100 * MiB)
    r = replay([a(1, 50 * MiB), f(1), a(2, 60 * MiB)], conf)
    assert not r.failures
    assert r.reserved[-1] == 60 * MiB
    assert r.num_alloc_retries == 1


def test_a_split_segment_in_use_cannot_be_released_and_the_request_fails() -> None:
    # 20 MiB segment split for 3 MiB (live) and 5 MiB (freed, merged into a 17 MiB free rest): release_cached_blocks
    # frees only unsplit blocks, so the cached 17 MiB stays; 90 MiB does not fit 100 - 20: out of memory
    conf = AllocatorConfig(capacity_bytes=100 * MiB)
    r = replay([a(1, 3 * MiB), a(2, 5 * MiB), f(2), a(3, 90 * MiB), a(4, 70 * MiB)], conf)
    assert [x.alloc_id for x in r.failures] == [3]
    assert r.largest_failed == 90 * MiB
    assert r.failures[0].reserved_bytes == 20 * MiB
    assert r.reserved[-1] == 90 * MiB and r.allocated[-1] == 73 * MiB  # 70 MiB fits: 20 + 70 <= 100


def test_release_available_cached_blocks_frees_oversize_blocks_first() -> None:
    # with max_split_size 100 MiB and a 250 MiB capacity: 150 MiB cached (oversize) and a 120 MiB request (no
    # oversize block within 20 MiB): alloc_block fails (150 + 120 > 250), release_available_cached_blocks frees
    # the 150 MiB block (the first oversize block >= max(120, 100) MiB) and the retry fits, with no full release
    conf = parse_alloc_conf("max_split_size_mb:100", capacity_bytes=250 * MiB)
    r = replay([a(1, 150 * MiB), f(1), a(2, 120 * MiB)], conf)
    assert not r.failures
    assert r.reserved[-1] == 120 * MiB
    assert r.num_alloc_retries == 0


def test_expandable_segments_grow_one_segment_in_20_mib_pages() -> None:
    # expandable_segments:True: find_expandable_block makes one segment per stream and pool, segment_size
    # kLargeBuffer (20 MiB) for the large pool; map_block maps whole pages; should_split splits >= 512 B rests.
    # 30 MiB -> 2 pages (40 MiB); +25 MiB: 10 MiB free at the end, 15 more -> 1 page more (60 MiB); the 12 MiB
    # request that follows takes the last 5 MiB and one more page (80 MiB), all in one segment
    conf = parse_alloc_conf("expandable_segments:True")
    r = replay([a(1, 30 * MiB), a(2, 25 * MiB), a(3, 12 * MiB)], conf)
    assert r.reserved == (40 * MiB, 60 * MiB, 80 * MiB)
    assert r.allocated == (30 * MiB, 55 * MiB, 67 * MiB)


def test_expandable_segments_reuse_a_freed_range_that_a_fixed_segment_could_not() -> None:
    # without expandable segments: 30 MiB freed, then 35 MiB: no cached block holds it -> a second segment.
    # With them: the freed 30 MiB at the start plus the free rest of the last page are not contiguous with room
    # for 35 MiB, so the segment grows at its end by whole pages: (30 + 10 free) + 20 more
    fixed = replay([a(1, 30 * MiB), a(2, 10 * MiB), f(1), a(3, 35 * MiB)])
    assert fixed.reserved[-1] == 30 * MiB + 10 * MiB + 36 * MiB
    grow = replay([a(1, 30 * MiB), a(2, 10 * MiB), f(1), a(3, 35 * MiB)], parse_alloc_conf("expandable_segments:True"))
    assert grow.reserved[-1] == 80 * MiB
    # and emptying the cache unmaps the free pages: what stays mapped is the pages under live blocks
    ev = [a(1, 30 * MiB), a(2, 10 * MiB), f(1), (EMPTY_CACHE, 0, 0, 0)]
    assert replay(ev, parse_alloc_conf("expandable_segments:True")).reserved[-1] == 20 * MiB


def test_small_pool_expandable_pages_are_2_mib() -> None:
    conf = parse_alloc_conf("expandable_segments:True")
    r = replay([a(i, 700 * KiB) for i in range(3)], conf)
    assert r.reserved == (2 * MiB, 2 * MiB, 4 * MiB)


def test_roundup_power2_divisions() -> None:
    # the docs' example: 1200 with 4 divisions lies between 1024 and 2048 (1024, 1280, 1536, 1792) -> 1280
    assert next_division(1200, 4) == 1280
    assert next_division(1024, 4) == 1024
    # round_size applies it above 512 B x divisions: 5 MiB + 1 B with 4 divisions -> 4 MiB + 2 x 1 MiB = 6 MiB
    conf = parse_alloc_conf("roundup_power2_divisions:4")
    assert round_size(5 * MiB + 1, conf) == 6 * MiB
    assert round_size(1500, conf) == 1536  # not above 2048 B: 512 B rounding
    # per interval: [1:2,>:8]: 1 MiB..2 MiB in halves, above in eighths
    per = parse_alloc_conf("roundup_power2_divisions:[1:2,>:8]")
    assert round_size(1 * MiB + 1, per) == 1 * MiB + 512 * KiB
    assert round_size(5 * MiB + 1, per) == 5 * MiB + 512 * KiB
    with pytest.raises(ValueError):
        parse_alloc_conf("roundup_power2_divisions:3")


def test_garbage_collection_threshold_frees_old_cached_blocks_before_growing() -> None:
    # garbage_collect_cached_blocks runs only with a memory fraction set (malloc's `set_fraction` check). With 1 GiB
    # allowed and threshold 0.5: 600 MiB reserved > 512 MiB, so before cudaMalloc of 100 MiB the unsplit cached
    # blocks at least as old as their average are freed: the 300 MiB and the 300 MiB blocks both -> 100 MiB left
    events = [a(1, 300 * MiB), a(2, 300 * MiB), f(1), f(2), a(3, 400 * MiB)]
    conf = parse_alloc_conf("garbage_collection_threshold:0.5", memory_fraction=1.0, device_bytes=1 * GiB)
    r = replay(events, conf)
    assert r.reserved[-1] == 400 * MiB
    # without the fraction the threshold does nothing: the 400 MiB request gets a new segment
    off = parse_alloc_conf("garbage_collection_threshold:0.5")
    assert replay(events, off).reserved[-1] == 1000 * MiB


def test_bad_settings_are_refused() -> None:
    for text in ("max_split_size_mb:10", "expandable_segments:yes", "garbage_collection_threshold:1.5", "foo:1"):
        with pytest.raises(ValueError):
            parse_alloc_conf(text)


def test_fragmentation_and_peaks() -> None:
    # 3 MiB in a 20 MiB segment: at the reserved peak, (20 - 3) / 20 of it is cached but unused
    r = replay([a(1, 3 * MiB), f(1)])
    assert r.peak_reserved == 20 * MiB and r.peak_allocated == 3 * MiB
    assert r.fragmentation == pytest.approx(17 / 20)
    assert r.peak_reserved_at == 0 and r.largest_free_at_peak == 17 * MiB


@pytest.mark.parametrize(
    "conf_text", ["", "expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:[1:2,>:4]"]
)
def test_random_traces_keep_the_allocator_consistent(conf_text: str) -> None:
    # invariants of DeviceStats: allocated = the live blocks' sizes, allocated <= reserved, a segment's blocks tile
    # it; after every block is freed and the cache emptied nothing stays reserved
    import random

    rng = random.Random(7)
    conf = parse_alloc_conf(conf_text)
    al = CachingAllocator(conf)
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            al.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([rng.randrange(1, 4 * KiB), rng.randrange(1, 2 * MiB), rng.randrange(1, 200 * MiB)])
            block = al.malloc(size, stream=rng.randrange(2))
            assert block is not None
            live.append(block)
        assert al.allocated == sum(b.size for b in live)
        assert al.allocated <= al.reserved
    for b in live:
        al.free(b)
    al.empty_cache()
    assert al.allocated == 0 and al.reserved == 0
