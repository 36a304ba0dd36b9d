"""Model states per GPU: parameters, gradients, optimizer states, and where ZeRO, TP, PP and offload put them.

Sharding follows the ZeRO paper (Rajbhandari et al. 2020, §5): stage 1 partitions optimizer states (and the
fp32 master weights) over the data-parallel group, stage 2 also gradients, stage 3 also parameters. FSDP maps
onto it: ``FULL_SHARD`` = ZeRO-3, ``SHARD_GRAD_OP`` = ZeRO-2, ``NO_SHARD`` = 0 (DDP). Tensor parallelism splits the
block linears, the embedding and the lm_head (Megatron column/row-parallel and vocab-parallel layers,
Shoeybi et al. 2019) and replicates the norms. Pipeline stage 0 holds the embedding, the last stage the final
norm and lm_head (and, when tied, a copy of the embedding: Megatron ``setup_embeddings_and_output_layer``).
Offload moves the optimizer partition (fp32 master, states, fp32 gradients) to the host (DeepSpeed
ZeRO-Offload, Ren et al. 2021) and with ZeRO-3 the 16-bit parameter partition too (ZeRO-Infinity).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.architecture.arch import Arch, lora_params_per_layer
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.precision import (
    INT8_BLOCK,
    MIN_8BIT_ELEMENTS,
    OPTIMIZERS,
    PAGED_MIN_ELEMENTS,
    OptimizerSpec,
    Regime,
    quantized_bytes,
    resolve_impl,
)


class Stage(NamedTuple):
    """The part of the model one pipeline stage holds (before ZeRO), per tensor-parallel rank."""

    first: bool
    last: bool
    layers: int
    in_flight: int  # micro-batches whose activations this stage holds at once (1F1B schedule)


@memoised(256)
def stages(L: int, pp: int, grad_accum: int) -> tuple[Stage, ...]:
    """Stage 0 and the last stage bound every other one: stage 0 has the most micro-batches in flight (``p``
    with 1F1B, Narayanan et al. 2021 §2.2; fewer if there are fewer micro-batches), the last has the head."""
    per = -(-L // pp)
    if pp == 1:
        return (Stage(first=True, last=True, layers=L, in_flight=1),)
    return (
        Stage(first=True, last=False, layers=per, in_flight=min(pp, grad_accum)),
        Stage(first=False, last=True, layers=per, in_flight=1),
    )


class States(NamedTuple):
    params: int  # bytes on this GPU between steps
    grads: int  # gradient bytes this GPU keeps (full, or its ZeRO-2/3 partition)
    optimizer: int  # optimizer states (and fp32 master weights) on this GPU
    optimizer_temp: int  # transient of the optimizer step
    gathered: int  # ZeRO-3: unsharded parameters (+ gradients) of the modules being computed
    layer_grad: int  # gradient bytes one block produces in backward (before any ZeRO reduce-scatter)
    head_grad: int  # gradient bytes of the lm_head / tied embedding produced in backward
    cpu: int  # host RAM of this rank (offload)
    nvme: int  # NVMe bytes of this rank (offload)
    params_local: int  # parameters this rank computes with (after TP/PP, before ZeRO-3)
    trainable_local: int
    grad_bytes: int  # bytes per gradient element
    paged: int = 0  # optimizer states in CUDA unified memory (bitsandbytes paged): outside PyTorch's allocator
    largest_grad: int = 0  # the largest trainable tensor's gradient (the optimizer step in backward keeps one)
    reduce_extra: int = 0  # FSDP2 bf16-fsdp: a block's bf16 gradients beside their fp32 reduce-scatter copy
    grad_shards_pool: int = 0  # FSDP2: fp32 gradient shards, allocated in the reduce-scatter stream's pool
    grads_whole: int = 0  # this rank's gradient bytes before ZeRO-2/3 sharding (what FSDP's no_sync holds)
    gather_pool: int = 0  # FSDP2: all-gather buffers, allocated in the all-gather copy-in stream's pool
    head_held: int = 0  # FSDP2 root unit: the lm_head's unsharded gradient, held until the end of backward
    root_reduce: int = 0  # FSDP2 root unit at the end of backward: its unsharded gradients + reduce-scatter input


@memoised(1024)
def model_states(
    arch: Arch,
    stage: Stage,
    reg: Regime,
    *,
    method: str,
    lora_roles: tuple[str, ...],
    lora_rank: int,
    quantization: str,
    double_quant: bool,
    optimizer: str,
    optimizer_impl: str,
    zero: int,
    dp: int,
    tp: int,
    offload_optimizer: str,
    offload_params: str,
    lora_dtype: str = "fp32",
    quantized_modules: str = "block-linears",
    ep: int = 1,
    fsdp2: bool = False,
) -> States:
    """Bytes of weights, gradients and optimizer state held by one GPU of `stage`.

    Mixture of experts: a block holds its routed experts, routers and the other parameters its linears do not
    show (`Arch.layer_extra_params`); under expert parallelism ``ep`` (DeepSpeed-MoE, Rajbhandari et al. 2022;
    Megatron-Core expert parallel) a rank holds 1/ep of the experts, and ZeRO shards the experts' states over the
    expert-data-parallel group of dp / ep ranks (the rest over dp).

    ``fsdp2``: ZeRO-3 is FSDP2's ``fully_shard`` (per-block units and a root unit; `fsdp2_all_gather_pool`); the
    ``bf16-fsdp`` regime implies it."""
    V, h, n = arch.V, arch.h, stage.layers
    lin_w = arch.layer_weight_params // tp + arch.layer_extra_params(ep) // tp
    lin_b = arch.layer_bias_params // tp
    norms = arch.layer_norm_params
    ex_local = n * arch.expert_params // (arch.L * ep * tp)  # routed experts this rank holds
    vocab = V * h // tp
    embed = (vocab + arch.embed_extra_params) if stage.first else 0  # + BLOOM's norm, GPT-2's positions
    head = (arch.norm_params + (vocab if (not arch.tied or not stage.first) else 0)) if stage.last else 0
    params_local = embed + n * (lin_w + lin_b + norms) + head
    spec = OPTIMIZERS[optimizer]

    if method == "full":
        trainable = params_local
        w_bytes = trainable * reg.weight_bytes
        g_elem = reg.grad_bytes
        state_elem = 4 if spec.fp32_states else reg.state_bytes
        master = reg.master_bytes
        largest = max(vocab if (stage.first or stage.last) else 0, arch.max_linear_weight // tp)
        factored = _factored_elems(arch, tp, n, stage) if spec.factored else 0
        layer_train, head_train = lin_w + lin_b + norms, (vocab if stage.last else 0)
    else:
        lora_layer = lora_params_per_layer(arch, lora_roles, lora_rank) // tp
        trainable = n * lora_layer
        frozen = params_local
        frozen_bytes = reg.weight_bytes  # the frozen base as held (bf16-fsdp: fp32 shards)
        if quantization != "none":
            linears = [lin for lin in arch.linears if quantized_modules != "adapted" or lin.role in lora_roles]
            q = sum(quantized_bytes(lin.d_in, lin.d_out, quantization, double_quant) for lin in linears) // tp
            q_w = sum(lin.weight_params for lin in linears) // tp
            w_frozen = n * q + (frozen - n * q_w) * frozen_bytes
            layer_store = q + (lin_w - q_w + lin_b + norms) * frozen_bytes
            if quantized_modules == "all-linears" and stage.last and (not arch.tied or not stage.first):
                # Lightning's BitsandbytesPrecision replaces every nn.Linear, the lm_head too
                w_frozen -= vocab * frozen_bytes - quantized_bytes(h, V, quantization, double_quant) // tp
        else:
            w_frozen = frozen * frozen_bytes
            layer_store = (lin_w + lin_b + norms) * frozen_bytes
        # PEFT upcasts adapters to fp32 (autocast_adapter_dtype=True); torchtune and litgpt keep the model's 16 bit;
        # DeepSpeed's master regimes cast the whole model, adapters included, to 16 bit
        adapter = 2 if (reg.master_bytes or lora_dtype == "bf16") else 4
        w_bytes = w_frozen + trainable * adapter
        g_elem, master = adapter, reg.master_bytes
        state_elem = 4 if (adapter == 4 or master or spec.fp32_states) else 2  # torch AdamW: the param's dtype
        largest = max(
            (lora_rank * max(lin.d_in, lin.d_out) for lin in arch.linears if lin.role in lora_roles), default=0
        )
        factored = n * sum(lora_rank * 2 + lin.d_in + lin.d_out for lin in arch.linears if lin.role in lora_roles)
        params_local = frozen + trainable
        layer_train, head_train = lora_layer, 0

    # optimizer state per trainable element
    paged = 0
    if spec.factored:
        state_total = factored * state_elem
    elif spec.int8_states or spec.paged:
        tensors = trainable_tensors(arch, stage, tp, method, lora_roles, lora_rank)
        state_total, paged = _bnb_states(spec, tensors, state_elem)
    else:
        state_total = spec.dense_states * trainable * state_elem
    opt = trainable * master + state_total
    grads = trainable * g_elem

    shard_opt = dp if zero >= 1 else 1
    shard_grad = dp if zero >= 2 else 1
    shard_param = dp if zero >= 3 else 1
    ex_train = ex_local / max(params_local, 1) if method == "full" else 0.0  # experts' share of the trainable
    ex_held = ex_local / max(params_local, 1)
    opt_part = _sharded(opt, shard_opt, ex_train, ep)
    paged = _sharded(paged, shard_opt, ex_train, ep)
    grad_part = _sharded(grads, shard_grad, ex_train, ep)
    part_elems = _sharded(trainable, shard_opt, ex_train, ep)

    cpu = nvme = 0
    if offload_optimizer != "none":
        # DeepSpeed CPU Adam: fp32 master + fp32 states + fp32 gradient partition on the host
        host = part_elems * (4 + 4 + max(state_total // max(trainable, 1), 0)) if trainable else 0
        if offload_optimizer == "cpu":
            cpu += host
        else:
            nvme += host
            cpu += min(host, 4 * 100_000_000 * 4)  # pinned swap buffers: buffer_count 4 x buffer_size 1e8 x fp32
        opt_gpu = 0
        grad_gpu = grads if zero == 1 else 0
        temp = 0
    else:
        opt_gpu, grad_gpu = opt_part, grad_part
        impl = resolve_impl(optimizer_impl, reg)
        elem = state_elem
        if impl == "foreach":
            temp = spec.foreach_temps * part_elems * elem
        elif impl == "for-loop":
            temp = spec.loop_temps * (part_elems if zero >= 1 else largest) * elem
        else:
            temp = 0
        if master:
            temp += 4 * part_elems  # DeepSpeed: the partition's 16-bit gradients flattened into fp32 for the step
    reduce_extra = pool = 0
    if reg.name == "bf16-fsdp" and zero == 3 and dp > 1:
        # FSDP2 foreach_reduce (_fsdp_collectives.py): a block's unsharded bf16 gradients are copied into an fp32
        # reduce-scatter input; the fp32 output, whose views are the sharded .grad, lives in the reduce-scatter
        # stream's pool (reserved beside the default stream's peak)
        reduce_extra = 2 * (layer_train if method == "full" else 0)
        pool = grad_part
    param_gpu = _sharded(w_bytes, shard_param, ex_held, ep)
    if offload_params != "none":
        (cpu_add, nvme_add) = (param_gpu, 0) if offload_params == "cpu" else (0, param_gpu)
        cpu += cpu_add
        nvme += nvme_add
        param_gpu = 0
    gathered = gather_pool = head_held = root_reduce = 0
    if zero == 3 and dp > 1:
        # the module in use (the largest: a block or the vocabulary) + the next block prefetched, as stored for
        # compute: 16 bit under FSDP MixedPrecision / DeepSpeed, the quantized bytes of a QLoRA base
        if method == "full":
            elem = 4 if reg.compute == "fp32" else 2
            layer_b, vocab_b = (lin_w + lin_b + norms) * elem, vocab * elem
        else:
            layer_b, vocab_b = layer_store, vocab * frozen_bytes
        unit = max(layer_b, vocab_b if (stage.first or stage.last) else 0)
        gathered = unit + layer_b
        root = (vocab_b if stage.first else 0) + (vocab_b if stage.last and not arch.tied else 0)
        if reg.name == "bf16-fsdp":
            # FSDP2 fully_shard(model): the root group (embedding, final norm, output) is not resharded after
            # forward (_fsdp_state.py _lazy_init: post_forward_mesh_info = None for the root), so its bf16
            # weights stay gathered from the embedding's forward to the end of backward, beside a block and the
            # next one prefetched
            gathered = 2 * layer_b + root
            if method == "full":
                head_held = vocab * elem if stage.last else 0
                root_reduce = fsdp2_root_reduce(root // elem + norms_root(arch, stage), elem, 4)
        if fsdp2 or reg.name == "bf16-fsdp":
            # a LoRA/QLoRA base is all-gathered the same way, as it is stored; MixedPrecisionPolicy(param_dtype):
            # a cast copy of the shards
            mp = reg.name == "bf16-fsdp"
            norm_b = norms_root(arch, stage) * (elem if method == "full" else frozen_bytes)
            gather_pool = fsdp2_all_gather_pool(layer_b, root + norm_b, dp, cast=mp)
    return States(
        params=param_gpu,
        grads=grad_gpu,
        optimizer=opt_gpu,
        optimizer_temp=temp,
        gathered=gathered,
        layer_grad=layer_train * g_elem,
        head_grad=head_train * g_elem,
        cpu=cpu,
        nvme=nvme,
        params_local=params_local,
        trainable_local=trainable,
        grad_bytes=g_elem,
        paged=paged if offload_optimizer == "none" else 0,
        largest_grad=largest * g_elem // (dp if zero >= 2 else 1),
        reduce_extra=reduce_extra,
        grad_shards_pool=pool,
        grads_whole=unsharded_grads(grads, ex_train, ep) if grad_gpu else 0,
        gather_pool=gather_pool,
        head_held=head_held,
        root_reduce=root_reduce,
    )


def fsdp2_root_reduce(root_elems: int, grad_bytes: int, reduce_bytes: int) -> int:
    """Bytes of the FSDP2 root unit's gradient reduction at the end of backward: its unsharded gradients (the
    unsharded parameters' dtype) and the reduce-scatter input they are copied into (``reduce_dtype``).

    The root's forward input (token ids) needs no gradient, so _fsdp_state.py ``_register_post_backward_hook``
    registers nothing for it and its ``post_backward`` runs in ``_root_post_backward_final_callback``, after the
    whole backward: the lm_head's gradient is held from the loss's backward on, the embedding's joins it.
    _fsdp_collectives.py ``foreach_reduce``: ``reduce_scatter_input`` (the unit's elements in ``reduce_dtype``) is
    filled by ``foreach_reduce_scatter_copy_in`` before ``unsharded_grads.clear()`` frees the gradients."""
    return root_elems * (grad_bytes + reduce_bytes)


def norms_root(arch: Arch, stage: Stage) -> int:
    """Elements the FSDP2 root unit holds beside the embedding and the lm_head: the final norm (last stage) and
    what the embedding carries with it (BLOOM's norm, GPT-2's positions; first stage)."""
    return (arch.norm_params if stage.last else 0) + (arch.embed_extra_params if stage.first else 0)


def fsdp2_all_gather_pool(block_bytes: int, root_bytes: int, dp: int, *, cast: bool = True) -> int:
    """Bytes FSDP2's all-gathers keep reserved in the all-gather copy-in stream's pool, next to the default
    stream's: the root unit's and the first block's all-gather outputs, and the root's cast shard.

    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_all_gather``: under
    ``torch.cuda.stream(all_gather_copy_in_stream)`` it casts the unit's shards to ``param_dtype`` into one flat
    buffer (``_get_param_all_gather_inputs``: ``torch.empty(sum(numels), dtype=param_dtype)``, the unit / dp;
    ``cast``: only with a ``MixedPrecisionPolicy.param_dtype``, else the shards are copied in as they are) and
    allocates the flat all-gather output (``all_gather_output``, the whole unit); ``foreach_all_gather_copy_out``
    copies it into the unsharded parameters in the default stream. _fsdp_param_group.py ``wait_for_unshard``: in
    forward the output is kept (``comm_ctx.all_gather_state``) until the next unit's copy-out, so the root's
    (embedding, final norm, lm_head, the first unit of forward) and the first block's are allocated together;
    ``FSDPCommContext.get_all_gather_streams`` uses the copy-in stream for forward and for backward prefetch.
    c10/cuda/CUDACachingAllocator.cpp: a block is cached per stream ("Once freed, blocks can be re-allocated on
    the same stream, but not on any other stream"), so these segments stay reserved and unusable by the
    default stream's tensors for the rest of training; later units' buffers are carved out of them.
    ``block_bytes`` / ``root_bytes``: a block's and the root's unsharded bytes in the all-gather dtype; when the
    blocks are the larger units, two consecutive blocks bound it."""
    largest = max(root_bytes, block_bytes)
    return largest + block_bytes + (largest // dp if cast else 0)


def unsharded_grads(total: int, expert_share: float, ep: int) -> int:
    """One rank's gradient bytes before ZeRO-2/3 sharding: all of them, the experts' share over the ``ep`` ranks
    that split the experts. FSDP's no_sync holds this many from the first micro-batch to the last (torch/
    distributed/fsdp/fully_sharded_data_parallel.py FullyShardedDataParallel.no_sync: "FSDP will accumulate the
    full model gradients (instead of gradient shards) until the eventual sync"; FSDP2 _fsdp_param_group.py
    post_backward: without reduce_grads each FSDPParam keeps its unsharded gradient)."""
    experts = int(total * expert_share)
    return total - experts + experts // max(ep, 1)


def _sharded(total: int, shard: int, expert_share: float, ep: int) -> int:
    """One rank's ZeRO partition of `total` bytes: the experts' share over dp / ep ranks, the rest over dp."""
    if shard == 1 or not expert_share:
        return total // shard
    experts = int(total * expert_share)
    return (total - experts) // shard + experts // max(shard // ep, 1)


def trainable_tensors(
    arch: Arch, stage: Stage, tp: int, method: str, lora_roles: tuple[str, ...], rank: int
) -> list[tuple[int, int]]:
    """The trainable tensors of one rank's stage as (elements, how many): bitsandbytes decides per tensor whether
    its states are paged and whether they are 8-bit."""
    n, h, vocab = stage.layers, arch.h, arch.V * arch.h // tp
    if method != "full":
        out = []
        for lin in arch.linears:
            if lin.role in lora_roles:
                out += [(rank * lin.d_in // tp, n), (rank * lin.d_out // tp, n)]
        return out
    out = [(lin.weight_params // tp, n) for lin in arch.linears]
    out += [(lin.d_out // tp, n) for lin in arch.linears if lin.bias]
    out.append((h, n * (arch.layer_norm_params // h)))
    if stage.first:
        out.append((vocab, 1))
        if arch.embed_extra_params:
            out.append((arch.embed_extra_params, 1))
    if stage.last:
        out.append((arch.norm_params, 1))
        if not arch.tied or not stage.first:
            out.append((vocab, 1))
    return out


def _bnb_states(spec: OptimizerSpec, tensors: list[tuple[int, int]], state_elem: int) -> tuple[int, int]:
    """bitsandbytes optimizer states as (in PyTorch's allocator, in unified memory), tensor by tensor.

    bitsandbytes optim/optimizer.py: ``Optimizer2State.init_state`` keeps fp32 states for tensors under
    ``min_8bit_size`` (4096) and otherwise uint8 states with one fp32 absmax per 256-value block
    (``blocksize = 256`` since 0.44.0, PR #1365); ``get_state_buffer`` pages the states of tensors of >= 1e5
    elements (``F.get_paged``: cudaMallocManaged) when the optimizer is paged. The absmax is always an ordinary
    allocation."""
    visible = paged = 0
    for numel, count in tensors:
        if spec.int8_states and numel >= MIN_8BIT_ELEMENTS:
            states, absmax = spec.dense_states * numel, spec.dense_states * 4 * -(-numel // INT8_BLOCK)
        else:
            states, absmax = spec.dense_states * numel * (4 if spec.int8_states else state_elem), 0
        if spec.paged and numel >= PAGED_MIN_ELEMENTS:
            paged += count * states
            visible += count * absmax
        else:
            visible += count * (states + absmax)
    return visible, paged


def _factored_elems(arch: Arch, tp: int, n: int, stage: Stage) -> int:
    """Adafactor's statistics: rows + columns for each matrix, the full vector for 1-D parameters."""
    per_layer = sum(lin.d_in + lin.d_out + (lin.d_out if lin.bias else 0) for lin in arch.linears) // tp
    per_layer += arch.layer_norm_params
    vocab_stats = arch.V // tp + arch.h
    head = (vocab_stats if (not arch.tied or not stage.first) else 0) + arch.norm_params if stage.last else 0
    positions = arch.positions + arch.h if arch.positions else 0
    embed = vocab_stats + positions + (arch.norm_params if arch.fam.embed_norm else 0)
    return n * per_layer + (embed if stage.first else 0) + head
