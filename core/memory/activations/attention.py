"""Self-attention's saved tensors: SDPA/FlashAttention, eager attention and selective recomputation.

Sources: PyTorch ``_scaled_dot_product_flash_attention`` / ``_efficient_attention`` (q, k, v, output, fp32
log-sum-exp), transformers ``eager_attention_forward`` and ``repeat_kv`` (models/llama/modeling_llama.py), BLOOM's
``baddbmm``/``bmm`` attention, and Korthikanti et al. 2022 §5 for selective recomputation.
"""

from __future__ import annotations

from vramplan.core.memory.activations.context import ActCtx, Saved
from vramplan.core.memory.activations.ops import linears_saved


def attention_saved(c: ActCtx, out: Saved, x_rg: bool, n_bytes: int) -> tuple[bool, bool]:
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
    rg, in_saved = linears_saved(c, out, roles, n_bytes, x_rg, False, False)
    any_rg = any(rg.values())
    S = 4 if reg.compute == "fp32" else 2  # attention matmuls/SDPA are autocast lower-precision ops
    flash = not c.eager and not arch.attn_math
    if any_rg:
        if flash:
            if not fused:
                out.add("attention q, k, v", S * T * (h_q + 2 * h_kv), T * (h_q + 2 * h_kv), True)
                _window_mask(c, out, S)
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
    rg_o, _ = linears_saved(c, out, ("o",), S if flash else C, any_rg, any_rg and o_shared, True)
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
    if arch.fam.softcap and qk_rg:  # Gemma 2: scores / cap (fp32) and tanh's output (scores' dtype)
        out.add("soft-capped scores: scores / cap, tanh", (4 + S) * p2, 2 * p2, True)
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


def _window_mask(c: ActCtx, out: Saved, S: int) -> None:
    """Sliding-window layers under SDPA once the sequence reaches the window (transformers ``masking_utils``:
    ``_ignore_causal_mask_sdpa`` is False when kv_length >= window): a materialised [b, 1, s, s] mask is passed
    (4 B per element, measured on the CPU), so GQA is not forwarded to SDPA and ``repeat_kv`` gives it k and v at
    every head. Averaged over the layers (only ``window_layers`` of them have a window)."""
    arch, b, s, T = c.arch, c.b, c.s, c.T
    if not arch.window or s < arch.window or not arch.window_layers:
        return
    extra = 4 * b * s * s + (2 * S * T * (arch.h_q - arch.h_kv) if arch.h_kv < arch.h_q else 0)
    out.add("sliding window: mask and k, v at every head (per windowed layer)", extra * arch.window_layers // arch.L,
            0, True)  # fmt: skip


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
