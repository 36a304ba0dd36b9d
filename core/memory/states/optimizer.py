"""The optimizer's states (and master weights) of one rank's stage before ZeRO, and the optimizer step's
temporaries: dense states per element (AdamW 2, SGD with momentum 1, Lion 1), Adafactor's factored statistics,
bitsandbytes' 8-bit and paged states tensor by tensor, and the step's own transient (torch's foreach and for-loop
implementations, DeepSpeed's flattened fp32 gradient partition)."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.states.weights import Weights
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.schema.precision import (
    INT8_BLOCK,
    MIN_8BIT_ELEMENTS,
    OPTIMIZERS,
    PAGED_MIN_ELEMENTS,
    OptimizerSpec,
    resolve_impl,
)


class OptimizerStates(NamedTuple):
    """A stage's optimizer states before ZeRO."""

    total: int  # master weights + states held by PyTorch's allocator
    paged: int  # states in CUDA unified memory (bitsandbytes paged)
    states: int  # the states alone in PyTorch's allocator (no master weights, no paged states)
    term: Term  # the optimizer states' headline term


def optimizer_states(sc: StateCtx, stage: Stage, w: Weights) -> OptimizerStates:
    """The master copy (``reg.master_bytes`` per trained element) and the states, dense, factored or bitsandbytes'."""
    spec = OPTIMIZERS[sc.optimizer]
    paged = 0
    if spec.factored:
        states = factored_elements(sc, stage) * w.state_elem
    elif spec.int8_states or spec.paged:
        tensors = trainable_tensors(sc.arch, stage, sc.tp, sc.method, sc.lora_roles, sc.lora_rank)
        states, paged = _bnb_states(spec, tensors, w.state_elem)
    else:
        states = spec.dense_states * w.trainable * w.state_elem
    return OptimizerStates(w.trainable * w.master + states, paged, states, _headline(sc, w, spec))


def _headline(sc: StateCtx, w: Weights, spec: OptimizerSpec) -> Term:
    if spec.factored:
        per = "row + column statistics per matrix"
    elif spec.int8_states:
        per = "2 x (1 B + 4 B / 256) (8-bit states, blockwise absmax)"
    else:
        per = f"{spec.dense_states} x {sc.reg.state_bytes if sc.full else 4} B"
    master = f"{sc.reg.master_bytes} B fp32 master + " if sc.reg.master_bytes else ""
    return headline("optimizer_states", "{:,} x ({}{})", w.trainable, master, per, source=f"{spec.name}: {spec.source}")


def step_temporaries(sc: StateCtx, w: Weights, part_elems: int) -> int:
    """The optimizer step's transient on the GPU for ``part_elems`` elements of this rank's partition.

    torch/optim/adam.py ``_multi_tensor_adam`` (AdamW subclasses Adam): ``_foreach_sqrt(exp_avg_sq)`` and its
    companions are model-sized temporaries (`OptimizerSpec.foreach_temps`); the for-loop implementation makes them
    one tensor at a time (the largest, or the partition under ZeRO); fused kernels make none. DeepSpeed flattens the
    partition's 16-bit gradients into fp32 for the step (master regimes)."""
    spec = OPTIMIZERS[sc.optimizer]
    impl = resolve_impl(sc.optimizer_impl, sc.reg)
    if impl == "foreach":
        temp = spec.foreach_temps * part_elems * w.state_elem
    elif impl == "for-loop":
        temp = spec.loop_temps * (part_elems if sc.zero >= 1 else w.largest) * w.state_elem
    else:
        temp = 0
    return temp + (4 * part_elems if w.master else 0)


def trainable_tensors(
    arch: Arch, stage: Stage, tp: int, method: str, lora_roles: tuple[str, ...], rank: int
) -> list[tuple[int, int]]:
    """The trainable tensors of one rank's stage as (elements, how many): bitsandbytes decides per tensor whether
    its states are paged and whether they are 8-bit."""
    n, h, vocab = stage.layers, arch.h, arch.V * arch.h // tp
    if method != "full":
        out = []
        for lin in arch.linears:
            if lin.role in lora_roles:
                out += [(rank * lin.d_in // tp, n), (rank * lin.d_out // tp, n)]
        return out
    out = [(lin.weight_params // tp, n) for lin in arch.linears]
    out += [(lin.d_out // tp, n) for lin in arch.linears if lin.bias]
    out.append((h, n * (arch.layer_norm_params // h)))
    if stage.first:
        out.append((vocab, 1))
        if arch.embed_extra_params:
            out.append((arch.embed_extra_params, 1))
    if stage.last:
        out.append((arch.norm_params, 1))
        if not arch.tied or not stage.first:
            out.append((vocab, 1))
    return out


def _bnb_states(spec: OptimizerSpec, tensors: list[tuple[int, int]], state_elem: int) -> tuple[int, int]:
    """bitsandbytes optimizer states as (in PyTorch's allocator, in unified memory), tensor by tensor.

    bitsandbytes optim/optimizer.py: ``Optimizer2State.init_state`` keeps fp32 states for tensors under
    ``min_8bit_size`` (4096) and otherwise uint8 states with one fp32 absmax per 256-value block
    (``blocksize = 256`` since 0.44.0, PR #1365); ``get_state_buffer`` pages the states of tensors of >= 1e5
    elements (``F.get_paged``: cudaMallocManaged) when the optimizer is paged. The absmax is always an ordinary
    allocation."""
    visible = paged = 0
    for numel, count in tensors:
        if spec.int8_states and numel >= MIN_8BIT_ELEMENTS:
            states, absmax = spec.dense_states * numel, spec.dense_states * 4 * -(-numel // INT8_BLOCK)
        else:
            states, absmax = spec.dense_states * numel * (4 if spec.int8_states else state_elem), 0
        if spec.paged and numel >= PAGED_MIN_ELEMENTS:
            paged += count * states
            visible += count * absmax
        else:
            visible += count * (states + absmax)
    return visible, paged


def factored_elements(sc: StateCtx, stage: Stage) -> int:
    """Adafactor's statistics: rows + columns for each matrix, the full vector for 1-D parameters (LoRA: each
    adapter's A and B)."""
    arch, tp, n = sc.arch, sc.tp, stage.layers
    if not sc.full:
        return n * sum(sc.lora_rank * 2 + lin.d_in + lin.d_out for lin in arch.linears if lin.role in sc.lora_roles)
    per_layer = sum(lin.d_in + lin.d_out + (lin.d_out if lin.bias else 0) for lin in arch.linears) // tp
    per_layer += arch.layer_norm_params
    vocab_stats = arch.V // tp + arch.h
    head = (vocab_stats if (not arch.tied or not stage.first) else 0) + arch.norm_params if stage.last else 0
    positions = arch.positions + arch.h if arch.positions else 0
    embed = vocab_stats + positions + (arch.norm_params if arch.fam.embed_norm else 0)
    return n * per_layer + (embed if stage.first else 0) + head
