"""The activation model's context and tally: what it reads from a plan per micro-batch (`ActCtx`, `plan_ctx`),
the running tally of saved bytes (`Saved`), int8 compression of saved tensors, and where PyTorch's CPU kernels
save other bytes than CUDA's (`CPU_DIFFERENCES`).

See `core.memory.activations.block` for the model as a whole and its sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.arch import Arch, lora_roles
from vramplan.core.plan.precision import REGIMES, Regime

if TYPE_CHECKING:
    from vramplan.core.plan.plan import Plan

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
    quantized: bool  # bitsandbytes base: dequantized on the fly, no saved weight copies
    eager: bool
    selective: bool
    gc: bool  # full activation checkpointing
    rank: int = 8  # LoRA rank
    cpu: bool = False  # PyTorch's CPU kernels (the measurements in tests/data) instead of CUDA's; see `CPU_DIFFERENCES`

    @property
    def T(self) -> int:
        return self.b * self.s

    @property
    def lora_copy_bytes(self) -> int:
        """Bytes per element of LoRA A's own copy of its input; 0 when A shares the input tensor.

        fp32 model: shared. Autocast: the A matmul casts to bf16 (a copy per adapter). bf16-pure: peft keeps the
        adapters in fp32 (``autocast_adapter_dtype=True``) and casts the input up (a copy per adapter). Master
        regimes (DeepSpeed casts the whole model, adapters included, to 16 bit): shared."""
        if self.reg.compute == "autocast":
            return 2
        if self.reg.compute == "half" and not self.reg.master_bytes:
            return 4
        return 0

    @property
    def lora_out_bytes(self) -> int:
        """LoRA A's output [tokens, r], saved by B: in the adapter's compute dtype."""
        if self.reg.compute == "autocast" or self.reg.master_bytes:
            return 2
        return 4


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
    t, s = plan.training, plan.strategy
    arch = plan.model.arch()
    full = t.method == "full"
    return ActCtx(
        arch=arch,
        b=t.micro_batch_size,
        s=t.seq_len,
        reg=REGIMES[t.precision],
        full=full,
        lora=frozenset(() if full else lora_roles(arch, t.lora_targets)),
        quantized=t.base_quantization != "none",
        eager=s.attention == "eager",
        selective=s.gradient_checkpointing == "selective",
        gc=s.gradient_checkpointing == "full",
        rank=t.lora_rank,
        cpu=cpu,
    )


def int8_bytes(elems: int) -> int:
    """int8 compression of saved activations: 1 byte per value plus an fp32 scale per group."""
    return elems + 4 * -(-elems // INT8_GROUP)
