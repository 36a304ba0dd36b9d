"""The saved-tensor primitives of the activation model: the context of a micro-batch, the running tally of saved
bytes, and the two building blocks every block uses (a norm, and the linears that read one input).

See `core.activations` for the model as a whole and its sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from core.arch import Arch
from core.precision import Regime

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


def _norm(c: ActCtx, out: Saved, label: str, x_rg: bool, w_trained: bool, in_bytes: int, shared: bool = False) -> bool:
    """Saved tensors of one norm; returns whether its output requires grad. ``shared``: its input was already saved
    by another norm of the block (GPT-NeoX/Falcon parallel blocks normalise the block input twice)."""
    T, h = c.T, c.arch.h
    kind = c.arch.fam.norm
    if kind == "rms":
        if x_rg:
            out.add(f"{label}: fp32 input + rsqrt", 4 * T * h + 4 * T, T * h + T, False)
        if w_trained:
            out.add(f"{label}: normalized", in_bytes * T * h, T * h, False)
    elif kind == "rms_offset":  # GemmaRMSNorm: (x.float() * rsqrt) * (1 + w.float()), cast back at the end
        if x_rg:
            out.add(f"{label}: fp32 input + rsqrt + (1 + w)", 4 * T * h + 4 * T + 4 * h, T * h + T + h, False)
        if w_trained:
            out.add(f"{label}: normalized (fp32)", 4 * T * h, T * h, False)
    elif x_rg or w_trained:
        stats = (2 * in_bytes if c.cpu and in_bytes < 4 else 8) * T  # mean and rstd, fp32 on CUDA
        if shared:
            out.add(f"{label}: mean/rstd (input shared)", stats, 2 * T, False)
        else:
            out.add(f"{label}: input + mean/rstd", in_bytes * T * h + stats, T * h + 2 * T, False)
    return x_rg or w_trained


def _linears(
    c: ActCtx, out: Saved, roles: tuple[str, ...], in_bytes: int, in_rg: bool, input_saved: bool, split_in: bool
) -> tuple[dict[str, bool], bool]:
    """Linears that consume one input tensor: their saved inputs, LoRA tensors and autocast weight copies.

    Returns, per role, whether the output requires grad, and whether the input tensor itself is saved.
    ``input_saved``: the input is already a saved storage. Falcon's linears multiply by ``weight.T`` (a view, not a
    leaf), so autocast does not cache their bf16 weight copies (``cached_cast`` caches leaves only).
    """
    arch, T = c.arch, c.T
    autocast = c.reg.compute == "autocast"
    cached = arch.fam.model_type != "falcon"
    need_input = False
    out_rg: dict[str, bool] = {}
    for role in roles:
        lin = arch.linear(role)
        d_in = lin.d_in
        if c.full:
            if autocast and in_bytes == 4:
                out.add(f"{role}_proj: bf16 copy of input", 2 * T * d_in, T * d_in, split_in)
            else:
                need_input = True
            if autocast:
                out.cache += 2 * lin.weight_params if cached else 0
                if in_rg:
                    out.copies += 2 * lin.weight_params
        elif autocast and not c.quantized and in_rg:
            out.copies += 2 * lin.weight_params  # frozen weight's bf16 copy, needed for the input gradient
            out.frozen_copies += 2 * lin.weight_params
        if role in c.lora:
            r = c.rank
            copy = c.lora_copy_bytes
            if copy:
                out.add(f"{role} LoRA A: own copy of input", copy * T * d_in, T * d_in, split_in)
            else:
                need_input = True
            out.add(f"{role} LoRA A output", c.lora_out_bytes * T * r, T * r, False)
            if autocast:
                a_w, b_w = 2 * r * d_in, 2 * r * lin.d_out
                out.cache += a_w + b_w
                out.copies += b_w + (a_w if in_rg else 0)
        out_rg[role] = c.full or role in c.lora or in_rg
    if need_input and not input_saved:
        d_in = arch.linear(roles[0]).d_in
        out.add(f"{'/'.join(roles)} input", in_bytes * T * d_in, T * d_in, split_in)
    return out_rg, need_input or input_saved
