"""Dropout in training: the masks it saves and the dropped copy of the attention probabilities.

The model config's dropout probabilities (`core.plan.architecture.config.ModelConfig` ``attention_dropout``,
``hidden_dropout``, ``embedding_dropout``; GPT-2's ``attn_pdrop``, ``resid_pdrop``, ``embd_pdrop``) apply in
training (``module.training``):

- On CUDA ``F.dropout`` is ``native_dropout`` (aten/src/ATen/native/Dropout.cpp ``is_fused_kernel_acceptable``:
  CUDA input, 0 < p < 1), which returns the output and a bool mask of the input's shape; autograd keeps only the
  mask (tools/autograd/derivatives.yaml ``native_dropout``: ``native_dropout_backward(grad, result1, scale)``):
  1 byte per element. The output is what the next op saves, if it saves its input.
- On the CPU (the measurements in tests/data) ``F.dropout`` is the composite ``input * noise``
  (Dropout.cpp ``_dropout_impl``: ``noise = at::empty_like(input).bernoulli_(1 - p)``, divided by 1 - p) and
  ``mul`` saves ``noise``, in the input's dtype.
- Attention probabilities (eager attention: transformers' ``eager_attention_forward``, e.g. modeling_gpt2.py and
  modeling_llama.py: ``attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)``
  before ``matmul(attn_weights, value)``; SDPA's math path likewise): a [b, a, s, s] mask, and the AV matmul saves
  the dropped probabilities instead of the softmax's output. Where the softmax's output fed the matmul directly
  (fp32; GPT-2's bf16 softmax) that is a new tensor, beside the softmax's own saved output; where a 16-bit copy
  fed it (``.to(query.dtype)``, autocast), the dropped tensor takes the copy's place. Under SDPA's flash and
  memory-efficient kernels the dropout is applied inside the kernel, which keeps its Philox seed and offset
  (aten/src/ATen/native/transformers/cuda/attention.cu ``_scaled_dot_product_flash_attention_cuda``:
  ``philox_seed, philox_offset``), not a mask: nothing [s, s] is kept. (PyTorch's CPU SDPA takes its math path
  when dropout_p > 0: not modelled for ``cpu=True``.)
- Residual dropout (GPT-2 ``resid_dropout`` after c_proj and the MLP's ``dropout``; GPT-NeoX
  ``post_attention_dropout`` and ``post_mlp_dropout``): a [tokens, h] mask each; the output goes into the residual
  add, which saves nothing. Embedding dropout (GPT-2 ``drop``, GPT-NeoX ``emb_dropout``): one [tokens, h] mask per
  micro-batch; its output is the first block's input, saved by that block's norm as before.

Under full checkpointing the blocks' masks are recomputed with the block (the checkpoint keeps the RNG state), like
everything else the block saves; the embedding's stays.
"""

from __future__ import annotations

from vramplan.core.memory.activations.context import ActCtx, Saved

# the families that drop the output of each sublayer before its residual add (modeling_gpt2.py GPT2Attention
# resid_dropout and GPT2MLP dropout; modeling_gpt_neox.py GPTNeoXLayer post_attention_dropout and post_mlp_dropout)
RESIDUAL_DROPOUT_FAMILIES: frozenset[str] = frozenset({"gpt2", "gpt_neox"})


def mask_bytes(c: ActCtx, input_bytes: int) -> int:
    """Bytes per element of a dropout mask: bool on CUDA (``native_dropout``), the input's dtype on the CPU."""
    return input_bytes if c.cpu else 1


def _role_rg(c: ActCtx, role: str, in_rg: bool) -> bool:
    """Whether a projection's output requires grad: its input does, its weight trains, or it has an adapter."""
    return in_rg or c.full or role in c.lora


def attention_dropout_saved(c: ActCtx, out: Saved, in_rg: bool) -> None:
    """Attention dropout's mask (when the probabilities require grad: q or k does) and the dropped probabilities
    the AV matmul saves (when v requires grad), where they are a new tensor; ``in_rg``: the attention's input
    (the norm's output) requires grad."""
    arch, reg = c.arch, c.reg
    if not c.attn_dropout or c.selective or c.op or not (c.eager or arch.attn_math):
        return
    if arch.fam.fused_qkv:
        qk_rg = v_rg = _role_rg(c, "qkv", in_rg)
    else:
        qk_rg = _role_rg(c, "q", in_rg) or _role_rg(c, "k", in_rg)
        v_rg = _role_rg(c, "v", in_rg)
    p2 = c.b * arch.a * c.s * c.s
    P = 4 if reg.compute == "fp32" else 2  # the probabilities the matmul reads
    if qk_rg:
        out.add("attention dropout mask", mask_bytes(c, P) * p2, p2, True)
    no_cast = reg.compute == "fp32" or (reg.compute == "half" and arch.fam.model_type in ("gpt2", "falcon"))
    if qk_rg and v_rg and (no_cast or (arch.attn_math and not c.eager)):
        out.add("attention probabilities after dropout (the AV matmul's input)", P * p2, p2, True)


def residual_dropout_saved(c: ActCtx, out: Saved, sublayer: str, out_rg: bool) -> None:
    """Residual dropout's [tokens, h] mask of one sublayer's output (attention's or the MLP's), in the output's
    dtype on the CPU."""
    if not c.resid_dropout or not out_rg or c.arch.fam.model_type not in RESIDUAL_DROPOUT_FAMILIES:
        return
    n = c.T * c.arch.h
    out.add(f"{sublayer} residual dropout mask", mask_bytes(c, c.reg.act_bytes) * n, n, False)


def embedding_dropout_saved(c: ActCtx, out: Saved, out_rg: bool) -> None:
    """Embedding dropout's [tokens, h] mask (the embedding's output dtype on the CPU), once per micro-batch."""
    if not c.embed_dropout or not out_rg or c.arch.fam.model_type not in RESIDUAL_DROPOUT_FAMILIES:
        return
    n = c.T * c.arch.h
    out.add("embedding dropout mask", mask_bytes(c, c.reg.resid_bytes) * n, n, False)
