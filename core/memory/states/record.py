"""What the model-state mechanisms read (`StateCtx`, one per plan) and what they make (`States`, per stage)."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.terms import Term
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.schema.precision import Regime


class StateCtx(NamedTuple):
    """A plan's settings that decide its model states (hashable: `model_states` is memoised on it)."""

    arch: Arch
    reg: Regime
    method: str  # full | lora | qlora
    lora_roles: tuple[str, ...]
    lora_rank: int
    quantization: str  # the base's: none | int8 | nf4 | fp4
    double_quant: bool
    optimizer: str
    optimizer_impl: str
    zero: int
    dp: int
    tp: int
    pp: int
    offload_optimizer: str
    offload_params: str
    lora_dtype: str = "fp32"
    quantized_modules: str = "block-linears"
    ep: int = 1
    fsdp2: bool = False  # ZeRO-3 is FSDP2's fully_shard (per-block units and a root unit)
    fsdp1: bool = False  # ZeRO-2/3 is FSDP1's FullyShardedDataParallel (flat parameters: `states.fsdp1`)
    adapter_wrap: str = "own"  # FSDP1 LoRA: the adapters' units (strategy.fsdp_adapter_wrap)
    vision_trained: bool = False  # a multimodal model's vision tower is trained (training.vision_tower)

    @property
    def full(self) -> bool:
        return self.method == "full"


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
    terms: tuple[Term, ...] = ()  # the headline terms of the parameters, gradients, optimizer states, gathered kinds
