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

from dataclasses import dataclass

from vramplan.core.plan.arch import Arch, lora_params_per_layer
from vramplan.core.plan.memo import memoised
from vramplan.core.plan.precision import INT8_BLOCK, OPTIMIZERS, Regime, quantized_bytes, resolve_impl


@dataclass(frozen=True, slots=True)
class Stage:
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


@dataclass(frozen=True, slots=True)
class States:
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
) -> States:
    """Bytes of weights, gradients and optimizer state held by one GPU of `stage`."""
    V, h, n = arch.V, arch.h, stage.layers
    lin_w = arch.layer_weight_params // tp
    lin_b = arch.layer_bias_params // tp
    norms = arch.layer_norm_params
    vocab = V * h // tp
    embed = (vocab + arch.embed_extra_params) if stage.first else 0  # + BLOOM's norm, GPT-2's positions
    head = (arch.norm_params + (vocab if (not arch.tied or not stage.first) else 0)) if stage.last else 0
    params_local = embed + n * (lin_w + lin_b + norms) + head
    spec = OPTIMIZERS[optimizer]

    if method == "full":
        trainable = params_local
        w_bytes = trainable * reg.weight_bytes
        g_elem = reg.grad_bytes
        state_elem = reg.state_bytes
        master = reg.master_bytes
        largest = max(vocab if (stage.first or stage.last) else 0, arch.max_linear_weight // tp)
        factored = _factored_elems(arch, tp, n, stage) if spec.factored else 0
        layer_train, head_train = lin_w + lin_b + norms, (vocab if stage.last else 0)
    else:
        lora_layer = lora_params_per_layer(arch, lora_roles, lora_rank) // tp
        trainable = n * lora_layer
        frozen = params_local
        frozen_bytes = 2 if reg.compute == "half" else 4
        if quantization != "none":
            q = sum(quantized_bytes(lin.d_in, lin.d_out, quantization, double_quant) for lin in arch.linears) // tp
            w_frozen = n * q + (frozen - n * lin_w) * frozen_bytes
            layer_store = q + (lin_b + norms) * frozen_bytes
        else:
            w_frozen = frozen * frozen_bytes
            layer_store = (lin_w + lin_b + norms) * frozen_bytes
        adapter = 2 if reg.master_bytes else 4  # peft keeps adapters fp32 (autocast_adapter_dtype=True)
        w_bytes = w_frozen + trainable * adapter
        g_elem, state_elem, master = adapter, 4, reg.master_bytes
        largest = max(
            (lora_rank * max(lin.d_in, lin.d_out) for lin in arch.linears if lin.role in lora_roles), default=0
        )
        factored = n * sum(lora_rank * 2 + lin.d_in + lin.d_out for lin in arch.linears if lin.role in lora_roles)
        params_local = frozen + trainable
        layer_train, head_train = lora_layer, 0

    # optimizer state per trainable element
    if spec.factored:
        state_total = factored * state_elem
    elif spec.int8_states:
        state_total = spec.dense_states * (trainable + 4 * -(-trainable // INT8_BLOCK))
    else:
        state_total = spec.dense_states * trainable * state_elem
    opt = trainable * master + state_total
    grads = trainable * g_elem

    shard_opt = dp if zero >= 1 else 1
    shard_grad = dp if zero >= 2 else 1
    shard_param = dp if zero >= 3 else 1
    opt_part = opt // shard_opt
    grad_part = grads // shard_grad
    part_elems = trainable // shard_opt

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

    param_gpu = w_bytes // shard_param
    if offload_params != "none":
        (cpu_add, nvme_add) = (param_gpu, 0) if offload_params == "cpu" else (0, param_gpu)
        cpu += cpu_add
        nvme += nvme_add
        param_gpu = 0
    gathered = 0
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
    )


def _factored_elems(arch: Arch, tp: int, n: int, stage: Stage) -> int:
    """Adafactor's statistics: rows + columns for each matrix, the full vector for 1-D parameters."""
    per_layer = sum(lin.d_in + lin.d_out + (lin.d_out if lin.bias else 0) for lin in arch.linears) // tp
    per_layer += arch.layer_norm_params
    vocab_stats = arch.V // tp + arch.h
    head = (vocab_stats if (not arch.tied or not stage.first) else 0) + arch.norm_params if stage.last else 0
    positions = arch.positions + arch.h if arch.positions else 0
    embed = vocab_stats + positions + (arch.norm_params if arch.fam.embed_norm else 0)
    return n * per_layer + (embed if stage.first else 0) + head
