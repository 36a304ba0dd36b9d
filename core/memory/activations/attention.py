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
    if arch.mla is not None and c.full and not c.selective and not c.compiled and not c.float8:
        return _mla_saved(c, out, n_bytes)
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
            if arch.mask_per_layer or c.padded_mask:
                # aten/src/ATen/native/transformers/attention.cpp: SDPA converts a bool mask to the query's dtype
                # (convert_boolean_attn_mask) on every call and the kernel saves it as its bias
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


def _mla_saved(c: ActCtx, out: Saved, n_bytes: int) -> tuple[bool, bool]:
    """DeepSeek-V3's multi-head latent attention under SDPA, full fine-tuning (transformers 5.24
    models/deepseek_v3/modeling_deepseek_v3.py ``DeepseekV3Attention``; measured tensor by tensor on the CPU,
    tests/data/moe_truth.json deepseekv3_base and _bf16mixed, exact).

    - q_a_proj and kv_a_proj_with_mqa read the normed block input (under autocast each its own bf16 copy);
    - q_a_layernorm and kv_a_layernorm (RMSNorm as Llama's): an fp32 input (in fp32 the norm's input is a view of
      kv_a's whole [T, kv_lora + rope] output, so all of it stays), the fp32 rsqrt, the normalized tensor in the
      linear output's dtype; q_b_proj and kv_b_proj keep their input (autocast: a bf16 copy of the fp32 norm output);
    - q and k are new [b, a, s, nope + rope] tensors (RoPE part concatenated); v is a view of kv_b's output.
    - The core: q/k and v head dims differ, so PyTorch's flash kernel does not take it. On CUDA the
      memory-efficient kernel does (q, k, v as given, the output, fp32 log-sum-exp; v's view keeps kv_b's whole
      [T, a (nope + v)] output): not measured, no GPU was lent. On the CPU (``cpu=True``) SDPA runs its math path,
      in fp32: scaled q and k, the probabilities [b, a, s, s] and a contiguous copy of v; o_proj reads a copy.
      Eager attention saves the same in the compute dtype (plus autocast's 16-bit copy of the probabilities).
    Returns whether o_proj's output requires grad and whether the block input's norm output is saved."""
    arch, reg = c.arch, c.reg
    mla = arch.mla
    assert mla is not None
    b, s, T, a, h = c.b, c.s, c.T, arch.a, arch.h
    C = reg.act_bytes
    autocast = reg.compute == "autocast"
    lin_in = 2 if autocast else C
    n_in = 2 if mla.q_lora else 1  # linears reading the block's normed input
    if autocast and n_bytes == 4:
        out.add("q_a / kv_a: bf16 copies of input", n_in * 2 * T * h, n_in * T * h, False)
    else:
        out.add("q_a / kv_a input", n_bytes * T * h, T * h, False)
    weights = h * (mla.kv_lora + mla.rope) + mla.kv_lora * a * (mla.nope + mla.v)
    if mla.q_lora:
        ql = mla.q_lora
        weights += h * ql + ql * a * mla.qk_head
        out.add("q_a_layernorm: fp32 input + rsqrt", 4 * T * ql + 4 * T, T * ql + T, True)
        out.add("q_a_layernorm: normalized", C * T * ql, T * ql, True)
        out.add("q_b_proj input", lin_in * T * ql, T * ql, True)
    else:
        weights += h * a * mla.qk_head
    kvl = mla.kv_lora
    kv_in = 4 * T * (kvl + mla.rope) if C == 4 else 4 * T * kvl
    out.add("kv_a_layernorm: fp32 input + rsqrt", kv_in + 4 * T, T * kvl + T, True)
    out.add("kv_a_layernorm: normalized", C * T * kvl, T * kvl, True)
    out.add("kv_b_proj input", lin_in * T * kvl, T * kvl, True)
    if autocast:
        out.copies += 2 * weights
        out.cache += 2 * weights
    dq, dv = mla.qk_head, mla.v
    S = 4 if reg.compute == "fp32" else 2
    if c.eager:  # eager_attention_forward: q and k for the scores, fp32 softmax (+ a 16-bit copy), v as bmm copies it
        p2 = b * a * s * s
        out.add("eager attention: q and k (nope + rope)", 2 * S * T * a * dq, 2 * T * a * dq, True)
        out.add("softmax probabilities (fp32)", 4 * p2, p2, True)
        if S == 2:
            out.add("16-bit copy of the probabilities", 2 * p2, p2, True)
        out.add("v (a contiguous copy for the product)", S * T * a * dv, T * a * dv, True)
        o_bytes, o_shared = C, False
    elif c.cpu:
        out.add("SDPA math path (CPU): scaled q and k (fp32)", 2 * 4 * T * a * dq, 2 * T * a * dq, True)
        out.add("SDPA math path (CPU): probabilities (fp32)", 4 * b * a * s * s, b * a * s * s, True)
        out.add("SDPA math path (CPU): contiguous v (fp32)", 4 * T * a * dv, T * a * dv, True)
        o_bytes, o_shared = C, False
    else:
        out.add("attention q, k (nope + rope)", 2 * S * T * a * dq, 2 * T * a * dq, True)
        out.add("attention v (a view of kv_b's output)", C * T * a * (mla.nope + dv), T * a * (mla.nope + dv), True)
        out.add("attention output", S * T * a * dv, T * a * dv, True)
        out.add("efficient-attention log-sum-exp (fp32)", 4 * b * a * s, b * a * s, True)
        o_bytes, o_shared = S, True
    rg_o, _ = linears_saved(c, out, ("o",), o_bytes, True, o_shared, True)
    return rg_o["o"], not autocast


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
    # gpt-oss attention sinks (modeling_gpt_oss.py eager_attention_forward): a sink logit per head is concatenated
    # to the scores, the row max subtracted (max saves int64 indices [b, a, s, 1]), the softmax runs over s + 1
    p_soft = b * a * s * (s + 1) if arch.fam.sinks else p2
    if arch.fam.sinks and qk_rg:
        out.add("attention sinks: row-max indices (int64)", 8 * b * a * s, b * a * s, True)
    if arch.fam.softcap and qk_rg:
        # Gemma 2 (modeling_gemma2.py eager_attention_forward): scores / cap, tanh, * cap; the divisions and the
        # product by a Python scalar save nothing, tanh saves its output in the scores' dtype (bf16 under autocast:
        # tanh is not on autocast's fp32 list). Measured: TanhBackward0 [b, a, s, s] (tests/data/moe_truth.json)
        out.add("soft-capped scores: tanh output", S * p2, p2, True)
    if reg.compute == "fp32":
        if qk_rg or v_rg:
            out.add("softmax probabilities (fp32)", 4 * p_soft, p_soft, True)
    else:
        if qk_rg:
            out.add("softmax probabilities (fp32)", 4 * p_soft, p_soft, True)
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
