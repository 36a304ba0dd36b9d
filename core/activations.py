"""What autograd saves for backward: the activation memory of one micro-batch, tensor by tensor.

The model follows the mechanisms, not a fitted factor. For each op of a Hugging Face decoder block it asks what
``torch.autograd`` saves (``tools/autograd/derivatives.yaml``: an op saves an input only when the gradient of
another input that requires grad needs it; e.g. ``mm`` saves ``self`` only if ``mat2`` requires grad, so a frozen
linear keeps no input), in which dtype, and whether two ops share one storage:

- RMSNorm (``LlamaRMSNorm.forward``) upcasts to fp32 and saves that fp32 copy and ``rsqrt`` (``pow``, ``mul``) when
  its input requires grad, and the normalized tensor when its weight is trained. LayerNorm saves its input,
  mean and rstd (``native_layer_norm``).
- Linear saves its input when its weight is trained. Under autocast each linear saves its *own* bf16 copy of an
  fp32 input (autocast caches casts of leaf weights only: ``autocast_mode.cpp`` ``cached_cast``), and a bf16 copy
  of its weight (``param_copy`` in the oracle) when its input requires grad.
- RoPE multiplies by cos/sin (saved once, not per layer); under autocast ``bf16 q * fp32 cos`` promotes to fp32.
- SDPA / FlashAttention saves q, k, v (GQA: k/v at kv-head width), the output and an fp32 log-sum-exp
  (``_scaled_dot_product_flash_attention``); eager attention saves q, k (repeated to all heads), the fp32
  softmax, its 16-bit copy (``.to(query.dtype)`` or autocast's cast), and v (repeated).
- SwiGLU saves gate (SiLU input), SiLU output and up (the product's operands) and the product (down_proj input);
  a GELU MLP (BLOOM's ``GeLUFunction``) saves its input and output.
- peft LoRA: A saves its input (its own fp32 copy on a 16-bit base, ``_cast_input_dtype``; its own bf16 copy under
  autocast), B saves A's output [tokens, r].
- Loss (``ForCausalLMLoss``): logits are upcast to fp32, ``log_softmax`` saves its fp32 [b*s, V] output,
  ``nll_loss`` the shifted int64 labels.

- Fused q/k/v projections (GPT-2, GPT-NeoX, Falcon, Phi-3): SDPA's q, k, v are views of the projection output
  unless RoPE made new ones, and a view keeps the whole output alive. Parallel blocks (GPT-NeoX, Falcon) normalise
  the same input twice (the second LayerNorm saves only its statistics) or once (one saved tensor feeds attention
  and MLP). GPT-2's ``gelu_new`` saves four tensors; Gemma's RMSNorm keeps its normalized tensor in fp32.

Every rule was checked tensor by tensor against ../shared/oracle (tests/data/oracle_truth.json): per-layer and
per-region saved bytes agree exactly for all llama/qwen2/bloom cases there, and for the 30 GPT-2, GPT-NeoX, Falcon,
Gemma and Phi-3 cases of tests/data/families_truth.json (with ``cpu=True``, see `CPU_DIFFERENCES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

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


@dataclass(frozen=True, slots=True)
class ActCtx:
    """What the activation model needs to know about a plan, per micro-batch."""

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


def _attention(c: ActCtx, out: Saved, x_rg: bool, n_bytes: int) -> tuple[bool, bool]:
    """Saved tensors of self-attention after its norm; returns whether its output requires grad and whether the
    norm's output (the q/k/v input) is saved.

    SDPA saves the q, k, v it is given. RoPE makes new q and k; the rest are views of the projection's output, so
    a fused projection keeps its whole [T, (a + 2 kv) d] output alive (GPT-2: q, k and v are views; GPT-NeoX and
    Phi-3: v). Falcon's new architecture broadcasts k and v to every head and copies them (``flatten``); with one
    key/value head (multi-query) SDPA cannot use a fused kernel and runs its math path, which materialises the
    probabilities like eager attention (in the compute dtype on CUDA; the CPU math path upcasts bf16 to fp32, which
    the measured cases do not exercise: their multi-query autocast case uses eager attention). The flash output
    already has the [b, s, a, d] layout o_proj reads (CUDA flash/efficient kernels write it so), so o_proj's input
    is not a copy.
    """
    arch, reg = c.arch, c.reg
    b, s, T, a = c.b, c.s, c.T, arch.a
    h_q, h_kv = arch.h_q, arch.h_kv
    C = reg.act_bytes
    fused = arch.fam.fused_qkv
    roles = ("qkv",) if fused else ("q", "k", "v")
    rg, in_saved = _linears(c, out, roles, n_bytes, x_rg, False, False)
    any_rg = any(rg.values())
    S = 4 if reg.compute == "fp32" else 2  # attention matmuls/SDPA are autocast lower-precision ops
    flash = not c.eager and not arch.attn_math
    if any_rg:
        if flash:
            if not fused:
                out.add("attention q, k, v", S * T * (h_q + 2 * h_kv), T * (h_q + 2 * h_kv), True)
            elif arch.kv_expanded:
                out.add("attention q, k, v (k, v expanded to all heads)", 3 * S * T * h_q, 3 * T * h_q, True)
            else:
                if arch.rotary_dim:
                    out.add("attention q, k (after RoPE)", S * T * (h_q + h_kv), T * (h_q + h_kv), True)
                out.add(
                    "fused q/k/v output (viewed by attention)", C * T * (h_q + 2 * h_kv), T * (h_q + 2 * h_kv), True
                )
            out.add("attention output", S * T * h_q, T * h_q, True)
            out.add("flash log-sum-exp (fp32)", 4 * b * a * s, b * a * s, True)
            if arch.mask_per_layer:
                out.add("attention mask (bool -> float, per call)", S * b * s * s, b * s * s, True)
        elif arch.attn_math and not c.eager:
            out.add("SDPA math path: q, k, v (k, v expanded to all heads)", 3 * S * T * h_q, 3 * T * h_q, True)
            out.add("SDPA math path: probabilities", S * b * a * s * s, b * a * s * s, True)
        elif c.selective:  # Korthikanti et al. 2022 §5: the core (QK^T, softmax, AV) keeps only its inputs
            out.add("attention core inputs q, k, v", S * T * (h_q + 2 * h_kv), T * (h_q + 2 * h_kv), True)
        elif fused:
            out.add("q, k, v copies", 3 * C * T * h_q, 3 * T * h_q, True)
            _scores(c, out)
        else:
            _eager_core(c, out, rg["q"], rg["k"], rg["v"])
        if arch.index_bytes:
            out.add("k/v index tensors (int64)", arch.index_bytes, 0, False)
    # o_proj's input: the flash output (already saved) or the eager core's merged-heads copy
    o_shared = flash and not (c.cpu and arch.fam.model_type in ("gpt_neox", "phi3"))
    rg_o, _ = _linears(c, out, ("o",), S if flash else C, any_rg, any_rg and o_shared, True)
    if c.eager:
        out.work += (C + 4) * b * a * s * s  # softmax backward: grad of the probabilities + fp32 grad of scores
        if c.selective and any_rg:  # the recomputed core holds what eager attention saves, during its backward
            core = Saved()  # q, k, v are the kept inputs; GQA's repeated k/v are new copies
            if not fused and h_kv < h_q:
                core.add("", 2 * S * T * h_q, 0, True)
            _scores(c, core)
            out.work += core.split
    return rg_o["o"], in_saved


def _eager_core(c: ActCtx, out: Saved, q_rg: bool, k_rg: bool, v_rg: bool) -> None:
    """HF ``eager_attention_forward``: matmul(q, repeat_kv(k)^T) saves q when k needs a gradient and k when q does;
    softmax saves its fp32 output; matmul(probs, repeat_kv(v)) saves the probabilities when v needs a gradient
    and v when they do. ``repeat_kv`` copies k and v to all heads, except with one kv head and a batch of one,
    where expand + reshape (and matmul's folding to 3-D) stay views of the kv-width tensor."""
    reg, arch = c.reg, c.arch
    b, s, T, a = c.b, c.s, c.T, arch.a
    h_q, h_kv = arch.h_q, arch.h_kv
    C = reg.act_bytes
    S = 4 if reg.compute == "fp32" else 2
    view = arch.kv == 1 and b == 1 and h_kv < h_q
    qk_rg = q_rg or k_rg
    if k_rg:
        out.add("q (for the gradient of k)", S * T * h_q, T * h_q, True)
    if q_rg:  # under autocast k is cast to bf16: the cast of an expanded view is a full copy
        k_width = h_kv if view and reg.compute != "autocast" else h_q
        out.add("k, repeated to all heads", S * T * k_width, T * k_width, True)
    p2 = b * a * s * s
    if reg.compute == "fp32":
        if qk_rg or v_rg:
            out.add("softmax probabilities (fp32)", 4 * p2, p2, True)
    else:
        if qk_rg:
            out.add("softmax probabilities (fp32)", 4 * p2, p2, True)
        if v_rg:
            out.add("16-bit copy of the probabilities", 2 * p2, p2, True)
    if qk_rg:
        v_width = h_kv if view else h_q
        out.add("v, repeated to all heads", C * T * v_width, T * v_width, True)


def _scores(c: ActCtx, out: Saved) -> None:
    """Eager attention's probabilities: fp32 (an explicit fp32 softmax, or autocast's fp32 mask add), plus the
    16-bit copy the AV matmul reads; GPT-2 and Falcon take the softmax in the scores' dtype, so a bf16 model
    keeps only bf16 probabilities."""
    b, s, a = c.b, c.s, c.arch.a
    if c.reg.compute == "half" and c.arch.fam.model_type in ("gpt2", "falcon"):
        out.add("softmax probabilities (16-bit)", 2 * b * a * s * s, b * a * s * s, True)
        return
    out.add("softmax probabilities (fp32)", 4 * b * a * s * s, b * a * s * s, True)
    if c.reg.compute != "fp32":
        out.add("16-bit copy of the probabilities", 2 * b * a * s * s, b * a * s * s, True)


def _mlp(c: ActCtx, out: Saved, m_rg: bool, m_bytes: int, input_saved: bool) -> bool:
    """The MLP's saved tensors. ``gelu_new`` (GPT-2) is Python ops: ``pow`` saves its input, then tanh, 1 + tanh
    and x / 2 are saved by their consumers; under CUDA autocast ``pow`` runs in fp32 (autocast's fp32 op list), so
    the input's fp32 copy, tanh and 1 + tanh are fp32 and the product reaching the down projection is too."""
    arch, T, f = c.arch, c.T, c.arch.f
    C = c.reg.act_bytes
    down_in = C
    if arch.fam.mlp == "gated":
        rg, _ = _linears(c, out, ("gate", "up"), m_bytes, m_rg, input_saved, False)
        if rg["gate"]:
            out.add(f"{arch.act} input (gate)", C * T * f, T * f, True)
        if rg["up"]:
            out.add(f"{arch.act} output", C * T * f, T * f, True)
        if rg["gate"]:
            out.add("up projection output", C * T * f, T * f, True)
        prod_rg = rg["gate"] or rg["up"]
    elif arch.fam.mlp == "gated_fused":
        rg, _ = _linears(c, out, ("gate_up",), m_bytes, m_rg, input_saved, False)
        prod_rg = rg["gate_up"]
        if prod_rg:
            out.add("gate_up output (activation input and up, views)", C * 2 * T * f, 2 * T * f, True)
            out.add(f"{arch.act} output", C * T * f, T * f, True)
    else:
        rg, _ = _linears(c, out, ("up",), m_bytes, m_rg, input_saved, False)
        prod_rg = rg["up"]
        if prod_rg and arch.act == "gelu_new":
            if c.reg.compute == "autocast" and not c.cpu:
                out.add("gelu_new: fp32 input (pow), tanh, 1 + tanh", 3 * 4 * T * f, 3 * T * f, True)
                out.add("gelu_new: x / 2", C * T * f, T * f, True)
                down_in = 4
            else:
                out.add("gelu_new: input, tanh, 1 + tanh, x / 2", 4 * C * T * f, 4 * T * f, True)
        elif prod_rg:
            out.add(f"{arch.act} input", C * T * f, T * f, True)
    rg_d, _ = _linears(c, out, ("down",), down_in, prod_rg, False, True)
    out.work = max(out.work, C * 3 * T * f + 2 * c.reg.resid_bytes * T * arch.h)  # grads of the MLP's tensors
    return rg_d["down"]


@lru_cache(maxsize=1024)
def layer_saved(c: ActCtx, x_rg: bool) -> Saved:
    """Saved bytes of one decoder block whose input does (or, LoRA's first block, does not) require grad.

    Cached (the result must not be mutated): a keystroke that changes no activation input reuses it."""
    return _layer_saved(c, x_rg, None)


def layer_notes(c: ActCtx, x_rg: bool) -> list[tuple[str, int]]:
    """The same computation, itemised tensor by tensor (for explanations)."""
    notes: list[tuple[str, int]] = []
    _layer_saved(c, x_rg, notes)
    return notes


def _layer_saved(c: ActCtx, x_rg: bool, notes: list[tuple[str, int]] | None) -> Saved:
    """Pre-norm block: ``x + attn(norm(x))`` then ``+ mlp(norm(.))``; a parallel block (GPT-NeoX, Falcon) feeds
    attention and MLP from the same input, normalised twice (NeoX, Falcon's new architecture) or once (Falcon)."""
    out = Saved(notes=notes)
    R = c.reg.resid_bytes
    arch = c.arch
    n_rg = _norm(c, out, "input norm", x_rg, c.full, R)
    attn_rg, attn_in_saved = _attention(c, out, n_rg, R)
    mlp_in_saved = False
    if not arch.parallel:
        m_rg = _norm(c, out, "post-attention norm", x_rg or attn_rg, c.full, R)
    elif arch.n_norms == 2:
        m_rg = _norm(c, out, "MLP norm", x_rg, c.full, R, shared=True)
    else:
        m_rg, mlp_in_saved = n_rg, attn_in_saved  # one LayerNorm feeds both
    _mlp(c, out, m_rg, R, mlp_in_saved)
    return out


def checkpointed_layer(c: ActCtx) -> int:
    """Full recompute keeps each block's input (the residual stream) as the checkpoint."""
    return c.reg.resid_bytes * c.T * c.arch.h


def once_bytes(c: ActCtx) -> int:
    """Saved once per micro-batch, not per block: RoPE cos and sin, [1, s, rotary_dim] each in the embedding's
    dtype; Falcon's ALiBi bias merged into the mask, [b, a, s, s], which SDPA saves (every block passes the same
    tensor)."""
    arch = c.arch
    if arch.rotary_dim:
        return 2 * c.s * arch.rotary_dim * c.reg.resid_bytes
    if arch.alibi and arch.fam.model_type == "falcon" and not c.eager:
        return c.reg.resid_bytes * c.b * arch.a * c.s * c.s
    return 0


@lru_cache(maxsize=256)
def embed_saved(c: ActCtx, out_rg: bool) -> Saved:
    """Token ids (embedding backward needs them when the embedding trains), GPT-2's position ids, and BLOOM's
    embedding LayerNorm."""
    out = Saved()
    if c.full:
        out.add("input ids (int64)", 8 * c.T, c.T, False)
        if c.arch.positions:
            out.add("position ids (int64)", 8 * c.s, c.s, False)
    if c.arch.fam.embed_norm:
        _norm(c, out, "embedding norm", out_rg, c.full, c.reg.resid_bytes)
    return out


@lru_cache(maxsize=256)
def head_saved(c: ActCtx) -> Saved:
    """Final norm, lm_head input and the loss's labels (the fp32 log-softmax is `logits_bytes`)."""
    arch, T, R = c.arch, c.T, c.reg.resid_bytes
    out = Saved()
    _norm(c, out, "final norm", True, c.full, R)
    if c.full:
        if c.reg.compute == "autocast":
            out.add("lm_head: bf16 copy of input", 2 * T * arch.h, T * arch.h, False)
        else:
            out.add("lm_head input", R * T * arch.h, T * arch.h, False)
    if c.reg.compute == "autocast":
        out.copies += 2 * arch.V * arch.h  # lm_head weight copy (its input requires grad in every method)
        if c.full:
            out.cache += 2 * arch.V * arch.h
        else:
            out.frozen_copies += 2 * arch.V * arch.h
    out.add("shifted labels (int64) + nll_loss total_weight", 8 * T + 4, T, False)
    return out


def logsoftmax_bytes(c: ActCtx) -> int:
    """The loss's saved fp32 log-softmax, [b*s, V] (HF ``ForCausalLMLoss`` upcasts logits to fp32)."""
    return 4 * c.T * c.arch.V


def closure_bytes(c: ActCtx) -> int:
    """Tensors non-reentrant checkpointing keeps alive through its closures (not saved tensors): RoPE cos/sin,
    position ids, and the materialised 4D mask of eager attention (BLOOM: ALiBi bias + mask; Falcon materialises
    its mask for SDPA too: bool, or float with its ALiBi bias). Selective
    recompute of an eager attention core keeps the mask too."""
    b, s, R = c.b, c.s, c.reg.resid_bytes
    arch = c.arch
    if not c.gc:
        return R * b * s * s if (c.selective and c.eager) else 0
    n = 8 * s
    if arch.rotary_dim:
        n += 2 * s * arch.rotary_dim * R
    elif arch.fam.model_type == "bloom":
        n += 4 * b * arch.a * s
    if arch.fam.model_type == "falcon" and not c.eager:  # Falcon always materialises its mask
        n += R * b * arch.a * s * s if arch.alibi else b * s * s
    elif c.eager:
        n += R * b * s * s
    return n


def int8_bytes(elems: int) -> int:
    """int8 compression of saved activations: 1 byte per value plus an fp32 scale per group."""
    return elems + 4 * -(-elems // INT8_GROUP)
