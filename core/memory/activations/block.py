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

- Dropout in training (`core.memory.activations.dropout`): masks, and the dropped attention probabilities.
- Fused q/k/v projections (GPT-2, GPT-NeoX, Falcon, Phi-3): SDPA's q, k, v are views of the projection output
  unless RoPE made new ones, and a view keeps the whole output alive. Parallel blocks (GPT-NeoX, Falcon) normalise
  the same input twice (the second LayerNorm saves only its statistics) or once (one saved tensor feeds attention
  and MLP). GPT-2's ``gelu_new`` saves four tensors; Gemma's RMSNorm keeps its normalized tensor in fp32.

Every rule was checked tensor by tensor against ../shared/oracle (tests/data/oracle_truth.json): per-layer and
per-region saved bytes agree exactly for all llama/qwen2/bloom cases there, and for the 30 GPT-2, GPT-NeoX, Falcon,
Gemma and Phi-3 cases of tests/data/families_truth.json (with ``cpu=True``, see `CPU_DIFFERENCES`).
"""

from __future__ import annotations

from vramplan.core.memory.activations.attention import attention_saved
from vramplan.core.memory.activations.context import ActCtx, Saved
from vramplan.core.memory.activations.dropout import (
    attention_dropout_saved,
    embedding_dropout_saved,
    residual_dropout_saved,
)
from vramplan.core.memory.activations.experts import moe_saved
from vramplan.core.memory.activations.ops import linears_saved, norm_saved
from vramplan.core.plan.architecture.arch import dense_layer_arch
from vramplan.core.plan.helpers.memo import memoised


def _qk_norm(c: ActCtx, out: Saved) -> None:
    """RMSNorm of q and k (Qwen3, Gemma 3: per head over d; OLMo 2: over the whole projection): as any RMSNorm
    (``Qwen3RMSNorm.forward``) its fp32 copy of the input and fp32 rsqrt per row, and the normalized tensor in the
    input's dtype that its weight multiplies (Gemma's ``x * (1 + w)`` keeps it in fp32). Phi's optional q/k
    LayerNorm is not modelled (off in phi-1.5/2)."""
    arch, T = c.arch, c.T
    kind = arch.fam.qk_norm
    if kind not in ("head", "full"):
        return
    n = T * (arch.a + arch.kv) * arch.d
    rows = T * (arch.a + arch.kv) if kind == "head" else 2 * T
    normed = 4 if arch.fam.norm == "rms_offset" else c.reg.act_bytes
    out.add("q/k norms: fp32 input, rsqrt, normalized", (4 + normed) * n + 4 * rows, 2 * n, True)
    if arch.fam.norm == "rms_offset":  # Gemma 3: each norm's fp32 (1 + w), [d]
        out.add("q/k norms: (1 + w) of q and of k", 2 * 4 * arch.d, 0, False)


def _mlp(c: ActCtx, out: Saved, m_rg: bool, m_bytes: int, input_saved: bool) -> bool:
    """The MLP's saved tensors. ``gelu_new`` (GPT-2) is Python ops: ``pow`` saves its input, then tanh, 1 + tanh
    and x / 2 are saved by their consumers; under CUDA autocast ``pow`` runs in fp32 (autocast's fp32 op list), so
    the input's fp32 copy, tanh and 1 + tanh are fp32 and the product reaching the down projection is too."""
    arch = c.arch
    if arch.moe is not None:
        n, L = arch.moe.moe_layers, arch.L
        if n >= L:
            return moe_saved(c, out)
        # DeepSeek-V3's first_k_dense_replace (and Qwen-MoE's mlp_only_layers): L - n blocks run the dense MLP
        # of width intermediate_size; the block's figure is the average over the layers, as for windowed layers
        parts = (Saved(), Saved())
        moe_saved(c, parts[0])
        rg = _dense_mlp(c._replace(arch=dense_layer_arch(arch)), parts[1], m_rg, m_bytes, input_saved)
        for part, k, label in ((parts[0], n, "mixture-of-experts MLP"), (parts[1], L - n, "dense MLP")):
            out.add(f"{label} ({k} of {L} layers, averaged): replicated", part.rep * k // L, part.elems * k // L, False)
            out.add(f"{label} ({k} of {L} layers, averaged): split", part.split * k // L, 0, True)
            out.copies += part.copies * k // L
            out.frozen_copies += part.frozen_copies * k // L
            out.cache += part.cache * k // L  # per block, summed over the layers like the saved bytes
            out.work = max(out.work, part.work)  # the largest transient of either kind of block
        return rg
    return _dense_mlp(c, out, m_rg, m_bytes, input_saved)


def _dense_mlp(c: ActCtx, out: Saved, m_rg: bool, m_bytes: int, input_saved: bool) -> bool:
    arch, T, f = c.arch, c.T, c.arch.f
    C = c.reg.act_bytes
    down_in = C
    if arch.fam.mlp == "gated":
        rg, _ = linears_saved(c, out, ("gate", "up"), m_bytes, m_rg, input_saved, False)
        if rg["gate"]:
            out.add(f"{arch.act} input (gate)", C * T * f, T * f, True)
        if rg["up"] and not c.compiled:  # compiled: recomputed from the saved gate output
            out.add(f"{arch.act} output", C * T * f, T * f, True)
        if rg["gate"]:
            out.add("up projection output", C * T * f, T * f, True)
        prod_rg = rg["gate"] or rg["up"]
    elif arch.fam.mlp == "gated_fused":
        rg, _ = linears_saved(c, out, ("gate_up",), m_bytes, m_rg, input_saved, False)
        prod_rg = rg["gate_up"]
        if prod_rg:
            out.add("gate_up output (activation input and up, views)", C * 2 * T * f, 2 * T * f, True)
            if not c.compiled:
                out.add(f"{arch.act} output", C * T * f, T * f, True)
    else:
        rg, _ = linears_saved(c, out, ("up",), m_bytes, m_rg, input_saved, False)
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
    rg_d, _ = linears_saved(c, out, ("down",), down_in, prod_rg, False, True)
    out.work = max(out.work, C * 3 * T * f + 2 * c.reg.resid_bytes * T * arch.h)  # grads of the MLP's tensors
    return rg_d["down"]


@memoised(1024)
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
    n_rg = norm_saved(c, out, "input norm", x_rg, c.full, R, src_bytes=R)
    attn_rg, attn_in_saved = attention_saved(c, out, n_rg, R)
    attention_dropout_saved(c, out, n_rg)
    residual_dropout_saved(c, out, "attention", attn_rg)
    if c.full:
        _qk_norm(c, out)
    mlp_in_saved = False
    if not arch.parallel:
        if arch.n_norms == 4:
            # Gemma 2/3 (modeling_gemma2.py Gemma2DecoderLayer): post_attention_layernorm normalises o_proj's
            # output before the residual add; pre_feedforward_layernorm is the norm before the MLP
            norm_saved(c, out, "post-attention norm (of o_proj's output)", attn_rg, c.full, c.reg.act_bytes)
        # compiled, the second norm's input h = x + o is rebuilt from the saved block input and o_proj's output
        label = "pre-feedforward norm" if arch.n_norms == 4 else "post-attention norm"
        m_rg = norm_saved(c, out, label, x_rg or attn_rg, c.full, R, src_bytes=c.reg.act_bytes)
    elif arch.n_norms == 2:
        m_rg = norm_saved(c, out, "MLP norm", x_rg, c.full, R, shared=True)
    else:
        m_rg, mlp_in_saved = n_rg, attn_in_saved  # one LayerNorm feeds both
    mlp_rg = _mlp(c, out, m_rg, R, mlp_in_saved)
    residual_dropout_saved(c, out, "MLP", mlp_rg)
    if arch.n_norms == 4 and not arch.parallel:  # Gemma 2/3: post_feedforward_layernorm of the MLP's output
        norm_saved(c, out, "post-feedforward norm (of the MLP's output)", mlp_rg, c.full, c.reg.act_bytes)
    return out


def checkpointed_layer(c: ActCtx) -> int:
    """Full recompute keeps each block's input (the residual stream) as the checkpoint."""
    return c.reg.resid_bytes * c.T * c.arch.h


@memoised(256)
def op_cached(c: ActCtx) -> Saved:
    """Per-op selective checkpointing (torchtitan ``selective_ac_option = "op"``): what one block keeps.

    torchtitan parallelisms/parallelize_llama.py ``_custom_policy`` (Dec 2024, 9dec370; HEAD
    distributed/activation_checkpoint.py the same for these ops): the outputs of ``aten.mm`` are MUST_SAVE except
    every second one (a counter per block's forward), and the SDPA flash/efficient outputs are saved; everything
    else is recomputed in backward (torch utils/checkpoint.py ``_CachingTorchDispatchMode`` caches the saved
    outputs until the block's backward). The block input is the checkpoint's own input (``_NoopSaveInputs``).
    The matmuls run in forward order; a LoRA adapter adds its two matmuls after the base one (PEFT/torchtune:
    ``base(x) + lora_b(lora_a(x))``). Compiled, inductor does not save the last matmul's output: no backward reads
    it (measured on the CPU: C·T·h fewer bytes for a Llama block). Eager attention (``bmm``) is not in the
    Dec-2024 list: its core is recomputed. Measured exactly on the CPU for a Llama block, bf16 and fp32
    (tests/data/sac_block.json)."""
    arch, T, C = c.arch, c.T, c.reg.act_bytes
    out = Saved()
    out.add("block input (the checkpoint)", c.reg.resid_bytes * T * arch.h, T * arch.h, False)
    mms: list[tuple[str, int, int]] = []  # (label, bytes, elements) of each matmul's output, in forward order
    for role in arch.roles():
        lin = arch.linear(role)
        mms.append((f"{role}_proj output", C * T * lin.d_out, T * lin.d_out))
        if role in c.lora:
            mms.append((f"{role} LoRA A output", c.lora_out_bytes * T * c.rank, T * c.rank))
            mms.append((f"{role} LoRA B output", c.lora_out_bytes * T * lin.d_out, T * lin.d_out))
    saved = mms[0::2]  # the 1st, 3rd, ... matmul
    if c.compiled and len(mms) % 2:
        saved = saved[:-1]
    for label, n_bytes, elems in saved:
        out.add(f"{label} (saved by the op policy)", n_bytes, elems, True)
    if not c.eager:
        S = 4 if c.reg.compute == "fp32" else 2
        out.add("attention output (saved by the op policy)", S * T * arch.h_q, T * arch.h_q, True)
        out.add("flash log-sum-exp (fp32)", 4 * c.b * arch.a * c.s, c.b * arch.a * c.s, True)
    return out


def once_bytes(c: ActCtx) -> int:
    """Saved once per micro-batch, not per block: RoPE cos and sin, [1, s, rotary_dim] each in the embedding's
    dtype; Falcon's ALiBi bias merged into the mask, [b, a, s, s], which SDPA saves (every block passes the same
    tensor)."""
    arch = c.arch
    if arch.rotary_dim:
        # Gemma 3: local (sliding) layers rotate with their own base (rope_local_base_freq): a second cos/sin pair,
        # saved when both kinds of layer are present (modeling_gemma3.py, one rotary embedding per layer type)
        sets = 2 if arch.fam.local_rope and 0 < arch.window_layers < arch.L else 1
        # gpt-oss (modeling_gpt_oss.py _apply_rotary_emb): the halves of x rotate by cos/sin of d/2 frequencies
        width = arch.rotary_dim // 2 if arch.fam.half_rope_table else arch.rotary_dim
        return sets * 2 * c.s * width * c.reg.resid_bytes
    if arch.alibi and arch.fam.model_type == "falcon" and not c.eager:
        return c.reg.resid_bytes * c.b * arch.a * c.s * c.s
    return 0


@memoised(256)
def embed_saved(c: ActCtx, out_rg: bool) -> Saved:
    """Token ids (embedding backward needs them when the embedding trains), GPT-2's position ids, and BLOOM's
    embedding LayerNorm."""
    out = Saved()
    if c.full:
        out.add("input ids (int64)", 8 * c.T, c.T, False)
        if c.arch.positions:
            out.add("position ids (int64)", 8 * c.s, c.s, False)
    if c.arch.fam.embed_norm:
        norm_saved(c, out, "embedding norm", out_rg, c.full, c.reg.resid_bytes)
    embedding_dropout_saved(c, out, out_rg)
    return out


@memoised(256)
def head_saved(c: ActCtx) -> Saved:
    """Final norm, lm_head input and the loss's labels (the fp32 log-softmax is `logits_bytes`)."""
    arch, T, R = c.arch, c.T, c.reg.resid_bytes
    out = Saved()
    norm_saved(c, out, "final norm", True, c.full, R)
    if c.logprob_rows:
        _logprob_head_saved(c, out)
        return out
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


def _logprob_head_saved(c: ActCtx, out: Saved) -> None:
    """TRL's fused log-prob head in place of lm_head + loss (trl/trainer/utils.py ``add_fused_lm_head``,
    trl/kernels/chunked_logprob.py ``ChunkedLogProbFunction.forward``: ``ctx.save_for_backward(hidden, weight,
    bias, targets, log_z, entropy)``). Over its N rows: the hidden states it projects, a new [N, h] tensor in the
    final norm's dtype (``hidden_states[:, :-1]`` compacted by ``[mask]`` on CUDA, copied by ``reshape`` of the
    non-contiguous slice elsewhere), the int64 targets, fp32 log-normaliser and entropy (DPO and GRPO ask for the
    entropy), and the bool masks of the outputs' scatter (one on CUDA, ``masked_scatter``; elsewhere one
    ``~mask`` per differentiable output, ``masked_fill``). The weight is the parameter itself: autocast never
    sees the head (each vocabulary tile is cast in the forward, a transient), so no 16-bit weight copy is kept.
    The objectives' own losses save a few [b, completion] fp32 tensors (a few bytes a token): not counted."""
    N, h = c.logprob_rows, c.arch.h
    out.add("fused log-prob head: hidden states it projects", c.reg.resid_bytes * N * h, N * h, False)
    out.add("fused log-prob head: targets (int64), log-normaliser and entropy (fp32)", 16 * N, N, False)
    positions = c.b * (c.s - 1)
    out.add("fused log-prob head: output masks (bool)", positions * (2 if c.cpu else 1), positions, False)


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
    if not (c.gc or c.op):
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
    elif c.padded_mask:  # a padded batch's bool [b, 1, s, s] mask, passed to every checkpointed block
        n += b * s * s
    return n
