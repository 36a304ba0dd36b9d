"""The activation model's context and tally: what it reads from a plan per micro-batch (`ActCtx`, `plan_ctx`),
the running tally of saved bytes (`Saved`), int8 compression of saved tensors, and where PyTorch's CPU kernels
save other bytes than CUDA's (`CPU_DIFFERENCES`).

See `core.memory.activations.block` for the model as a whole and its sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from vramplan.core.memory.rl.sizes import head_positions
from vramplan.core.plan.architecture.arch import Arch, lora_roles
from vramplan.core.plan.resolved import plan_rl_settings
from vramplan.core.plan.schema.precision import REGIMES, Regime

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

INT8_GROUP = 64  # int8 activation compression: one fp32 scale per 64 values

# Where PyTorch's CPU kernels (on which tests/data was measured) save other bytes than CUDA's; vramplan predicts
# CUDA, and `ActCtx.cpu` reproduces the CPU behaviour so the mechanisms can be checked against the measurements.
CPU_DIFFERENCES: tuple[str, ...] = (
    "LayerNorm keeps mean/rstd in the input dtype on the CPU (bf16 for a bf16 model), in fp32 on CUDA "
    "(aten/src/ATen/native/cuda/layer_norm_kernel.cu: at::toAccumulateType(..., /*is_cuda=*/true))",
    "the CPU flash kernel lays its output out like q; when q is contiguous [b, a, s, d] (RoPE through torch.cat: "
    "GPT-NeoX, Phi-3) o_proj reads a transposed copy; CUDA flash/efficient kernels write [b, s, a, d], no copy",
    "CUDA autocast runs pow in fp32 (autocast's fp32 op list), so GPT-2's gelu_new saves fp32 tensors there; "
    "CPU autocast leaves pow in bf16",
)


class ActCtx(NamedTuple):
    """What the activation model needs to know about a plan, per micro-batch (a NamedTuple: immutable and hashable
    like a frozen dataclass, built in a quarter of the time; one is built per estimate)."""

    arch: Arch
    b: int
    s: int
    reg: Regime
    full: bool  # base weights are trained (full fine-tuning)
    lora: frozenset[str]  # block roles with LoRA adapters
    quantized: bool  # a quantized (bitsandbytes) base: dequantized on the fly, no saved weight copies
    eager: bool
    selective: bool  # Megatron's selective recomputation (the attention core)
    gc: bool  # full activation checkpointing
    rank: int = 8  # LoRA rank
    cpu: bool = False  # PyTorch's CPU kernels (the measurements in tests/data) instead of CUDA's; see `CPU_DIFFERENCES`
    op: bool = False  # torchtitan's per-op selective checkpointing (a fixed list of op outputs kept)
    compiled: bool = False  # torch.compile of each block (inductor's min-cut partitioner decides what is saved)
    float8: bool = False  # torchao Float8 linears: fp8 inputs saved
    lora_bytes: int = 4  # the adapters' dtype: 4 (PEFT's fp32) or 2 (torchtune, litgpt: the base's 16 bit)
    dropout: bool = False  # LoRA dropout > 0
    bnb_legacy: bool = False  # bitsandbytes <= 0.43.1: each 4-bit linear keeps its input until its backward
    quantized_roles: frozenset[str] = frozenset()  # the block linears stored quantized
    reentrant: bool = False  # full checkpointing by torch.utils.checkpoint's reentrant Function
    dequant_compute_bytes: int = 2  # bnb_4bit_compute_dtype: what a 4-bit linear casts its input to and computes in
    quant_state_bytes: int = 2  # the dtype a 4-bit weight dequantizes to (the weight's dtype when it was quantized)
    experts: str = "grouped"  # how a mixture of experts runs: grouped (grouped_mm), loop (per expert), batched (bmm)
    logprob_rows: int = 0  # TRL's fused log-prob head projects this many rows in place of lm_head + loss (0: none)
    padded_mask: bool = False  # a padded batch: SDPA gets a [b, 1, s, s] mask, converted and saved by each layer
    attn_dropout: bool = False  # the model's attention dropout > 0 (core.memory.activations.dropout)
    resid_dropout: bool = False  # the model's residual (hidden) dropout > 0
    embed_dropout: bool = False  # the model's embedding dropout > 0

    @property
    def dequant_bytes(self) -> int:
        """Bytes per weight of a 4-bit linear's dequantized temporary: ``F.dequantize_4bit`` makes it in the
        QuantState's dtype, then ``.to(compute dtype)`` copies it when they differ (bitsandbytes
        autograd/_functions.py MatMul4Bit.backward; Lightning quantizes from fp16 for a bf16 compute dtype)."""
        q, comp = self.quant_state_bytes, self.dequant_compute_bytes
        return q if q == comp and not self.lightning_fp16 else q + comp

    @property
    def lightning_fp16(self) -> bool:
        """Lightning's BitsandbytesPrecision quantizes every nn.Linear from an fp16 copy (bitsandbytes.py
        ``_quantize_weight``: ``weight.to(device="cuda", dtype=torch.half)``): with a bf16 compute dtype each
        dequantization makes an fp16 tensor and its bf16 copy."""
        return "lm_head" in self.quantized_roles

    @property
    def T(self) -> int:
        return self.b * self.s

    @property
    def lora_copy_bytes(self) -> int:
        """Bytes per element of LoRA A's own copy of its input; 0 when A shares the input tensor.

        Autocast: the A matmul casts to bf16 (a copy per adapter). Master regimes (DeepSpeed casts the whole model,
        adapters included, to 16 bit): shared. Otherwise peft casts the input to the adapters' dtype
        (``_cast_input_dtype``): a copy when they differ (fp32 adapters on a 16-bit base, PEFT's
        ``autocast_adapter_dtype=True``), none when they match (16-bit adapters, or an fp32 model)."""
        if self.reg.compute == "autocast":
            return 2
        if self.reg.master_bytes:
            return 0
        return self.lora_bytes if self.lora_bytes != self.reg.act_bytes else 0

    @property
    def lora_out_bytes(self) -> int:
        """LoRA A's output [tokens, r], saved by B: in the adapter's compute dtype."""
        if self.reg.compute == "autocast" or self.reg.master_bytes:
            return 2
        return self.lora_bytes


class Layout(NamedTuple):
    """The strategy settings the activation and phase model read (hashable: results are cached on it; a
    NamedTuple, built per estimate, is four times faster to build than a frozen dataclass)."""

    tp: int
    sp: bool
    dp: int
    zero: int
    int8: bool
    fused_ce: bool
    accum: bool  # more than one micro-batch per optimizer step
    loss_chunks: int = 1  # torchtune's chunked cross-entropy (1: one [tokens, V] loss)
    checkpoint_every: int = 1  # checkpoint blocks k, 2k, ... only
    offload: bool = False  # torchtune's activation offloading to pinned host memory
    opt_in_bwd: bool = False  # the optimizer step runs in backward, per parameter
    unsynced: bool = False  # FSDP no_sync until the last micro-batch: unsharded gradients held (`States.grads_whole`)
    loss_parallel: bool = False  # DTensor loss_parallel over vocab-sharded logits (torchtitan with TP: `loss_parallel`)
    dtensor_tp: bool = False  # DTensor tensor parallelism (torchtitan): `gathered_head_input`
    fused_ce_set: bool = False  # strategy.fused_cross_entropy as the plan sets it (a chunked loss replaces it)
    stack_keys: tuple[tuple[str, Any], ...] = ()  # every stack-decided key's value (`setting`)

    def setting(self, key: str) -> Any:
        """The value of a stack-decided key (`core.plan.stack.defaults.STACK_KEYS`): a mechanism reads a new one
        here, with no field added to this record."""
        return dict(self.stack_keys)[key]


@dataclass(slots=True)
class Saved:
    """Saved bytes of a region, split by how tensor parallelism divides them."""

    rep: int = 0  # replicated over the tensor-parallel group (layer inputs, norms) unless sequence parallel
    split: int = 0  # divided by tensor parallelism (heads, MLP width)
    copies: int = 0  # autocast's saved 16-bit weight copies (divided by tensor parallelism)
    frozen_copies: int = 0  # the part of `copies` that belongs to frozen weights (not in autocast's cache)
    cache: int = 0  # autocast's cached copies of trained weights alive during the forward (GC: not saved)
    elems: int = 0  # elements of activation tensors (for int8 compression)
    work: int = 0  # largest transient of this region's backward
    held: int = 0  # kept outside autograd's saved tensors, beyond what is saved anyway (bitsandbytes <= 0.43.1)
    held_gc: int = 0  # the same under non-reentrant checkpointing, which cannot drop any of it
    op_cache: int = 0  # what per-op selective checkpointing keeps of this region (its cached op outputs)
    notes: list[tuple[str, int]] | None = field(default=None)

    def add(self, label: str, n_bytes: int, elems: int, split: bool) -> None:
        if n_bytes <= 0:
            return
        if split:
            self.split += n_bytes
        else:
            self.rep += n_bytes
        self.elems += elems
        if self.notes is not None:
            self.notes.append((label, n_bytes))

    def local(self, tp: int, sp: bool) -> int:
        """Bytes on one tensor-parallel rank."""
        return (self.rep // tp if sp else self.rep) + self.split // tp


def plan_ctx(plan: Plan, cpu: bool = False) -> ActCtx:
    """What the activation model reads from a plan, per micro-batch (``cpu``: PyTorch's CPU kernels)."""
    t, s, m = plan.training, plan.strategy, plan.model
    arch = m.arch()
    full = t.method == "full"
    lora = frozenset(() if full else lora_roles(arch, t.lora_targets))
    quant = t.base_quantization != "none"
    if not quant:
        qroles: frozenset[str] = frozenset()
    elif t.quantized_modules == "adapted":
        qroles = lora
    else:
        qroles = frozenset(arch.roles())
        if t.quantized_modules == "all-linears":
            qroles |= {"lm_head"}
    reg = REGIMES[t.regime]
    compute = t.quant_compute_dtype or reg.compute_dtype
    rows, padded = _post_training_head(plan, cpu)
    return ActCtx(
        arch=arch,
        b=t.micro_batch_size,
        s=t.seq_len,
        reg=reg,
        full=full,
        lora=lora,
        quantized=quant,
        eager=s.attention == "eager",
        selective=s.gradient_checkpointing == "selective",
        gc=s.gradient_checkpointing == "full",
        rank=t.lora_rank,
        cpu=cpu,
        op=s.gradient_checkpointing == "op",
        compiled=s.compile,
        float8=s.float8,
        lora_bytes=2 if t.lora_dtype == "bf16" else 4,
        dropout=t.lora_dropout > 0 and not full,
        bnb_legacy=quant and t.bnb_generation == "legacy",
        quantized_roles=qroles,
        reentrant=s.checkpoint_impl == "reentrant" and s.gradient_checkpointing == "full",
        dequant_compute_bytes=4 if compute == "fp32" else 2,
        quant_state_bytes=2,
        experts=s.experts,
        logprob_rows=rows,
        padded_mask=padded and s.attention != "eager",
        attn_dropout=bool(m.attention_dropout),
        resid_dropout=bool(m.hidden_dropout),
        embed_dropout=bool(m.embedding_dropout),
    )


def _post_training_head(plan: Plan, cpu: bool) -> tuple[int, bool]:
    """A DPO/GRPO/PPO update's (`core.memory.rl.estimate.update_plan`): the rows TRL's fused log-prob head
    projects (`core.memory.rl.sizes.head_positions`: GRPO/PPO's completions, DPO's every position but the last)
    and whether the batch is padded. Padded unless ``rl.padding_free``:
    DPO pads chosen and rejected to one length (DPOConfig ``padding_free = False``), GRPO/PPO pad completions that
    stop at EOS."""
    t = plan.training
    if not t.objective_spec.post_training:
        return 0, False
    r = plan_rl_settings(plan)
    b, s = t.micro_batch_size, t.seq_len
    scored = b * r.completion_len if r.spec.scores_completion else b * (s - 1)  # as core.memory.rl.estimate
    return head_positions(b, s, scored, cpu=cpu), not r.padding_free


def int8_bytes(elems: int) -> int:
    """int8 compression of saved activations: 1 byte per value plus an fp32 scale per group."""
    return elems + 4 * -(-elems // INT8_GROUP)
