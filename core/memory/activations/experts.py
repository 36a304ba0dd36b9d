"""What a mixture-of-experts MLP saves for backward (`moe_saved`): the router, the routed experts as transformers
runs them (``strategy.experts``: grouped_mm, the per-expert loop or batched_mm) and the shared experts; the block
around it is `core.memory.activations.block`'s."""

from __future__ import annotations

from vramplan.core.memory.activations.context import ActCtx, Saved


def moe_saved(c: ActCtx, out: Saved) -> bool:
    """A mixture-of-experts MLP as transformers 5.24 runs it by default (``experts_implementation`` "grouped_mm",
    ``integrations/moe.py:grouped_mm_experts_forward``), or as ``strategy.experts`` says by the per-expert loop
    (`_experts_loop`) or batched_mm (`_experts_batched`). S = T x top_k (token, expert) pairs; measured tensor by
    tensor on the CPU (tests/data/moe_truth.json):

    - router (``*TopKRouter``): a copy of its input [T, h] (16-bit under autocast), the fp32 softmax [T, E], the
      int64 top-k indices, the fp32 renormalising sum [T, 1] and the fp32 top-k values; under autocast its 16-bit
      weight copy [h, E] (2 E h bytes).
    - experts: perm, perm // k and inv_perm (int64 [S] each), int32 offsets [E], the gathered input [S, h], the
      up/gate output [S, 2 i], act(gate) and the product [S, i] each, the routing weights [S] (compute dtype) and
      the down output [S, h]. ``_grouped_mm`` is no autocast op and transformers casts its input to the weight's
      dtype, so under autocast this path runs and saves in the weights' fp32 and makes no 16-bit weight copies.
    - shared expert(s) (Qwen2-MoE, DeepSeek-V3): a dense SwiGLU of their summed width, saved as a dense MLP."""
    arch, T = c.arch, c.T
    moe = arch.moe
    assert moe is not None
    E, k, h, i = moe.n_experts, moe.top_k, arch.h, moe.expert_f
    S, C, W = T * k, c.reg.act_bytes, c.reg.weight_bytes
    full = c.full  # frozen experts and router (LoRA): no weight gradients, so no inputs kept for them
    if full:
        out.add("router: input copy", C * T * h, T * h, False)
    fam = arch.fam
    if fam.all_experts:  # Llama4Router: topk of the logits scattered into -inf, an fp32 sigmoid over all E
        out.add("router: top-k indices (int64), fp32 sigmoid of the scattered scores", 8 * S + 4 * T * E, T * E, False)
    elif fam.router_softmax_topk:  # gpt-oss GptOssTopKRouter: topk(logits), softmax of the k values (logits' dtype)
        out.add("router: top-k indices (int64), softmax of the top-k logits", 8 * S + C * S, S, False)
    else:
        out.add("router: fp32 softmax, top-k indices, sum and values", 4 * T * E + 8 * S + 4 * T + 4 * S, T * E, False)
    if c.reg.compute == "autocast":  # the router's bf16 weight copy [h, E] (measured: TBackward0 param_copy)
        out.copies += 2 * E * h
        out.cache += 2 * E * h
    if fam.all_experts:
        _experts_all(c, out)
    elif c.experts == "loop":
        _experts_loop(c, out)
    elif c.experts == "batched":
        _experts_batched(c, out)
    else:
        # expert biases (gpt-oss) are gathered per (token, expert) pair: one more int64 [S] index for their gradient
        n_idx = 4 if moe.expert_bias else 3
        out.add("experts: perm, perm // k, inv_perm (int64), bias index and offsets", n_idx * 8 * S + 4 * E, 0, True)
        # frozen experts (LoRA on attention) keep one [S, h] of the two (measured: qwen3moe_lora_qv)
        n_sh = 2 if full else 1
        out.add("experts: gathered input and down output", n_sh * W * S * h, n_sh * S * h, True)
        if fam.clamped_swiglu:
            # gpt-oss GptOssExperts._apply_gate: clamp saves the gate_up output [S, 2i] it slices; sigmoid(alpha gate)
            # its output, gate * sigmoid the clamped gate, (up + 1) * glu both factors, down the product: 5 [S, i]
            out.add(
                "experts: gate_up output, clamped gate, sigmoid, glu, up + 1, product", W * S * 7 * i, S * 7 * i, True
            )
        else:
            out.add("experts: gate/up output, act(gate), product", W * S * 4 * i, S * 4 * i, True)
    if not fam.all_experts:
        out.add("experts: routing weights", C * S, S, True)
    if moe.shared_f:  # reads the router's input; saves gate and up outputs, the activation's output, the product
        f = moe.shared_f
        out.add("shared expert: gate and up outputs, activation output, product", 4 * C * T * f, 4 * T * f, True)
        if full and c.reg.compute == "autocast":  # its gate and up linears each cast the fp32 input (measured)
            out.add("shared expert: bf16 copies of input (gate, up)", 2 * 2 * T * h, 2 * T * h, False)
            out.copies += 2 * 3 * h * f
            out.cache += 2 * 3 * h * f
        if moe.shared_gate:
            out.add("shared expert gate: sigmoid [T, 1] and the gated output", C * (T + T * h), T * h, True)
    if c.experts == "grouped" and not fam.all_experts:
        out.work = max(out.work, W * S * 4 * i + 2 * c.reg.resid_bytes * T * h)
    return True


def _experts_all(c: ActCtx, out: Saved) -> None:
    """Llama 4 (transformers ``Llama4TextMoe.forward``, ``Llama4TextExperts.forward``): every routed expert runs on
    every token, the tokens off an expert's top-k scaled by a score of 0. The MoE input [T, h] (the norm's output:
    the residual dtype) is repeated E times; the product with the scores' column [E T, 1] (a copy of the transposed
    scores, compute dtype) saves both; ``bmm`` with ``gate_up_proj`` [E, h, 2 i] saves its input (under autocast
    its 16-bit cast; a frozen expert weight needs none) and gives gate/up [E, T, 2 i], which SiLU saves; act(gate)
    and the product [E, T, i] are saved by the multiply and the down ``bmm``. The summed output saves nothing.
    Under autocast, both 3-D weights' 16-bit copies (2 x 3 E h i bytes, cached for the forward). E x T rows in all:
    at E = 16 sixteen times the rows of a top-1 dispatch."""
    arch, T = c.arch, c.T
    moe = arch.moe
    assert moe is not None
    E, h, i = moe.n_experts, arch.h, moe.expert_f
    C, R = c.reg.act_bytes, c.reg.resid_bytes
    rows = E * T
    out.add("experts (all tokens): the repeated input, and the scores' column", R * rows * h + C * rows, rows * h, True)
    if c.full:
        out.add("experts (all tokens): gate_up bmm's input", C * rows * h, rows * h, True)
    out.add("experts (all tokens): gate/up output, act(gate), product", C * rows * 4 * i, rows * 4 * i, True)
    if c.reg.compute == "autocast":
        copies = 2 * 3 * E * h * i
        out.copies += copies
        if c.full:
            out.cache += copies
        else:
            out.frozen_copies += copies
    out.work = max(out.work, C * rows * 4 * i + R * rows * h)


def _experts_loop(c: ActCtx, out: Saved) -> None:
    """The routed experts run one by one (``experts_implementation = "eager"``: transformers 5.24's
    ``Qwen3MoeExperts.forward`` and the other families' experts classes; transformers 4.x's sparse MoE blocks loop
    the same way over a ModuleList). For each expert hit, ``torch.where`` on the one-hot mask gives its rows; the
    gathered rows go through the expert's linears on a slice of the 3-D weight; the output, scaled by the routing
    weights, is summed in by ``index_add_``. Measured tensor by tensor on the CPU (tests/data/moe_truth.json, the
    ``*_eager_experts`` cases), summed over the experts (S = T x top_k rows in all):

    - int64 row indices [S] (saved by the gather and by ``index_add_``), each a view of ``torch.where``'s
      ``nonzero`` result [rows, 2], which it keeps whole: 16 bytes a row;
    - in the compute dtype: the gathered input [S, h] (under autocast the linear's own 16-bit cast of it), the
      gate/up output [S, 2 i], act(gate) and the product [S, i] (gpt-oss's clamped SwiGLU: 7 [S, i] in all) and
      the down output [S, h] (the routing multiply's operand);
    - the scaled output [S, h] in the hidden states' dtype (``index_add_`` keeps its source: the
      ``.to(hidden dtype)`` copy under autocast);
    - under autocast, each expert's 16-bit weight copies (a slice of the 3-D parameter is no leaf, so autocast
      does not cache them: made in every forward and recompute, saved for backward): 2 x 3 h i bytes per expert.

    Frozen experts (LoRA on attention) keep neither the gathered input nor the down output (no weight gradient,
    and the routing weights need none): not measured."""
    arch, T = c.arch, c.T
    moe = arch.moe
    assert moe is not None
    E, k, h, i = moe.n_experts, moe.top_k, arch.h, moe.expert_f
    S, C, R = T * k, c.reg.act_bytes, c.reg.resid_bytes
    n_i = 7 if arch.fam.clamped_swiglu else 4
    out.add("experts (loop): row indices (int64, each a view of torch.where's [rows, 2] result)", 16 * S, 0, True)
    if c.full:
        out.add("experts (loop): gathered input and down output", 2 * C * S * h, 2 * S * h, True)
    label = (
        "gate_up output, clamped gate, sigmoid, glu, up + 1, product" if n_i == 7 else "gate/up output, act, product"
    )
    out.add(f"experts (loop): {label}", C * S * n_i * i, S * n_i * i, True)
    out.add("experts (loop): scaled output (index_add_'s source)", R * S * h, S * h, True)
    if c.reg.compute == "autocast":
        copies = 2 * 3 * h * i * min(E, S)  # the experts that get a row
        out.copies += copies
        if not c.full:
            out.frozen_copies += copies
    out.work = max(out.work, C * S * 4 * i + 2 * R * T * h)


def _experts_batched(c: ActCtx, out: Saved) -> None:
    """``experts_implementation = "batched_mm"`` (transformers integrations/moe.py ``batched_mm_experts_forward``):
    each (token, expert) pair gathers its expert's weights, ``gate_up_proj[expert_ids]`` [S, 2 i, h] and
    ``down_proj[expert_ids]`` [S, h, i], and ``bmm`` saves them for backward (under autocast its 16-bit casts):
    3 h i weights per pair. Beside them: the repeated input [S, h], the gate/up output, act(gate) and the product,
    and the down output [S, h] (the routing multiply's operand); the expert ids are a view of the router's top-k
    indices. An inference path: in training the gathered weights dwarf everything else (measured:
    qwen3moe_batched_mm, 157 MB against 6 MB)."""
    arch, T = c.arch, c.T
    moe = arch.moe
    assert moe is not None
    k, h, i = moe.top_k, arch.h, moe.expert_f
    S, C = T * k, c.reg.act_bytes
    n_i = 7 if arch.fam.clamped_swiglu else 4
    out.add("experts (batched_mm): each pair's gathered expert weights", C * S * 3 * h * i, S * 3 * h * i, True)
    out.add("experts (batched_mm): repeated input and down output", 2 * C * S * h, 2 * S * h, True)
    out.add("experts (batched_mm): gate/up output, act, product", C * S * n_i * i, S * n_i * i, True)
    # backward: the down bmm makes its gathered weights' gradient [S, h, i]; by the gate/up bmm's [S, 2i, h] the
    # down's gathered weights and their gradient are freed: one S h i above what is saved, either way
    out.work = max(out.work, C * S * h * i + C * S * 4 * i + 2 * c.reg.resid_bytes * T * h)
