"""FSDP1's flat parameters: what ``FullyShardedDataParallel`` keeps where FSDP2 and DeepSpeed shard each parameter.

`core.memory.states.model_states` shards every parameter on its own (FSDP2 ``fully_shard``: a DTensor
``Shard(0)`` per parameter; DeepSpeed ZeRO-3: a partition per parameter), which is ``strategy.fsdp_version = 2``
and vramplan's custom stack. FSDP1 (``strategy.fsdp_version = 1``) flattens each wrapped unit (a block; the root:
what no block holds, the embedding, the final norm and the lm_head) into one ``FlatParameter``
(torch/distributed/fsdp/_flat_param.py), and that changes four things:

- **padding**: the unit's parameters are concatenated, each aligned to 16 bytes when ``use_orig_params=True``
  (``_get_aligned_numel``), and the whole padded to a multiple of the world size (`flat_param_numel`);
- **the gradient covers the whole unit**: ``requires_grad`` of the FlatParameter is the OR over its parameters
  (``_validate_tensors_to_flatten``), so LoRA adapters in a block's unit (``strategy.fsdp_adapter_wrap =
  "block"``: Lightning's FSDPStrategy with ``use_orig_params=True``) give the block a gradient as large as the
  block, frozen parts zero, unsharded until its reduce-scatter and then a shard of unit / world size. PyTorch warns
  of it (torch/distributed/fsdp/fully_sharded_data_parallel.py, FullyShardedDataParallel's docstring: "For
  ``use_orig_params=True``, FSDP supports mixing frozen and non-frozen parameters, but it's recommended to avoid
  doing so to prevent higher than expected gradient memory usage");
- **in flight**: ``limit_all_gathers=True`` (the default) lets at most two units be unsharded at once (the one
  computing and the one prefetched), and the root unit is not resharded after forward (_runtime_utils.py
  ``_post_forward_reshard``: ``free_unsharded_flat_param = not state._is_root and ...``), so its unsharded flat
  parameter stays from the embedding's forward to the end of backward;
- gradients are reduce-scattered per unit (``_post_backward_hook``): the unit's unsharded flat gradient, in the
  parameter dtype, exists until then.

FSDP2's ``reshard_after_forward=False`` and FSDP1's ``SHARD_GRAD_OP`` keep the unsharded parameters from forward to
backward: that is ``strategy.zero_stage = 2`` (parameters whole, gradients and optimizer states sharded).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.record import StateCtx, States
from vramplan.core.memory.states.stages import Stage
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.precision import Regime, quantized_bytes

ALIGNMENT_BYTES = 16  # torch/distributed/fsdp/_flat_param.py _get_aligned_numel: "comes from TorchInductor"


def flat_param_numel(numels: tuple[int, ...], world: int, align: int) -> int:
    """Elements of one unit's unsharded FlatParameter, padding included (always a multiple of ``world``).

    _flat_param.py ``FlatParamHandle._init_flat_param_and_metadata``: with ``use_orig_params=True`` (``align`` =
    16 B / element size) each parameter starts at a multiple of ``align`` (``numel_to_pad = aligned_numel -
    (total_numel % aligned_numel)``), then ``numel_to_pad = world_size - (total_numel % world_size)``; with
    ``use_orig_params=False`` (``align = 0``) ``_get_shard`` pads ``chunk(world_size)`` to ceil(N / world) per rank."""
    total = 0
    for n in numels:
        if align:
            total += -total % align
        total += n
    return -(-total // world) * world


class FlatUnits(NamedTuple):
    """One stage's FSDP1 units, each as its padded FlatParameter elements."""

    block: int  # one block's unit (its adapters too when they share it)
    adapters: int  # one block's adapter units of their own (``fsdp_adapter_wrap = "own"``), all together
    root: int  # the root unit: embedding, final norm, lm_head (what this stage holds of them)
    trainable_block: bool  # the block's FlatParameter requires grad


def block_tensors(
    arch: Arch, tp: int, quantized: tuple[str, ...], quantization: str, double_quant: bool, elem: int
) -> tuple[int, ...]:
    """A block's frozen or trained tensors as elements of the unit's dtype (``elem`` bytes): each linear's weight
    and bias, the norms (one [h] tensor each), the other parameters (MoE experts and router) as one tensor; a
    4-bit linear as its stored bytes over ``elem`` (bitsandbytes' ``quant_storage`` in the unit's dtype, as FSDP
    requires)."""
    out: list[int] = []
    for lin in arch.linears:
        if lin.role in quantized:
            out.append(quantized_bytes(lin.d_in, lin.d_out, quantization, double_quant) // tp // elem)
        else:
            out.append(lin.weight_params // tp)
        if lin.bias:
            out.append(lin.d_out // tp)
    norms, h = arch.layer_norm_params, arch.h
    out += [h] * (norms // h) + ([norms % h] if norms % h else [])
    extra = arch.layer_extra_params(1) // tp
    return tuple(out) + ((extra,) if extra else ())


@memoised(256)
def flat_units(
    arch: Arch,
    stage: Stage,
    *,
    tp: int,
    world: int,
    elem: int,
    lora: tuple[tuple[int, int], ...],
    adapter_wrap: str,
    quantized: tuple[str, ...],
    quantization: str,
    double_quant: bool,
) -> FlatUnits:
    """The units FSDP1 makes of one stage: ``lora`` is each adapted linear's (A, B) elements (empty: full
    fine-tuning). ``adapter_wrap = "block"`` puts them in the block's unit (``use_orig_params=True``, so 16-byte
    alignment); ``"own"`` wraps each adapter linear alone (PEFT's ``fsdp_auto_wrap_policy`` wraps each trainable
    leaf module; accelerate's default ``use_orig_params=False``: no alignment)."""
    shared = adapter_wrap == "block" and bool(lora)
    align = ALIGNMENT_BYTES // elem if shared else 0
    tensors = block_tensors(arch, tp, quantized, quantization, double_quant, elem)
    adapters = tuple(n for pair in lora for n in pair)
    block = flat_param_numel(tensors + (adapters if shared else ()), world, align)
    own = 0 if shared else sum(flat_param_numel((n,), world, 0) for n in adapters)
    vocab = arch.V * arch.h // tp
    root: list[int] = []
    if stage.first:
        root += [vocab] + ([arch.embed_extra_params] if arch.embed_extra_params else [])
    if stage.last:
        root += [arch.norm_params] + ([vocab] if (not arch.tied or not stage.first) else [])
    root_numel = flat_param_numel(tuple(root), world, align) if root else 0
    return FlatUnits(block=block, adapters=own, root=root_numel, trainable_block=shared or not lora)


def fsdp1_states(st: States, units: FlatUnits, stage: Stage, reg: Regime, *, zero: int, dp: int, full: bool) -> States:
    """`model_states`' result with FSDP1's flat parameters (module docstring): each unit's shard is its padded
    FlatParameter / world size (parameters under ZeRO-3, gradients under ZeRO-2/3); a block's gradient, while
    unsharded, is its whole FlatParameter when it requires grad (frozen parts included), its adapters' units
    otherwise; two units unsharded in flight plus the root, kept from forward to backward.

    Bytes: parameters in the regime's weight dtype, gradients in ``st.grad_bytes`` (the parameter dtype), the
    unsharded copies in the compute dtype (FSDP MixedPrecision ``param_dtype``) for full fine-tuning and as stored
    for a frozen base, as `model_states` counts them. What no_sync holds between micro-batches (``grads_whole``) is
    each unit's unsharded gradient as autograd made it, in the unsharded FlatParameter's dtype: _runtime_utils.py
    ``_post_backward_hook`` returns before the cast to ``reduce_dtype`` when ``_sync_gradients`` is off."""
    n, g, w = stage.layers, st.grad_bytes, reg.weight_bytes
    block_g = units.block if units.trainable_block else units.adapters
    root_g = units.root if full else 0
    grads = (n * block_g + root_g) * g
    params = st.params
    if zero >= 3 and st.params:  # (offloaded parameters stay off the GPU)
        params = (n * (units.block + units.adapters) + units.root) * w // dp
    gathered = st.gathered
    unsharded = (4 if reg.compute == "fp32" else 2) if full else w
    if zero >= 3:
        gathered = (2 * (units.block + units.adapters) + units.root) * unsharded
    return st._replace(
        params=params,
        grads=grads // dp if st.grads else 0,
        gathered=gathered,
        layer_grad=block_g * g,
        head_grad=root_g * g if stage.last else 0,
        grad_shards_pool=grads // dp if st.grad_shards_pool else 0,
        grads_whole=(n * block_g + root_g) * (unsharded if full else g) if st.grads else 0,
        gather_pool=0,  # FSDP1 all-gathers into the padded flat parameter itself (not FSDP2's staging buffers)
    )


def flat_states(sc: StateCtx, stage: Stage, st: States) -> States:
    """``st`` under FSDP1: the stage's units as padded FlatParameters (`flat_units`, `fsdp1_states`)."""
    arch, tp, quant = sc.arch, sc.tp, sc.quantization
    lora = tuple(
        (sc.lora_rank * lin.d_in // tp, sc.lora_rank * lin.d_out // tp)
        for lin in arch.linears
        if lin.role in sc.lora_roles
    )
    adapted = sc.quantized_modules == "adapted"
    quantized = tuple(
        lin.role for lin in arch.linears if quant != "none" and (not adapted or lin.role in sc.lora_roles)
    )
    units = flat_units(
        arch,
        stage,
        tp=tp,
        world=sc.dp,
        elem=sc.reg.weight_bytes,
        lora=lora,
        adapter_wrap=sc.adapter_wrap,
        quantized=quantized,
        quantization=quant,
        double_quant=sc.double_quant,
    )
    return fsdp1_states(st, units, stage, sc.reg, zero=sc.zero, dp=sc.dp, full=sc.full)
