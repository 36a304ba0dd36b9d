"""ZeRO-3 / FSDP: the parameters gathered for compute, and FSDP2's own buffers.

ZeRO-3 and FSDP gather each module's parameters before use and free them after: the module in use and the next one
prefetched are unsharded, in the compute dtype (FSDP MixedPrecision ``param_dtype``, DeepSpeed's 16-bit
partitions) or as stored (a QLoRA base's 4-bit blocks). FSDP2 (``fully_shard``) adds its root unit, which is not
resharded after forward, its all-gather staging buffers in the copy-in stream's pool, and, under ``bf16-fsdp``
(``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``), the fp32 reduce-scatter copies of the gradients.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.states.weights import StageShapes, Weights
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.architecture.arch import Arch

GATHERED = headline(
    "gathered_parameters",
    "2 x largest module (current + prefetched) + its gradients",
    source="ZeRO-3 / FSDP all-gather modules before use (DeepSpeed estimate_zero3_model_states_mem_needs: 4 x "
    "largest layer; FSDP BACKWARD_PRE prefetch)",
)


class Gathered(NamedTuple):
    """What ZeRO-3 / FSDP hold unsharded, and FSDP2's pools, on one rank (bytes)."""

    gathered: int  # the unsharded modules in use
    gather_pool: int  # FSDP2: all-gather buffers in the copy-in stream's pool
    head_held: int  # FSDP2's root unit: the lm_head's unsharded gradient, held until the end of backward
    root_reduce: int  # FSDP2's root unit at the end of backward: unsharded gradients + reduce-scatter input
    reduce_extra: int  # bf16-fsdp: a block's bf16 gradients beside their fp32 reduce-scatter copy
    term: Term


def gathered(sc: StateCtx, stage: Stage, sh: StageShapes, w: Weights) -> Gathered:
    """The module in use (the largest: a block or the vocabulary) + the next block prefetched, as stored for
    compute: 16 bit under FSDP MixedPrecision / DeepSpeed, the quantized bytes of a QLoRA base. Nothing without
    ZeRO-3 over more than one rank."""
    arch, reg, dp = sc.arch, sc.reg, sc.dp
    bf16_fsdp = reg.name == "bf16-fsdp"
    # FSDP2 foreach_reduce (_fsdp_collectives.py): a block's unsharded bf16 gradients are copied into an fp32
    # reduce-scatter input; the fp32 output, whose views are the sharded .grad, lives in the reduce-scatter
    # stream's pool (reserved beside the default stream's peak: `States.grad_shards_pool`)
    reduce_extra = 2 * (w.layer_train if sc.full else 0) if (bf16_fsdp and sc.zero == 3 and dp > 1) else 0
    if sc.zero != 3 or dp == 1:
        return Gathered(0, 0, 0, 0, reduce_extra, GATHERED)
    elem = 4 if reg.compute == "fp32" else 2
    if sc.full:
        layer_b, vocab_b = (sh.lin_w + sh.lin_b + sh.norms) * elem, sh.vocab * elem
    else:
        layer_b, vocab_b = w.layer_store, sh.vocab * w.frozen_bytes
    unit = max(layer_b, vocab_b if (stage.first or stage.last) else 0)
    total = unit + layer_b
    root = (vocab_b if stage.first else 0) + (vocab_b if stage.last and not arch.tied else 0)
    head_held = root_reduce = pool = 0
    if bf16_fsdp:
        # FSDP2 fully_shard(model): the root group (embedding, final norm, output) is not resharded after
        # forward (_fsdp_state.py _lazy_init: post_forward_mesh_info = None for the root), so its bf16
        # weights stay gathered from the embedding's forward to the end of backward, beside a block and the
        # next one prefetched
        total = 2 * layer_b + root
        if sc.full:
            head_held = sh.vocab * elem if stage.last else 0
            root_reduce = fsdp2_root_reduce(root // elem + norms_root(arch, stage), elem, 4)
    if sc.fsdp2 or bf16_fsdp:
        # a LoRA/QLoRA base is all-gathered the same way, as it is stored; MixedPrecisionPolicy(param_dtype):
        # a cast copy of the shards
        norm_b = norms_root(arch, stage) * (elem if sc.full else w.frozen_bytes)
        pool = fsdp2_all_gather_pool(layer_b, root + norm_b, dp, cast=bf16_fsdp)
    return Gathered(total, pool, head_held, root_reduce, reduce_extra, GATHERED)


def fsdp2_root_reduce(root_elems: int, grad_bytes: int, reduce_bytes: int) -> int:
    """Bytes of the FSDP2 root unit's gradient reduction at the end of backward: its unsharded gradients (the
    unsharded parameters' dtype) and the reduce-scatter input they are copied into (``reduce_dtype``).

    The root's forward input (token ids) needs no gradient, so _fsdp_state.py ``_register_post_backward_hook``
    registers nothing for it and its ``post_backward`` runs in ``_root_post_backward_final_callback``, after the
    whole backward: the lm_head's gradient is held from the loss's backward on, the embedding's joins it.
    _fsdp_collectives.py ``foreach_reduce``: ``reduce_scatter_input`` (the unit's elements in ``reduce_dtype``) is
    filled by ``foreach_reduce_scatter_copy_in`` before ``unsharded_grads.clear()`` frees the gradients."""
    return root_elems * (grad_bytes + reduce_bytes)


def norms_root(arch: Arch, stage: Stage) -> int:
    """Elements the FSDP2 root unit holds beside the embedding and the lm_head: the final norm (last stage) and
    what the embedding carries with it (BLOOM's norm, GPT-2's positions; first stage)."""
    return (arch.norm_params if stage.last else 0) + (arch.embed_extra_params if stage.first else 0)


def fsdp2_all_gather_pool(block_bytes: int, root_bytes: int, dp: int, *, cast: bool = True) -> int:
    """Bytes FSDP2's all-gathers keep reserved in the all-gather copy-in stream's pool, next to the default
    stream's: the root unit's and the first block's all-gather outputs, and the root's cast shard.

    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_all_gather``: under
    ``torch.cuda.stream(all_gather_copy_in_stream)`` it casts the unit's shards to ``param_dtype`` into one flat
    buffer (``_get_param_all_gather_inputs``: ``torch.empty(sum(numels), dtype=param_dtype)``, the unit / dp;
    ``cast``: only with a ``MixedPrecisionPolicy.param_dtype``, else the shards are copied in as they are) and
    allocates the flat all-gather output (``all_gather_output``, the whole unit); ``foreach_all_gather_copy_out``
    copies it into the unsharded parameters in the default stream. _fsdp_param_group.py ``wait_for_unshard``: in
    forward the output is kept (``comm_ctx.all_gather_state``) until the next unit's copy-out, so the root's
    (embedding, final norm, lm_head, the first unit of forward) and the first block's are allocated together;
    ``FSDPCommContext.get_all_gather_streams`` uses the copy-in stream for forward and for backward prefetch.
    c10/cuda/CUDACachingAllocator.cpp: a block is cached per stream ("Once freed, blocks can be re-allocated on
    the same stream, but not on any other stream"), so these segments stay reserved and unusable by the
    default stream's tensors for the rest of training; later units' buffers are carved out of them.
    ``block_bytes`` / ``root_bytes``: a block's and the root's unsharded bytes in the all-gather dtype; when the
    blocks are the larger units, two consecutive blocks bound it."""
    largest = max(root_bytes, block_bytes)
    return largest + block_bytes + (largest // dp if cast else 0)
