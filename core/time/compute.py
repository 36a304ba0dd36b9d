"""One micro-batch on one GPU: the kernels of its blocks (`core.time.block_time`), of the embedding, lm_head and loss
(`core.time.head_time`), of what activation checkpointing re-runs, and the host's time to issue them
(`core.time.launch`). The micro-batch takes max(GPU time, host time).

Recomputation (Korthikanti et al. 2022 §5): full checkpointing re-runs each checkpointed block's forward in its
backward; selective re-runs the attention core (with FlashAttention none: its backward already recomputes the
scores, which its own backward time counts); per-op checkpointing (torchtitan) re-runs the matmuls its policy does
not save, every second one; ``checkpoint_every`` = k re-runs blocks k, 2k, ... only. The embedding and the lm_head
sit outside the checkpointed blocks and are not re-run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.architecture.arch import lora_roles
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.precision import REGIMES, quantized_bytes
from vramplan.core.time.block_time import BlockSetup, BlockTime, block_time
from vramplan.core.time.chip import Chip
from vramplan.core.time.head_time import HeadSetup, HeadTime, head_time
from vramplan.core.time.kernels import NONE, Work
from vramplan.core.time.launch import Host, host_costs

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


class MicroBatch(NamedTuple):
    """One micro-batch on one pipeline stage of one GPU, by mechanism (each (forward, backward) Work of the whole
    stage: its blocks and, on the first and last stages, the embedding, the lm_head and the loss)."""

    linears: Work
    attention: Work
    elementwise: Work  # norms, rotary, activations, adds, copies, the embedding, casts
    dequantization: Work  # a quantized base's weights dequantized for each matmul
    adapters: Work
    loss: Work
    recompute: Work
    forward_kernels: int  # the forward's (and recomputation's) kernels, issued by the module code
    backward_kernels: int  # issued by the autograd engine
    host: Host
    layers: int
    gpu: float  # the GPU's time: every kernel above, back to back
    host_seconds: float  # the host's time to issue them: forward_kernels x host.forward + backward x backward

    @property
    def seconds(self) -> float:
        """The micro-batch takes the longer of the two (kernels run asynchronously)."""
        return max(self.gpu, self.host_seconds)


def block_setup(plan: Plan) -> BlockSetup:
    t, s = plan.training, plan.strategy
    arch = plan.model.arch()
    reg = REGIMES[t.regime]
    full = t.method == "full"
    roles = () if full else lora_roles(arch, t.lora_targets)
    quant = t.base_quantization
    quantized: tuple[tuple[str, int], ...] = ()
    if quant != "none":
        adapted = t.quantized_modules == "adapted"
        quantized = tuple(
            (lin.role, quantized_bytes(lin.d_in, lin.d_out, quant, t.double_quantization) // s.tensor_parallel)
            for lin in arch.linears
            if not adapted or lin.role in roles
        )
    return BlockSetup(
        arch=arch,
        b=t.micro_batch_size,
        s=t.seq_len,
        tp=s.tensor_parallel,
        sp=s.sequence_parallel,
        elem=reg.act_bytes,
        resid=reg.resid_bytes,
        full=full,
        lora=roles,
        rank=t.lora_rank,
        quantized=quantized,
        flash=s.attention == "flash",
        compiled=s.compile,
        autocast_cast=reg.compute == "autocast" and quant == "none",
        cast_shard=plan.data_parallel if s.zero_stage >= 2 else 1,
        float8=s.float8 and full,
        matmul_efficiency=t.mfu,
        experts=s.experts,
        ep=s.expert_parallel,
        dropout=t.lora_dropout > 0 and not full,
    )


def _recomputed(bt: BlockTime, checkpointing: str, flash: bool) -> Work:
    """What one checkpointed block re-runs in its backward (module docstring)."""
    if checkpointing == "full":
        return bt.forward()
    if checkpointing == "op":
        return bt.linears[0].times(0.5) + bt.adapters[0].times(0.5)
    if checkpointing == "selective" and not flash:
        return bt.attention[0]
    return NONE


def micro_batch(plan: Plan, chip: Chip, *, first: bool = True, last: bool = True) -> MicroBatch:
    """One micro-batch of the stage holding ``layers`` blocks (pipeline stages split the blocks evenly)."""
    t, s = plan.training, plan.strategy
    x = block_setup(plan)
    reg = REGIMES[t.regime]
    hs = HeadSetup(
        arch=x.arch,
        T=x.T,
        tp=x.tp,
        elem=x.elem,
        resid=x.resid,
        full=x.full,
        fused_loss=s.fused_cross_entropy and s.loss_chunks == 1,
        first=first,
        last=last,
        matmul_efficiency=t.mfu,
        grad_bytes=reg.grad_bytes,
    )
    ck = s.gradient_checkpointing
    return _micro_batch(x, hs, chip, ck, s.checkpoint_every, s.pipeline_parallel)


@memoised(256)  # keyed on frozen inputs: a keystroke recomputes what it changed
def _micro_batch(x: BlockSetup, hs: HeadSetup, chip: Chip, ck: str, every: int, pp: int) -> MicroBatch:
    layers = -(-x.arch.L // pp)
    bt = block_time(x, chip)
    ht = head_time(hs, chip)
    redone = layers if ck == "selective" else (layers // every if ck != "none" else 0)
    rec = _recomputed(bt, ck, x.flash).times(redone)

    def both(pair: tuple[Work, Work]) -> Work:
        return pair[0] + pair[1]

    blocks_fwd, blocks_bwd = bt.forward().times(layers), bt.backward().times(layers)
    head: HeadTime = ht
    fwd_kernels = blocks_fwd.kernels + rec.kernels + sum(p[0].kernels for p in head)
    bwd_kernels = blocks_bwd.kernels + sum(p[1].kernels for p in head)
    works = {
        "linears": both(bt.linears).times(layers) + both(head.lm_head),
        "attention": both(bt.attention).times(layers),
        "elementwise": (both(bt.elementwise) + both(bt.casts)).times(layers) + both(head.embedding),
        "dequantization": both(bt.dequantization).times(layers),
        "adapters": both(bt.adapters).times(layers),
        "loss": both(head.loss),
        "recompute": rec,
    }
    host = host_costs(x.compiled)
    return MicroBatch(
        **works,
        forward_kernels=fwd_kernels,
        backward_kernels=bwd_kernels,
        host=host,
        layers=layers,
        gpu=sum(w.seconds for w in works.values()),
        host_seconds=fwd_kernels * host.forward + bwd_kernels * host.backward,
    )
