"""The parameters one rank's pipeline stage holds and trains, before ZeRO: full fine-tuning's weights, or LoRA's
adapters over a frozen base (QLoRA: a 4-bit base).

Tensor parallelism splits the block linears, the embedding and the lm_head (Megatron column/row-parallel and
vocab-parallel layers, Shoeybi et al. 2019) and replicates the norms. Pipeline stage 0 holds the embedding, the
last stage the final norm and lm_head (and, when tied, a copy of the embedding: Megatron
``setup_embeddings_and_output_layer``). A 4-bit base stores each quantized linear in bitsandbytes' blocks
(`core.plan.schema.precision.quantized_bytes`); PEFT upcasts the adapters to fp32 (``autocast_adapter_dtype``),
torchtune and litgpt keep them in the model's 16 bit, DeepSpeed's master regimes cast the whole model to 16 bit."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.states.vision import vision_frozen, vision_held, with_vision
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.architecture.arch import lora_params_per_layer
from vramplan.core.plan.schema.precision import OPTIMIZERS, quantized_bytes

ZERO_SRC = "ZeRO (Rajbhandari et al. 2020) §5: stage 1 shards optimizer states, 2 gradients, 3 parameters"


class StageShapes(NamedTuple):
    """Elements of one rank's stage, per tensor-parallel rank, before ZeRO."""

    lin_w: int  # a block's linear weights (and the experts and routers its linears do not show)
    lin_b: int  # a block's biases
    norms: int  # a block's norm weights (replicated over TP)
    vocab: int  # the embedding or lm_head matrix
    params_local: int  # everything the stage holds
    experts: int  # the routed experts this rank holds


def stage_shapes(sc: StateCtx, stage: Stage) -> StageShapes:
    """Experts: a block holds its routed experts, routers and the other parameters its linears do not show
    (`Arch.layer_extra_params`); under expert parallelism ``ep`` (DeepSpeed-MoE, Rajbhandari et al. 2022;
    Megatron-Core expert parallel) a rank holds 1/ep of the experts."""
    arch, tp, ep, n = sc.arch, sc.tp, sc.ep, stage.layers
    lin_w = arch.layer_weight_params // tp + arch.layer_extra_params(ep) // tp
    lin_b = arch.layer_bias_params // tp
    norms = arch.layer_norm_params
    vocab = arch.V * arch.h // tp
    embed = (vocab + arch.embed_extra_params) if stage.first else 0  # + BLOOM's norm, GPT-2's positions
    head = (arch.norm_params + (vocab if (not arch.tied or not stage.first) else 0)) if stage.last else 0
    experts = n * arch.expert_params // (arch.L * ep * tp)
    local = embed + n * (lin_w + lin_b + norms) + head + vision_held(sc, stage)
    return StageShapes(lin_w, lin_b, norms, vocab, local, experts)


class Weights(NamedTuple):
    """What one rank's stage holds and trains, before ZeRO."""

    params_local: int  # parameters it computes with (a LoRA base + its adapters)
    trainable: int  # trained elements
    bytes: int  # the weights as held (a frozen base as stored)
    grad_elem: int  # bytes per gradient element
    state_elem: int  # bytes per optimizer-state element
    master: int  # bytes per element of a master copy (0: none)
    largest: int  # the largest trained tensor, elements
    layer_train: int  # a block's trained elements
    head_train: int  # the lm_head's trained elements
    layer_store: int  # a block's bytes as stored (LoRA/QLoRA: the frozen base)
    frozen_bytes: int  # bytes per frozen element (the base as held: bf16-fsdp keeps fp32 shards)
    term: Term  # the parameters' headline term


def weights(sc: StateCtx, stage: Stage, shapes: StageShapes) -> Weights:
    """Full fine-tuning trains every parameter in the regime's weight dtype; LoRA trains its adapters beside a
    frozen base held as stored (quantized linears in their blocks, the rest in the regime's weight dtype)."""
    if sc.full:
        return _full(sc, stage, shapes)
    return _adapters(sc, stage, shapes)


def _split(sc: StateCtx) -> str:
    return f" (split over TP {sc.tp} x PP {sc.pp})" if sc.tp * sc.pp > 1 else ""


def _source(sc: StateCtx) -> str:
    return f"{sc.reg.summary}; " + (ZERO_SRC if sc.zero == 3 else "transformers/peft module parameters")


def _full(sc: StateCtx, stage: Stage, sh: StageShapes) -> Weights:
    arch, reg, tp = sc.arch, sc.reg, sc.tp
    spec = OPTIMIZERS[sc.optimizer]
    trainable = sh.params_local - vision_frozen(sc, stage)
    largest = max(sh.vocab if (stage.first or stage.last) else 0, arch.max_linear_weight // tp)
    term = headline(
        "parameters", "{:,} params{} x {} B ({} weights)", sh.params_local, _split(sc), reg.weight_bytes, reg.name,
        source=_source(sc),
    )  # fmt: skip
    return Weights(
        params_local=sh.params_local,
        trainable=trainable,
        bytes=sh.params_local * reg.weight_bytes,
        grad_elem=reg.grad_bytes,
        state_elem=4 if spec.fp32_states else reg.state_bytes,
        master=reg.master_bytes,
        largest=largest,
        layer_train=sh.lin_w + sh.lin_b + sh.norms,
        head_train=sh.vocab if stage.last else 0,
        layer_store=0,
        frozen_bytes=reg.weight_bytes,
        term=with_vision(term, sc, stage),
    )


def _adapters(sc: StateCtx, stage: Stage, sh: StageShapes) -> Weights:
    """LoRA/QLoRA: the frozen base as stored plus the adapters in their dtype."""
    arch, reg, tp, n = sc.arch, sc.reg, sc.tp, stage.layers
    spec = OPTIMIZERS[sc.optimizer]
    lora_layer = lora_params_per_layer(arch, sc.lora_roles, sc.lora_rank) // tp
    trainable = n * lora_layer
    frozen = sh.params_local
    frozen_bytes = reg.weight_bytes  # the frozen base as held (bf16-fsdp: fp32 shards)
    quant = sc.quantization
    if quant != "none":
        adapted = sc.quantized_modules == "adapted"
        linears = [lin for lin in arch.linears if not adapted or lin.role in sc.lora_roles]
        q = sum(quantized_bytes(lin.d_in, lin.d_out, quant, sc.double_quant) for lin in linears) // tp
        q_w = sum(lin.weight_params for lin in linears) // tp
        w_frozen = n * q + (frozen - n * q_w) * frozen_bytes
        layer_store = q + (sh.lin_w - q_w + sh.lin_b + sh.norms) * frozen_bytes
        if sc.quantized_modules == "all-linears" and stage.last and (not arch.tied or not stage.first):
            # Lightning's BitsandbytesPrecision replaces every nn.Linear, the lm_head too
            w_frozen -= sh.vocab * frozen_bytes - quantized_bytes(arch.h, arch.V, quant, sc.double_quant) // tp
    else:
        w_frozen = frozen * frozen_bytes
        layer_store = (sh.lin_w + sh.lin_b + sh.norms) * frozen_bytes
    # PEFT upcasts adapters to fp32 (autocast_adapter_dtype=True); torchtune and litgpt keep the model's 16 bit;
    # DeepSpeed's master regimes cast the whole model, adapters included, to 16 bit
    adapter = 2 if (reg.master_bytes or sc.lora_dtype == "bf16") else 4
    largest = max(
        (sc.lora_rank * max(lin.d_in, lin.d_out) for lin in arch.linears if lin.role in sc.lora_roles), default=0
    )
    base = "4-bit NF4" if quant == "nf4" else quant if quant != "none" else f"{2 if reg.compute == 'half' else 4} B"
    term = headline(
        "parameters", "frozen base ({}) + {:,} LoRA params x {} B{}", base, trainable, 2 if reg.master_bytes else 4,
        _split(sc), source=_source(sc),
    )  # fmt: skip
    return Weights(
        params_local=frozen + trainable,
        trainable=trainable,
        bytes=w_frozen + trainable * adapter,
        grad_elem=adapter,
        state_elem=4 if (adapter == 4 or reg.master_bytes or spec.fp32_states) else 2,  # torch AdamW: param dtype
        master=reg.master_bytes,
        largest=largest,
        layer_train=lora_layer,
        head_train=0,
        layer_store=layer_store,
        frozen_bytes=frozen_bytes,
        term=with_vision(term, sc, stage),
    )
