"""PyTorch's CUDA caching allocator, replayed: a model of ``DeviceCachingAllocator`` that places a sequence of
allocations and frees (a trace of the step, `vramplan trace`) block by block and says what it reserves.

Written from c10/cuda/CUDACachingAllocator.cpp of pytorch/pytorch at commit 001074d25084 (the rules and their
functions are named where each is modelled) and the PyTorch docs, "CUDA semantics: Memory management" and
"Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF":

- ``round_size``: a request is rounded up to a multiple of 512 B (``kMinBlockSize``); with
  ``roundup_power2_divisions`` (one value, or one per power-of-two interval from 1 MiB to 64 GiB:
  ``CUDAAllocatorConfig::roundup_power2_divisions``) a request above 512 B x divisions is rounded up to the next
  of that many equal divisions between the two powers of two around it (``roundup_power2_next_division``);
- ``get_pool``: a rounded request <= 1 MiB (``kSmallSize``) comes from the small pool, else the large pool; a free
  block serves only requests on the stream it was allocated on (the pools' blocks are ordered by stream, then
  size, then address: ``BlockComparatorSize``);
- ``get_free_block``: the smallest cached block of the stream that holds the request (best fit); an oversize block
  (>= ``max_split_size``) never serves a smaller request, and serves a larger one only when less than 20 MiB
  (``kLargeBuffer``) bigger;
- ``get_allocation_size`` / ``alloc_block``: no cached block: a new segment (``cudaMalloc``) of 2 MiB for the
  small pool (``kSmallBuffer``), 20 MiB for a large request under 10 MiB (``kMinLargeAlloc``), else the request
  rounded up to 2 MiB (``kRoundLarge``);
- ``should_split``: the rest of the block stays a free block when it is >= 512 B (small pool, or with expandable
  segments) or, in the large pool, when it is > 1 MiB and the request is under ``max_split_size``; otherwise the
  request keeps the whole block (``allocated`` counts the block's size, not the request's);
- ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours of the same segment and
  stays cached (reserved) until released;
- ``malloc``'s retries before an out-of-memory error: ``garbage_collect_cached_blocks`` (only when
  ``garbage_collection_threshold`` > 0 and a per-process memory fraction is set: the allocator's ``set_fraction``),
  then ``alloc_block``, then ``release_available_cached_blocks`` (oversize blocks, only with ``max_split_size``)
  and retry, then ``release_cached_blocks`` (every unsplit cached segment; unmapped pages of expandable segments)
  and retry; what still does not fit is an out-of-memory error;
- ``expandable_segments``: one segment per stream and pool reserves address space and maps physical pages of
  2 MiB (small pool) or 20 MiB (large pool: ``find_expandable_block``'s ``segment_size``) as it grows, at the
  lowest address with room (``find_expandable_block``, ``map_block``, ``try_allocate_expandable_block``); a block
  there is split whenever 512 B or more remain; releasing unmaps the whole free pages (``unmap_block``).

Not modelled: CUDA graph private pools, cross-stream uses (``recordStream``: a block is reused when it is freed),
IPC, the free-memory callbacks. Addresses are a counter (a new segment above the last), which only orders blocks of
equal size. `replay` takes events ``(ALLOC, id, bytes, stream)``, ``(FREE, id, 0, 0)``, ``(EMPTY_CACHE, 0, 0, 0)``
and gives allocated and reserved after each, their peaks, the fragmentation at the reserved peak and the requests it
could not place.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from vramplan.core.memory.alloc_conf import POWER2_INTERVALS, UNLIMITED, AllocatorConfig
from vramplan.core.memory.allocator import (
    LARGE_BUFFER,
    MIN_BLOCK,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
)

ALLOC, FREE, EMPTY_CACHE = 1, 0, 2  # event kinds
Event = tuple[int, int, int, int]  # (kind, allocation id, bytes, stream)


def divisions_for(size: int, conf: AllocatorConfig) -> int:
    """``CUDAAllocatorConfig::roundup_power2_divisions(size)``: the interval of ``floor(log2(size))`` counted
    from 1 MiB, clamped to the 16 intervals."""
    index = max(0, min(size.bit_length() - 1 - 20, POWER2_INTERVALS - 1))
    return conf.roundup_power2_divisions[index]


def next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: 1200 B with 4 divisions lies between 1024 and 2048, whose quarters are
    1024, 1280, 1536, 1792: 1280."""
    if size & (size - 1) == 0:
        return size
    floor2 = 1 << (size.bit_length() - 1)
    step = floor2 >> (divisions.bit_length() - 1)
    if step == 0:
        return floor2 << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(size: int, conf: AllocatorConfig) -> int:
    """``round_size``: 512 B at least, a multiple of 512 B, or the next power-of-two division."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    divisions = divisions_for(size, conf)
    if divisions > 1 and size > MIN_BLOCK * divisions:
        return next_division(size, divisions)
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment a rounded request gets when no cached block holds it."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False, slots=True)
class Segment:
    """A ``cudaMalloc``'d segment, or an expandable segment's reserved address range (``ExpandableSegment``) with
    its mapped pages (``page``: 2 MiB small pool, 20 MiB large)."""

    ptr: int
    size: int
    expandable: bool = False
    page: int = 0


@dataclass(eq=False, slots=True)
class Block:
    """``Block``: a range of a segment, allocated or free; ``mapped`` is False for an expandable segment's range
    that has no physical pages."""

    ptr: int
    size: int
    stream: int
    pool: Pool
    segment: Segment
    prev: Block | None = None
    next: Block | None = None
    allocated: bool = False
    requested: int = 0
    mapped: bool = True
    gc_base: int = 0

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.ptr)


@dataclass(eq=False)
class Pool:
    """``BlockPool``: the free (cached) blocks ordered by (stream, size, address), and the unmapped ranges of its
    expandable segments ordered by (stream, address)."""

    small: bool
    keys: list[tuple[int, int, int]] = field(default_factory=list)
    blocks: dict[int, Block] = field(default_factory=dict)  # address -> free mapped block
    unmapped_keys: list[tuple[int, int]] = field(default_factory=list)
    unmapped: dict[int, Block] = field(default_factory=dict)
    gc_calls: int = 0  # get_free_blocks_call_count

    def insert(self, b: Block) -> None:
        """``insert_into_blocks``: cached, its age counted from now."""
        b.gc_base = self.gc_calls
        bisect.insort(self.keys, b.key)
        self.blocks[b.ptr] = b

    def remove(self, b: Block) -> None:
        del self.keys[bisect.bisect_left(self.keys, b.key)]
        del self.blocks[b.ptr]

    def insert_unmapped(self, b: Block) -> None:
        bisect.insort(self.unmapped_keys, (b.stream, b.ptr))
        self.unmapped[b.ptr] = b

    def remove_unmapped(self, b: Block) -> None:
        del self.unmapped_keys[bisect.bisect_left(self.unmapped_keys, (b.stream, b.ptr))]
        del self.unmapped[b.ptr]

    def lower_bound(self, stream: int, size: int) -> int:
        """The index of the first free block of `stream` of at least `size` bytes (len(keys) when none)."""
        i = bisect.bisect_left(self.keys, (stream, size, -1))
        return i if i < len(self.keys) and self.keys[i][0] == stream else len(self.keys)


class Stats(NamedTuple):
    """The allocator's counters now (``DeviceStats``, aggregate)."""

    allocated: int
    reserved: int
    requested: int
    segments: int


class CachingAllocator:
    """``DeviceCachingAllocator`` of one device: `malloc` and `free` as the step makes them, `empty_cache`."""

    def __init__(self, conf: AllocatorConfig | None = None) -> None:
        self.conf = conf or AllocatorConfig()
        self.small, self.large = Pool(small=True), Pool(small=False)
        self.allocated = 0  # allocated_bytes: the blocks handed out (rounded sizes)
        self.requested = 0  # requested_bytes: what was asked
        self.reserved = 0  # reserved_bytes (total_allocated_memory): segments and mapped pages
        self.segments = 0
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self._next_ptr = 1 << 40  # addresses: a counter

    # -- the public calls ------------------------------------------------------------------------------------
    def malloc(self, orig_size: int, stream: int = 0) -> Block | None:
        """``malloc``: the block the request gets, or None for an out-of-memory error (after the retries)."""
        size = round_size(orig_size, self.conf)
        pool = self.small if size <= SMALL_SIZE else self.large
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.conf.gc_enabled:
                self._garbage_collect()
            block = self._alloc_block(pool, size, stream)
            if block is None and self._release_available_cached_blocks(pool, size, stream):
                block = self._alloc_block(pool, size, stream)
            if block is None:
                self.release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(pool, size, stream)
        if block is None:
            self.num_ooms += 1
            return None
        return self._alloc_found_block(block, size, orig_size, self._should_split(block, size))

    def free(self, block: Block) -> None:
        """``free`` then ``free_block``: the block is cached, merged with its free neighbours."""
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        pool = block.pool
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: `release_cached_blocks`."""
        self.release_cached_blocks()

    def stats(self) -> Stats:
        return Stats(self.allocated, self.reserved, self.requested, self.segments)

    def largest_free_block(self) -> int:
        """``cacheInfo``: the largest cached block."""
        return max((k[1] for p in (self.small, self.large) for k in p.keys), default=0)

    # -- finding a block ---------------------------------------------------------------------------------------
    def _get_free_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """``get_free_block``: best fit on the stream, oversize blocks only within limits."""
        conf = self.conf
        if conf.gc_enabled:
            pool.gc_calls += 1
        i = pool.lower_bound(stream, size)
        if i == len(pool.keys):
            return None
        b = pool.blocks[pool.keys[i][2]]
        if b.segment.expandable:  # best fit by what the block can grow to
            j = i + 1
            while b.segment.expandable and j < len(pool.keys) and pool.keys[j][0] == stream:
                nb = pool.blocks[pool.keys[j][2]]
                if _expandable_size(nb) >= _expandable_size(b):
                    break
                b, j = nb, j + 1
        split_limit = conf.max_split_size
        if size < split_limit <= b.size:
            return None
        if size >= split_limit and b.size >= size + conf.max_non_split_rounding:
            return None
        pool.remove(b)
        return b

    def _should_split(self, block: Block, size: int) -> bool:
        """``should_split``."""
        remaining = block.size - size
        if block.pool.small or self.conf.expandable_segments:
            return remaining >= MIN_BLOCK
        return size < self.conf.max_split_size and remaining > SMALL_SIZE

    def _alloc_found_block(self, block: Block, size: int, orig_size: int, split: bool) -> Block:
        """``alloc_found_block``: the request takes the front of the block; the rest, if split, stays cached."""
        if split:
            rest = block
            block = Block(rest.ptr, size, rest.stream, rest.pool, rest.segment, prev=rest.prev, next=rest)
            if block.prev is not None:
                block.prev.next = block
            rest.prev = block
            rest.ptr += size
            rest.size -= size
            rest.pool.insert(rest)
        block.allocated = True
        block.requested = orig_size
        self.allocated += block.size
        self.requested += orig_size
        return block

    # -- new memory ----------------------------------------------------------------------------------------------
    def _limit(self) -> int | None:
        conf = self.conf
        limits = [x for x in (conf.capacity_bytes, conf.allowed_bytes) if x is not None]
        return min(limits) if limits else None

    def _alloc_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """``alloc_block``: a new segment of ``allocation_size`` (or mapped pages of an expandable one)."""
        if self.conf.expandable_segments:
            return self._try_allocate_expandable(pool, size, stream)
        alloc = allocation_size(size)
        limit = self._limit()
        if limit is not None and self.reserved + alloc > limit:
            return None
        seg = Segment(self._take_address(alloc), alloc)
        self.reserved += alloc
        self.segments += 1
        self.num_device_alloc += 1
        return Block(seg.ptr, alloc, stream, pool, seg)

    def _take_address(self, size: int) -> int:
        ptr = self._next_ptr
        self._next_ptr += -(-size // ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE
        return ptr

    def _try_allocate_expandable(self, pool: Pool, size: int, stream: int) -> Block | None:
        """``try_allocate_expandable_block``: map pages at the lowest address with room, merging with the free
        block before them."""
        c = self._find_expandable_block(pool, size, stream)
        if not c.mapped and not self._map_block(c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None
            if not self._map_block(nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt
        pool.remove(c)
        return c

    def _find_expandable_block(self, pool: Pool, size: int, stream: int) -> Block:
        """``find_expandable_block``: the lowest unmapped range of the stream (with the free block before it) that
        has room, else a new expandable segment's address range."""
        i = bisect.bisect_left(pool.unmapped_keys, (stream, -1))
        b: Block | None
        while i < len(pool.unmapped_keys) and pool.unmapped_keys[i][0] == stream:
            c = pool.unmapped[pool.unmapped_keys[i][1]]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            room, b = 0, c
            while room < size and b is not None and not b.allocated:
                room += b.size
                b = b.next
            if room >= size:
                return c
            i += 1
        page = SMALL_BUFFER if pool.small else LARGE_BUFFER
        span = self.conf.device_bytes + self.conf.device_bytes // 8
        span = -(-span // page) * page
        seg = Segment(self._take_address(span), span, expandable=True, page=page)
        c = Block(seg.ptr, span, stream, pool, seg, mapped=False)
        pool.insert_unmapped(c)
        return c

    def _map_block(self, to_map: Block, size: int) -> bool:
        """``map_block``: physical pages for the front `size` bytes of an unmapped range (whole pages)."""
        seg = to_map.segment
        page = seg.page
        begin = (to_map.ptr - seg.ptr) // page
        end = -(-(to_map.ptr + size - seg.ptr) // page)
        mapped = (end - begin) * page
        limit = self._limit()
        if mapped == 0 or (limit is not None and self.reserved + mapped > limit):
            return False
        pool = to_map.pool
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.ptr + mapped, to_map.size - mapped, to_map.stream, pool, seg, mapped=False)
            rest.prev, rest.next = to_map, to_map.next
            if to_map.next is not None:
                to_map.next.prev = rest
            to_map.next = rest
            pool.insert_unmapped(rest)
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        self.reserved += mapped
        self.num_device_alloc += 1
        return True

    @staticmethod
    def _try_merge(dst: Block, src: Block | None, pool: Pool) -> int:
        """``try_merge_blocks``: a free neighbour of the same mapping joins `dst` (which is not in the pool)."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- giving memory back -----------------------------------------------------------------------------------------
    def release_cached_blocks(self) -> None:
        """``release_cached_blocks``: every unsplit cached segment freed, the free pages of expandable segments
        unmapped."""
        for pool in (self.large, self.small):
            blocks = [pool.blocks[k[2]] for k in pool.keys]
            for b in blocks:
                if not b.segment.expandable and not b.is_split:
                    self._release_block(b)
            for b in blocks:
                if b.segment.expandable:
                    self._unmap_block(b)

    def _release_block(self, b: Block) -> None:
        """``release_block``: ``cudaFree`` of an unsplit cached segment."""
        b.pool.remove(b)
        self.reserved -= b.size
        self.segments -= 1
        self.num_device_free += 1

    def _unmap_block(self, b: Block) -> None:
        """``unmap_block``: the whole pages inside a free block of an expandable segment are unmapped."""
        seg, page = b.segment, b.segment.page
        begin = -(-(b.ptr - seg.ptr) // page)
        end = (b.ptr + b.size - seg.ptr) // page
        if begin >= end:
            return
        pool = b.pool
        pool.remove(b)
        start, length = seg.ptr + begin * page, (end - begin) * page
        if start > b.ptr:
            before = Block(b.ptr, start - b.ptr, b.stream, pool, seg, prev=b.prev, next=b)
            if b.prev is not None:
                b.prev.next = before
            b.prev = before
            pool.insert(before)
        after_size = b.ptr + b.size - (start + length)
        if after_size > 0:
            after = Block(start + length, after_size, b.stream, pool, seg, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = after
            b.next = after
            pool.insert(after)
        b.ptr, b.size, b.mapped = start, length, False
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert_unmapped(b)
        self.reserved -= length
        self.num_device_free += 1

    def _release_available_cached_blocks(self, pool: Pool, size: int, stream: int) -> bool:
        """``release_available_cached_blocks``: with ``max_split_size`` set, free one oversize cached block that
        holds the request, else oversize blocks from the largest down until as many bytes are freed."""
        limit = self.conf.max_split_size
        if limit == UNLIMITED:
            return False
        key = max(size, limit)
        i = pool.lower_bound(stream, key)
        if i < len(pool.keys):
            b = pool.blocks[pool.keys[i][2]]
            if not b.segment.expandable and not b.is_split:
                self._release_block(b)
                return True
        i = bisect.bisect_left(pool.keys, (stream, key, -1)) - 1
        released = 0
        while released < key and i >= 0 and pool.keys[i][0] == stream and pool.keys[i][1] >= limit:
            b = pool.blocks[pool.keys[i][2]]
            i -= 1
            if b.segment.expandable or b.is_split:
                continue
            released += b.size
            self._release_block(b)
        return released >= key

    def _garbage_collect(self) -> None:
        """``garbage_collect_cached_blocks``: above threshold x the allowed memory, free the unsplit cached large
        blocks at least as old (in ``get_free_block`` calls) as their average, until enough is freed."""
        allowed = self.conf.allowed_bytes
        assert allowed is not None
        threshold = int(self.conf.garbage_collection_threshold * allowed)
        if self.reserved <= threshold:
            return
        target, reclaimed = self.reserved - threshold, 0
        pool = self.large

        def freeable() -> list[Block]:
            return [b for k in pool.keys if not (b := pool.blocks[k[2]]).is_split and not b.segment.expandable]

        blocks = freeable()
        total_age = sum(pool.gc_calls - b.gc_base for b in blocks)
        count = len(blocks)
        freed = True
        while reclaimed < target and freed and count > 0:
            age_threshold = total_age / count
            freed = False
            for b in freeable():
                age = pool.gc_calls - b.gc_base
                if age >= age_threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self._release_block(b)


def _expandable_size(b: Block) -> int:
    """What a free block of an expandable segment can grow to: itself and the unmapped range after it."""
    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)


class Failure(NamedTuple):
    """A request the allocator could not place (an out-of-memory error): the event's index, its id, the bytes
    asked and rounded, and the allocator's allocated and reserved bytes then."""

    event_index: int
    alloc_id: int
    requested_bytes: int
    rounded_bytes: int
    allocated_bytes: int
    reserved_bytes: int


@dataclass(frozen=True)
class Replay:
    """What `replay` found: allocated and reserved after each event, their peaks and where, the fragmentation at
    the reserved peak ((reserved - allocated) / reserved), the requests that failed."""

    allocated: tuple[int, ...]
    reserved: tuple[int, ...]
    peak_allocated: int
    peak_reserved: int
    peak_allocated_at: int
    peak_reserved_at: int
    fragmentation: float
    largest_free_at_peak: int
    failures: tuple[Failure, ...]
    num_alloc_retries: int
    num_device_alloc: int
    num_device_free: int

    @property
    def largest_failed(self) -> int:
        """The largest request it could not place (0: none failed)."""
        return max((f.requested_bytes for f in self.failures), default=0)


def replay(events: Iterable[Event], conf: AllocatorConfig | None = None) -> Replay:
    """Place every event of `events` in order; a failed allocation is recorded and its free ignored."""
    a = CachingAllocator(conf)
    live: dict[int, Block] = {}
    allocated: list[int] = []
    reserved: list[int] = []
    failures: list[Failure] = []
    peak_a = peak_r = at_a = at_r = 0
    frag, largest_free = 0.0, 0
    for i, (kind, alloc_id, size, stream) in enumerate(events):
        if kind == ALLOC:
            block = a.malloc(size, stream)
            if block is None:
                failures.append(Failure(i, alloc_id, size, round_size(size, a.conf), a.allocated, a.reserved))
            else:
                live[alloc_id] = block
        elif kind == FREE:
            block = live.pop(alloc_id, None)
            if block is not None:
                a.free(block)
        elif kind == EMPTY_CACHE:
            a.empty_cache()
        allocated.append(a.allocated)
        reserved.append(a.reserved)
        if a.allocated > peak_a:
            peak_a, at_a = a.allocated, i
        if a.reserved > peak_r:
            peak_r, at_r = a.reserved, i
            frag = (a.reserved - a.allocated) / a.reserved
            largest_free = a.largest_free_block()
    return Replay(
        allocated=tuple(allocated),
        reserved=tuple(reserved),
        peak_allocated=peak_a,
        peak_reserved=peak_r,
        peak_allocated_at=at_a,
        peak_reserved_at=at_r,
        fragmentation=frag,
        largest_free_at_peak=largest_free,
        failures=tuple(failures),
        num_alloc_retries=a.num_alloc_retries,
        num_device_alloc=a.num_device_alloc,
        num_device_free=a.num_device_free,
    )
