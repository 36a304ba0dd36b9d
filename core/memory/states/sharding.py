"""ZeRO's partitions (Rajbhandari et al. 2020, §5): stage 1 partitions the optimizer states (and the fp32 master
weights) over the data-parallel group, stage 2 also the gradients, stage 3 also the parameters. FSDP maps onto it:
``FULL_SHARD`` = ZeRO-3, ``SHARD_GRAD_OP`` = ZeRO-2, ``NO_SHARD`` = 0 (DDP). Under expert parallelism the experts'
states are sharded over the expert-data-parallel group of dp / ep ranks, the rest over dp."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.optimizer import OptimizerStates
from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.weights import StageShapes, Weights
from vramplan.core.memory.terms import Term, headline


class Partitions(NamedTuple):
    """One rank's ZeRO partitions, in bytes (``part_elems``: elements of its optimizer partition)."""

    optimizer: int
    paged: int
    grads: int
    params: int
    part_elems: int
    grads_whole: int  # the gradients before ZeRO-2/3 sharding (what FSDP's no_sync holds)
    terms: tuple[Term, Term, Term]  # parameters, gradients, optimizer states: their formulas with the shard


def partitions(sc: StateCtx, sh: StageShapes, w: Weights, opt: OptimizerStates) -> Partitions:
    dp, z, ep = sc.dp, sc.zero, sc.ep
    held = sh.experts / max(w.params_local, 1)  # the experts' share of what the rank holds
    trained = held if sc.full else 0.0  # and of what it trains
    grads = w.trainable * w.grad_elem
    shard = {n: dp if z >= n else 1 for n in (1, 2, 3)}
    params_term, opt_term = w.term, opt.term
    grads_term = headline(
        "gradients", "{:,} trainable x {} B", w.trainable, w.grad_elem,
        source="one gradient per trainable parameter, in its dtype; freed by zero_grad(set_to_none=True)",
    )  # fmt: skip
    if dp > 1:
        params_term = params_term.then(" / {} ({})", dp, "ZeRO-3") if z == 3 else params_term
        grads_term = grads_term.then(" / {} ({})", dp, "ZeRO-2/3") if z >= 2 else grads_term
        opt_term = opt_term.then(" / {} ({})", dp, "ZeRO-1+") if z >= 1 else opt_term
    return Partitions(
        optimizer=sharded(opt.total, shard[1], trained, ep),
        paged=sharded(opt.paged, shard[1], trained, ep),
        grads=sharded(grads, shard[2], trained, ep),
        params=sharded(w.bytes, shard[3], held, ep),
        part_elems=sharded(w.trainable, shard[1], trained, ep),
        grads_whole=unsharded_grads(grads, trained, ep),
        terms=(params_term, grads_term, opt_term),
    )


def sharded(total: int, shard: int, expert_share: float, ep: int) -> int:
    """One rank's ZeRO partition of `total` bytes: the experts' share over dp / ep ranks, the rest over dp."""
    if shard == 1 or not expert_share:
        return total // shard
    experts = int(total * expert_share)
    return (total - experts) // shard + experts // max(shard // ep, 1)


def unsharded_grads(total: int, expert_share: float, ep: int) -> int:
    """One rank's gradient bytes before ZeRO-2/3 sharding: all of them, the experts' share over the ``ep`` ranks
    that split the experts. FSDP's no_sync holds this many from the first micro-batch to the last (torch/
    distributed/fsdp/fully_sharded_data_parallel.py FullyShardedDataParallel.no_sync: "FSDP will accumulate the
    full model gradients (instead of gradient shards) until the eventual sync"; FSDP2 _fsdp_param_group.py
    post_backward: without reduce_grads each FSDPParam keeps its unsharded gradient)."""
    experts = int(total * expert_share)
    return total - experts + experts // max(ep, 1)
