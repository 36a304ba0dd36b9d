"""PyTorch's CUDA caching allocator applied to the step's tensors: what ``torch.cuda.max_memory_reserved`` holds
beyond the tensors' bytes.

The rules, from c10/cuda/CUDACachingAllocator.cpp (``round_size``, ``get_pool``, ``get_allocation_size``,
``should_split``, ``get_free_block``):

- a request is rounded up to a multiple of 512 B (``kMinBlockSize``; ``roundup_power2_divisions`` of
  PYTORCH_CUDA_ALLOC_CONF, off by default, rounds to a power-of-two division instead);
- requests <= 1 MiB (``kSmallSize``) come from the small pool, carved out of 2 MiB segments (``kSmallBuffer``);
  larger ones from the large pool: under 10 MiB (``kMinLargeAlloc``) a new segment is 20 MiB (``kLargeBuffer``),
  from 10 MiB on the request rounded up to 2 MiB (``kRoundLarge``);
- a request takes the smallest cached free block that holds it (best fit); the rest of the block stays a free block
  when it is >= 512 B (small pool) or > 1 MiB (large pool), else the request keeps all of it; blocks above
  ``max_split_size`` (unlimited by default) are never split;
- a freed block stays reserved (cached) until ``torch.cuda.empty_cache()``; it serves only requests it can hold.
- ``expandable_segments:True``: one segment per stream and pool grows in 2 MiB pages and any freed range is
  reusable, so what stays reserved is the live total rounded up to 2 MiB.

`pack` places a sequence of requests (sizes with counts) into segments by these rules, starting from an empty
cache, and returns the bytes reserved; `moment_requests` turns one moment of the step (bytes by kind) into
requests using the tensor sizes the estimator knows (`StepShapes`).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.activations.block import checkpointed_layer, layer_notes, layer_saved, op_cached
from vramplan.core.memory.activations.context import ActCtx, Layout
from vramplan.core.memory.states.optimizer import trainable_tensors
from vramplan.core.memory.states.stages import Stage
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.units import MiB

MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to a multiple of it
SMALL_SIZE = 1 * MiB  # kSmallSize: the largest request served by the small pool
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: the small pool's segment
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc: requests under it get a kLargeBuffer segment
LARGE_BUFFER = 20 * MiB  # kLargeBuffer
ROUND_LARGE = 2 * MiB  # kRoundLarge: larger requests get a segment rounded up to it (and expandable pages)

Requests = tuple[tuple[int, int], ...]  # (bytes of one tensor, how many), in allocation order


def _ceil(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def round_size(n_bytes: int, power2_divisions: int = 0) -> int:
    """The block size a request of `n_bytes` gets: ``round_size`` rounds up to 512 B; with
    ``roundup_power2_divisions:N`` (a power of two > 1) a request above N x 512 B is rounded up to the next of N
    equal divisions between the two powers of two around it (``roundup_power2_next_division``)."""
    if n_bytes < MIN_BLOCK:
        return MIN_BLOCK
    if power2_divisions > 1 and n_bytes > MIN_BLOCK * power2_divisions:
        floor2 = 1 << (n_bytes.bit_length() - 1)
        return _ceil(n_bytes, floor2 >> (power2_divisions.bit_length() - 1))
    return _ceil(n_bytes, MIN_BLOCK)


def segment_size(block_bytes: int) -> int:
    """The segment ``cudaMalloc``'d when no cached block holds a (rounded) request (``get_allocation_size``)."""
    if block_bytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if block_bytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return _ceil(block_bytes, ROUND_LARGE)


def keeps_remainder(small: bool, remaining: int) -> bool:
    """``should_split``: the rest of a block stays a free block (else the request keeps it)."""
    return remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE


def _best_fit(free: dict[int, int], block: int) -> int | None:
    fits = [b for b in free if b >= block]
    return min(fits) if fits else None


def _take(free: dict[int, int], b: int) -> None:
    free[b] -= 1
    if not free[b]:
        del free[b]


def _put(free: dict[int, int], small: bool, rest: int) -> None:
    if rest and keeps_remainder(small, rest):
        free[rest] = free.get(rest, 0) + 1


@memoised(4096)
def pack(requests: Requests, expandable: bool = False, power2_divisions: int = 0) -> int:
    """Bytes reserved after `requests` are allocated in order, none freed, from an empty cache.

    Identical requests in a row fill a block one after the other (each split off the rest of the last); a new
    segment is made only when no free block holds the request. ``expandable``: each pool is one segment grown
    in 2 MiB pages, so the reserve is the pool's rounded total rounded up to 2 MiB."""
    if expandable:
        small = sum(round_size(s, power2_divisions) * c for s, c in requests if round_size(s) <= SMALL_SIZE)
        large = sum(round_size(s, power2_divisions) * c for s, c in requests if round_size(s) > SMALL_SIZE)
        return _ceil(small, ROUND_LARGE) + _ceil(large, ROUND_LARGE)
    pools: tuple[dict[int, int], dict[int, int]] = ({}, {})  # free block sizes -> how many: small, large
    reserved = 0
    for size, count in requests:
        if size <= 0 or count <= 0:
            continue
        r = round_size(size, power2_divisions)
        small = r <= SMALL_SIZE
        free = pools[0] if small else pools[1]
        left = count
        while left:
            b = _best_fit(free, r)
            if b is None:
                break
            _take(free, b)
            n = min(left, b // r)
            left -= n
            _put(free, small, b - n * r)
        if not left:
            continue
        seg = segment_size(r)
        per = seg // r
        full, last = divmod(left, per)
        reserved += (full + (1 if last else 0)) * seg
        for _ in range(min(full, 1)):  # every full segment leaves the same rest
            rest = seg - per * r
            if rest and keeps_remainder(small, rest):
                free[rest] = free.get(rest, 0) + full
        if last:
            _put(free, small, seg - last * r)
    return reserved


class StepShapes(NamedTuple):
    """The tensor sizes the estimator knows, by kind of memory (elements, or bytes where stated).

    ``params`` / ``trainable``: (elements, how many) of each parameter tensor of the stage per tensor-parallel
    rank (the arch's linears, biases, norms, embedding, lm_head; LoRA's A and B); ``block``: the bytes of each
    tensor one block saves for backward; ``checkpoint``: one checkpointed block's saved input (0 without
    recomputation); ``logits``: one fp32 [tokens, V] tensor."""

    params: tuple[tuple[int, int], ...]
    trainable: tuple[tuple[int, int], ...]
    params_shard: int  # ZeRO-3 / FSDP: each parameter is 1/dp on this rank
    grads_shard: int
    states_shard: int
    block: tuple[int, ...]
    checkpoint: int
    logits: int
    flat: bool = False  # sharded states are flat partitions (DeepSpeed), not one shard per parameter (FSDP)


def _spread(total: int, shapes: tuple[tuple[int, int], ...], elem_bytes: int, shard: int) -> list[tuple[int, int]]:
    """`total` bytes shared out over tensors shaped like `shapes` in proportion to their elements: as many
    copies per shape as `elem_bytes`-byte elements fill it (Adam: m and v; with a master regime, fp32 master),
    each tensor 1/`shard` of its parameter (ZeRO / FSDP shards)."""
    elems = sum(e * c for e, c in shapes)
    if total <= 0 or not elems:
        return [(total, 1)] if total > 0 else []
    copies = max(1, round(total * shard / (elem_bytes * elems)))
    out = [(total * e // (elems * copies), c * copies) for e, c in shapes]
    rest = total - sum(s * c for s, c in out)
    return [*out, (rest, 1)] if rest > MIN_BLOCK else out


def _repeat(total: int, sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    """`total` bytes as whole repeats of a group of tensors of `sizes`, the rest as one tensor."""
    unit = sum(sizes)
    if total <= 0:
        return []
    if unit <= 0:
        return [(total, 1)]
    k = total // unit
    counts: dict[int, int] = {}
    for s in sizes:
        counts[s] = counts.get(s, 0) + k
    out = [(s, c) for s, c in counts.items() if c]
    rest = total - k * unit
    return [*out, (rest, 1)] if rest > 0 else out


SPREAD_KINDS = ("parameters", "gradients", "optimizer_states")


def moment_requests(live: dict[str, int], shapes: StepShapes, weight_bytes: int, grad_bytes: int) -> Requests:
    """One moment's live tensors as allocator requests, kind by kind (weights, gradients, optimizer states,
    activations, the loss's tensors, then each other kind as one tensor): a model of the sizes, not of the
    order in which the step made them."""
    sh = shapes

    def shaped(shapes: tuple[tuple[int, int], ...], shard: int) -> tuple[tuple[int, int], ...]:
        return ((sum(e * c for e, c in shapes), 1),) if (sh.flat and shard > 1) else shapes

    out: list[tuple[int, int]] = []
    out += _spread(live.get("parameters", 0), shaped(sh.params, sh.params_shard), weight_bytes, sh.params_shard)
    out += _spread(live.get("gradients", 0), shaped(sh.trainable, sh.grads_shard), grad_bytes, sh.grads_shard)
    out += _spread(live.get("optimizer_states", 0), shaped(sh.trainable, sh.states_shard), 4, sh.states_shard)
    acts = live.get("activations", 0)
    if sh.checkpoint:
        out += _repeat(acts, (sh.checkpoint,))
    else:
        out += _repeat(acts, sh.block)
    out += _repeat(live.get("logits", 0), (sh.logits,))
    for kind in sorted(live):
        if kind not in SPREAD_KINDS and kind not in ("activations", "logits") and live[kind] > 0:
            out.append((live[kind], 1))
    return tuple(x for x in out if x[0] > 0 and x[1] > 0)


@memoised(1024)
def step_shapes(ctx: ActCtx, stage: Stage, lay: Layout) -> StepShapes:
    """The step's tensor sizes on one rank of `stage` (`StepShapes`). A block's saved tensors are the activation
    model's own items (`layer_notes`; an item such as "fp32 input + rsqrt" counts as one tensor), scaled to one
    tensor-parallel rank; with recomputation a block keeps its checkpoint (per-op selective: its cached op
    outputs, as one tensor)."""
    arch, tp, sp = ctx.arch, lay.tp, lay.sp
    params = tuple(trainable_tensors(arch, stage, tp, "full", (), 0))
    roles = tuple(r for r in arch.roles() if r in ctx.lora)
    trainable = params if ctx.full else tuple(trainable_tensors(arch, stage, tp, "lora", roles, ctx.rank))
    if not ctx.full:
        params = params + trainable
    block_local = layer_saved(ctx, True).local(tp, sp)
    notes = [n for _, n in layer_notes(ctx, True) if n > 0]
    full = sum(notes)
    block = tuple(n * block_local // full for n in notes) if full else ()
    checkpoint = 0
    if ctx.op:
        checkpoint = op_cached(ctx).local(tp, sp)
    elif ctx.gc:
        checkpoint = checkpointed_layer(ctx) // (tp if sp else 1)
    dp, z = lay.dp, lay.zero
    # DeepSpeed's master regimes flatten each rank's partition (stage_1_and_2.py single_partition_of_fp32_groups,
    # stage3.py fp16/fp32_partitioned_groups_flat); FSDP2 shards each parameter (_fsdp_param.py _sharded_param_data)
    return StepShapes(
        params=params,
        trainable=trainable,
        params_shard=dp if z >= 3 else 1,
        grads_shard=dp if z >= 2 else 1,
        states_shard=dp if z >= 1 else 1,
        block=block,
        checkpoint=checkpoint,
        logits=4 * ctx.T * arch.V // tp,
        flat=ctx.reg.master_bytes > 0,
    )
