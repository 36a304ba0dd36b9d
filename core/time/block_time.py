"""The kernels of one decoder block on one GPU for one micro-batch, forward and backward, by mechanism: its linears
(and LoRA adapters, a quantized base's dequantization, autocast's weight casts), its attention core, its memory-bound
ops (norms, rotary embedding, activation, residual adds), and a mixture of experts' routed matmuls.

Each linear is one matmul forward ``[T, d_in] x [d_in, d_out]``; its backward is the input gradient (always: the
block's input needs a gradient) and, when the weight trains, the weight gradient ``[d_in, T] x [T, d_out]`` (Kaplan
et al. 2020 §2.1: backward = 2 x forward). Tensor parallelism (Megatron, Shoeybi et al. 2019 §3) splits the
column-parallel linears' outputs (q, k, v, gate, up) and the row-parallel ones' inputs (o, down) over the TP ranks.

The memory-bound ops are counted by the bytes each kernel reads and writes and by its kernels, as PyTorch runs them
eagerly (transformers' modeling code, op by op: ``LlamaRMSNorm.forward`` upcasts, squares, averages, rescales and
casts back, seven kernels; ``apply_rotary_pos_emb`` multiplies, rotates and adds, six per tensor; SwiGLU's
activation and product, two) or fused by ``torch.compile`` (inductor makes each such chain one kernel that reads
its inputs and writes its output once). An elementwise op's backward reads its saved inputs and the output's gradient
and writes the input's gradient: twice its forward's traffic and kernels.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.time.attention_time import eager, flash
from vramplan.core.time.chip import Chip
from vramplan.core.time.kernels import NONE, Work, matmul, memory

ROW_PARALLEL = ("o", "down")  # Megatron RowParallelLinear: the input is split; the others split their output


class BlockSetup(NamedTuple):
    """What the block's kernels depend on (one micro-batch, one TP rank)."""

    arch: Arch
    b: int
    s: int
    tp: int
    sp: bool  # sequence parallelism: norms, adds and dropout run on 1/tp of the tokens
    elem: int  # bytes of an activation (2: 16-bit compute, 4: fp32)
    resid: int  # bytes of the residual stream (fp32 under autocast)
    full: bool  # the base weights train
    lora: tuple[str, ...]  # adapted roles
    rank: int
    quantized: tuple[tuple[str, int], ...]  # (role, stored bytes per layer on this rank) of a quantized base
    flash: bool
    compiled: bool
    autocast_cast: bool  # fp32 weights cast to 16 bit in every forward (autocast over fp32 weights)
    cast_shard: int  # the weights the cast reads are 1/cast_shard of them (FSDP casts its shard before gathering)
    float8: bool  # torchao Float8 linears (the block's matmuls at the fp8 rate, dynamic scaling casts)
    matmul_efficiency: float | None  # training.mfu, when set: every matmul at that fraction of peak
    experts: str  # grouped | loop | batched
    ep: int
    dropout: bool  # LoRA dropout

    @property
    def T(self) -> int:
        return self.b * self.s


class BlockTime(NamedTuple):
    """One block's kernels, (forward, backward) by mechanism."""

    linears: tuple[Work, Work]
    attention: tuple[Work, Work]
    elementwise: tuple[Work, Work]
    adapters: tuple[Work, Work]  # LoRA
    dequantization: tuple[Work, Work]
    casts: tuple[Work, Work]  # autocast's weight casts, Float8's scaling casts

    def forward(self) -> Work:
        return (
            self.linears[0]
            + self.attention[0]
            + self.elementwise[0]
            + self.adapters[0]
            + self.dequantization[0]
            + (self.casts[0])
        )

    def backward(self) -> Work:
        return (
            self.linears[1]
            + self.attention[1]
            + self.elementwise[1]
            + self.adapters[1]
            + self.dequantization[1]
            + (self.casts[1])
        )


@memoised(256)  # keyed on frozen inputs: a keystroke recomputes what it changed
def block_time(x: BlockSetup, chip: Chip) -> BlockTime:
    """Every kernel of one block, forward and backward."""
    return BlockTime(
        linears=_linears(x, chip),
        attention=_attention(x, chip),
        elementwise=_elementwise(x, chip),
        adapters=_adapters(x, chip),
        dequantization=_dequantization(x, chip),
        casts=_casts(x, chip),
    )


def _local(role: str, d_in: int, d_out: int, tp: int) -> tuple[int, int]:
    return (d_in // tp, d_out) if role in ROW_PARALLEL else (d_in, d_out // tp)


def _linear(x: BlockSetup, chip: Chip, d_in: int, d_out: int, m: int, batch: int = 1) -> tuple[Work, Work]:
    """One linear (``batch`` of them, e.g. experts, each over ``m`` tokens): forward, and backward's input gradient
    plus the weight gradient when the base trains."""
    rate = chip._replace(flops=chip.fp8_flops) if (x.float8 and chip.fp8_flops) else chip
    eff = x.matmul_efficiency
    fwd = matmul(m, d_out, d_in, rate, x.elem, batch=batch, efficiency=eff)
    bwd = matmul(m, d_in, d_out, rate, x.elem, batch=batch, efficiency=eff)
    if x.full:
        bwd = bwd + matmul(d_in, d_out, m, rate, x.elem, batch=batch, efficiency=eff)
    return fwd, bwd


def _linears(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """The block's linears. A mixture of experts' MLP (the linears hold the path of one token: top_k experts and
    the shared ones as one gated MLP) runs its shared part over every token and each routed expert over the tokens
    routed to it: T·k / E per expert on average, E / ep experts on a rank that receives them from its ep peers
    (`_experts`)."""
    arch, T, tp = x.arch, x.T, x.tp
    moe = arch.moe
    fwd = bwd = NONE
    for lin in arch.linears:
        d_in, d_out = _local(lin.role, lin.d_in, lin.d_out, tp)
        if moe is not None and lin.role in ("gate", "up", "down", "gate_up") and moe.moe_layers:
            f, bw = _experts(x, chip, lin.role, d_in, d_out)
        else:
            f, bw = _linear(x, chip, d_in, d_out, T)
        fwd, bwd = fwd + f, bwd + bw
    return fwd, bwd


def _experts(x: BlockSetup, chip: Chip, role: str, d_in: int, d_out: int) -> tuple[Work, Work]:
    """One MLP linear of a mixture-of-experts layer (averaged over the layers with experts and the dense ones):
    the shared experts over every token; the routed ones by ``strategy.experts``: grouped (transformers >= 5's
    ``grouped_mm``: one kernel for all experts), loop (one matmul per expert plus its gather and scatter), batched
    (``batched_mm``: each token's expert weights copied, then a bmm per token): transformers integrations/moe.py."""
    arch, T = x.arch, x.T
    moe = arch.moe
    assert moe is not None
    width = moe.active_f
    share = moe.shared_f / width if width else 0.0  # the shared experts' part of this linear
    scale = (d_out if role != "down" else d_in) / width  # / tp of the width on this rank
    shared_f = round(moe.shared_f * scale)
    routed_f = round(moe.expert_f * scale)
    e_local = max(1, moe.n_experts // x.ep)
    per_expert = max(1, T * moe.top_k * x.ep // moe.n_experts)
    shape = (d_in, routed_f) if role != "down" else (routed_f, d_out)
    if x.experts == "batched":  # every routed token-expert pair gathers its expert's weights: a copy of them each
        fwd, bwd = _linear(x, chip, shape[0], shape[1], 1, batch=T * moe.top_k)
        copy = memory(2.0 * T * moe.top_k * shape[0] * shape[1] * x.elem, 1, chip)
        fwd, bwd = fwd + copy, bwd + copy
    else:
        fwd, bwd = _linear(x, chip, shape[0], shape[1], per_expert, batch=e_local)
        if x.experts == "loop":  # one kernel per expert, and its tokens gathered and scattered back
            moved = memory(2.0 * T * moe.top_k * x.elem * max(shape), 2 * e_local, chip)
            fwd = fwd._replace(kernels=fwd.kernels + e_local - 1) + moved
            bwd = bwd._replace(kernels=bwd.kernels + 2 * (e_local - 1)) + moved
    if share:
        sf, sb = _linear(x, chip, *((d_in, shared_f) if role != "down" else (shared_f, d_out)), T)
        fwd, bwd = fwd + sf, bwd + sb
    dense = moe.moe_layers / arch.L  # DeepSeek-V3's first dense layers: the rest of the layers run a dense MLP
    if dense < 1:
        f_dense = moe.dense_f or arch.f
        df, db = _linear(x, chip, *((d_in, f_dense // x.tp) if role != "down" else (f_dense // x.tp, d_out)), T)
        fwd, bwd = fwd.times(dense) + df.times(1 - dense), bwd.times(dense) + db.times(1 - dense)
    return fwd, bwd


def _attention(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """The attention core over this rank's heads: FlashAttention (`strategy.attention = flash`) with a causal
    mask, or eager attention. Sliding-window layers attend to ``window`` keys: their work is that of the window."""
    arch = x.arch
    heads = arch.a // x.tp
    if x.flash:
        full_f, full_b = flash(x.b, x.s, heads, arch.d, chip, causal=True)
        if arch.window and arch.window_layers and x.s > arch.window:
            w_f, w_b = flash(x.b * x.s // arch.window, arch.window, heads, arch.d, chip, causal=False)
            frac = arch.window_layers / arch.L
            return full_f.times(1 - frac) + w_f.times(frac), full_b.times(1 - frac) + w_b.times(frac)
        return full_f, full_b
    return eager(x.b, x.s, heads, arch.d, x.elem, chip)


# Kernels and bytes per element of the eager memory-bound ops (forward), as transformers runs them; compiled, each
# chain is one kernel that reads its input and writes its output.
RMS_KERNELS, RMS_BYTES_PER_ELEM = 7, 28  # + 4 x the activation's bytes: to(fp32), pow, mean, rsqrt·, mul, to(), ·w
ROPE_KERNELS = 6  # per rotated tensor: x·cos, rotate_half (slice, neg, cat), ·sin, add


def _elementwise(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """Norms, the rotary embedding of q and k, the MLP's activation, the residual adds and attention's output
    copy: eager (transformers' code, op by op) or fused by torch.compile."""
    arch, T, C, R = x.arch, x.T, x.elem, x.resid
    tokens = T // x.tp if x.sp else T  # sequence parallelism splits the norms and adds over the TP ranks
    h, f = arch.h, arch.f // x.tp
    rms = arch.fam.norm != "layer"
    if x.compiled:
        norm = memory(arch.n_norms * tokens * h * (R + C), arch.n_norms, chip)
    elif rms:
        norm = memory(arch.n_norms * tokens * h * (RMS_BYTES_PER_ELEM + 4 * C), arch.n_norms * RMS_KERNELS, chip)
    else:  # native_layer_norm: one kernel reading and writing the tensor
        norm = memory(arch.n_norms * tokens * h * (R + C), arch.n_norms, chip)
    rope = NONE
    if arch.rotary_dim:
        rotated = T * (arch.h_q + arch.h_kv) // x.tp * C
        rope = memory(2 * rotated, 2, chip) if x.compiled else memory(6 * rotated, 2 * ROPE_KERNELS, chip)
    gated = arch.fam.mlp in ("gated", "gated_fused")
    act_bytes = T * f * C * (3 if gated else 2)
    act = (
        memory(act_bytes, 1, chip)
        if x.compiled
        else memory(act_bytes * (5 / 3 if gated else 1), 2 if gated else 1, chip)
    )
    adds = memory(2 * 3 * tokens * h * R, 2, chip)
    copy = NONE if x.compiled else memory(2 * T * arch.h_q // x.tp * C, 1, chip)  # transpose(1, 2).contiguous()
    fwd = norm + rope + act + adds + copy
    return fwd, fwd.times(2)


def _adapters(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """LoRA's adapters on the adapted linears: A (d_in -> r) then B (r -> d_out), forward; backward the input and
    weight gradients of both (peft LoraLayer: ``lora_B(lora_A(dropout(x))) * scaling`` added to the base output);
    with dropout, its mask and the dropped copy of the input."""
    fwd = bwd = NONE
    for role in x.lora:
        lin = x.arch.linear(role)
        d_in, d_out = _local(role, lin.d_in, lin.d_out, x.tp)
        a = _lora_pair(x, chip, d_in, x.rank)
        b = _lora_pair(x, chip, x.rank, d_out)
        scale_add = memory(3 * x.T * d_out * x.elem, 2, chip)  # · scaling, + the base output
        fwd, bwd = fwd + a[0] + b[0] + scale_add, bwd + a[1] + b[1] + scale_add
        if x.dropout:
            drop = memory(x.T * d_in * (2 * x.elem + 1), 1, chip)
            fwd, bwd = fwd + drop, bwd + drop
    return fwd, bwd


def _lora_pair(x: BlockSetup, chip: Chip, d_in: int, d_out: int) -> tuple[Work, Work]:
    """One adapter matrix: forward, and backward's input and weight gradients (adapters always train)."""
    eff = x.matmul_efficiency
    fwd = matmul(x.T, d_out, d_in, chip, x.elem, efficiency=eff)
    bwd = matmul(x.T, d_in, d_out, chip, x.elem, efficiency=eff) + matmul(
        d_in, d_out, x.T, chip, x.elem, efficiency=eff
    )
    return fwd, bwd


DEQUANT_SRC = (
    "bitsandbytes autograd/_functions.py MatMul4Bit: dequantize_4bit in the forward and again for the backward's "
    "input gradient (Dettmers et al. 2023, QLoRA §3)"
)


def _dequantization(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """A quantized base's linears dequantized for each matmul: read the stored blocks, write a 16-bit weight
    (bitsandbytes ``MatMul4Bit``: ``dequantize_4bit`` in the forward and again for the backward's input gradient;
    Dettmers et al. 2023, QLoRA §3)."""
    fwd = NONE
    for role, stored in x.quantized:
        lin = x.arch.linear(role)
        fwd = fwd + memory(stored + 2 * lin.weight_params // x.tp, 2, chip)
    return fwd, fwd


def _casts(x: BlockSetup, chip: Chip) -> tuple[Work, Work]:
    """autocast casts each fp32 weight to 16 bit once per forward (autocast_mode.cpp cached_cast: read 4 B, write
    2 B per weight; FSDP casts its shard before gathering it); torchao's Float8 scales each linear's input, weight
    and output gradient dynamically (an amax and a cast each: float8 training's dynamic scaling)."""
    fwd = bwd = NONE
    weights = x.arch.layer_weight_params // x.tp
    if x.autocast_cast:
        fwd = memory(6 * weights / x.cast_shard, len(x.arch.linears), chip)
    if x.float8:
        per_linear = 0.0
        for lin in x.arch.linears:
            d_in, d_out = _local(lin.role, lin.d_in, lin.d_out, x.tp)
            per_linear += 2 * (x.T * d_in * (x.elem + 1)) + 2 * d_in * d_out * (x.elem + 1)
        scale = memory(per_linear, 4 * len(x.arch.linears), chip)
        fwd, bwd = fwd + scale, bwd + scale
    return fwd, bwd
