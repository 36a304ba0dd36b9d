"""Model states per GPU: parameters, gradients, optimizer states, and where ZeRO, TP, PP and offload put them.

Each mechanism is a module of this package and contributes its part, its formula included: the stage's parameters
and what it trains (`weights`), the optimizer's states and step (`optimizer`), ZeRO's partitions (`sharding`),
offload to the host or NVMe (`offload`), ZeRO-3's gathered modules and FSDP2's buffers (`zero3`); FSDP1's flat
parameters replace some of them (`fsdp1`). `model_states` composes them for one pipeline stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.memory.states.fsdp1 import flat_states
from vramplan.core.memory.states.offload import placement
from vramplan.core.memory.states.optimizer import optimizer_states
from vramplan.core.memory.states.record import StateCtx, States
from vramplan.core.memory.states.sharding import partitions
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.states.weights import stage_shapes, weights
from vramplan.core.memory.states.zero3 import gathered
from vramplan.core.plan.architecture.arch import lora_roles
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.resolved import fsdp_sharded
from vramplan.core.plan.schema.precision import REGIMES

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


def state_ctx(plan: Plan) -> StateCtx:
    """What decides a plan's model states (`StateCtx`)."""
    t, s = plan.training, plan.strategy
    arch = plan.model.arch()
    return StateCtx(
        arch=arch,
        reg=REGIMES[t.regime],
        method=t.method,
        lora_roles=() if t.method == "full" else lora_roles(arch, t.lora_targets),
        lora_rank=t.lora_rank,
        quantization=t.base_quantization,
        double_quant=t.double_quantization,
        optimizer=t.optimizer,
        optimizer_impl=t.optimizer_impl,
        zero=s.zero_stage,
        dp=plan.data_parallel,
        tp=s.tensor_parallel,
        pp=s.pipeline_parallel,
        offload_optimizer=s.offload_optimizer,
        offload_params=s.offload_parameters,
        lora_dtype=t.lora_dtype,
        quantized_modules=t.quantized_modules,
        ep=s.expert_parallel,
        fsdp2=fsdp_sharded(plan) and s.fsdp_version != 1,
        fsdp1=s.fsdp_version == 1 and s.zero_stage >= 2 and plan.data_parallel > 1,
        adapter_wrap=s.fsdp_adapter_wrap or "own",
        vision_trained=t.vision_tower == "trained",
    )


@memoised(1024)
def model_states(sc: StateCtx, stage: Stage) -> States:
    """Bytes of weights, gradients and optimizer state held by one GPU of `stage`, and their headline terms."""
    sh = stage_shapes(sc, stage)
    w = weights(sc, stage, sh)
    opt = optimizer_states(sc, stage, w)
    part = partitions(sc, sh, w, opt)
    where = placement(sc, w, opt, part)
    g = gathered(sc, stage, sh, w)
    reduce_pool = sc.reg.name == "bf16-fsdp" and sc.zero == 3 and sc.dp > 1
    st = States(
        params=where.params,
        grads=where.grads,
        optimizer=where.optimizer,
        optimizer_temp=where.optimizer_temp,
        gathered=g.gathered,
        layer_grad=w.layer_train * w.grad_elem,
        head_grad=w.head_train * w.grad_elem,
        cpu=where.cpu,
        nvme=where.nvme,
        params_local=w.params_local,
        trainable_local=w.trainable,
        grad_bytes=w.grad_elem,
        paged=where.paged,
        largest_grad=w.largest * w.grad_elem // (sc.dp if sc.zero >= 2 else 1),
        reduce_extra=g.reduce_extra,
        grad_shards_pool=part.grads if reduce_pool else 0,
        grads_whole=part.grads_whole if where.grads else 0,
        gather_pool=g.gather_pool,
        head_held=g.head_held,
        root_reduce=g.root_reduce,
        terms=(*where.terms, g.term),
    )
    return flat_states(sc, stage, st) if sc.fsdp1 else st
