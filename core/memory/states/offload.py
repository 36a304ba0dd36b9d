"""Offload of model states to the host or NVMe: DeepSpeed ZeRO-Offload (Ren et al. 2021) moves the optimizer
partition (fp32 master, states, fp32 gradients) to the host and runs CPU Adam there; ZeRO-Infinity
(Rajbhandari et al. 2021) also the 16-bit parameter partition under ZeRO-3, and either to NVMe through pinned
host buffers."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.states.optimizer import OptimizerStates, step_temporaries
from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.sharding import Partitions
from vramplan.core.memory.states.weights import Weights
from vramplan.core.memory.terms import Term

# DeepSpeed's NVMe optimizer swapping stages through pinned host buffers: buffer_count 4 x buffer_size 1e8 x fp32
NVME_SWAP_BUFFERS_BYTES = 4 * 100_000_000 * 4


class Placement(NamedTuple):
    """Where one rank's model states live once offload has moved what it moves."""

    params: int  # on the GPU
    grads: int
    optimizer: int
    optimizer_temp: int  # the optimizer step's transient on the GPU (CPU Adam: none)
    paged: int
    cpu: int  # host bytes
    nvme: int
    terms: tuple[Term, Term, Term]  # parameters, gradients, optimizer states: their formulas with the offload


def placement(sc: StateCtx, w: Weights, opt: OptimizerStates, part: Partitions) -> Placement:
    params_term, grads_term, opt_term = part.terms
    cpu = nvme = 0
    if sc.offload_optimizer != "none":
        # DeepSpeed CPU Adam: fp32 master + fp32 states + fp32 gradient partition on the host
        per = 4 + 4 + max(opt.states // max(w.trainable, 1), 0)
        host = part.part_elems * per if w.trainable else 0
        if sc.offload_optimizer == "cpu":
            cpu += host
        else:
            nvme += host
            cpu += min(host, NVME_SWAP_BUFFERS_BYTES)
        opt_gpu, temp, paged = 0, 0, 0
        grads = w.trainable * w.grad_elem if sc.zero == 1 else 0
        opt_term = opt_term.then(", offloaded to {} (0 on the GPU)", sc.offload_optimizer)
        if sc.zero >= 2:
            grads_term = grads_term.then(", partition streamed to the host")
    else:
        opt_gpu, grads, paged = part.optimizer, part.grads, part.paged
        temp = step_temporaries(sc, w, part.part_elems)
    params = part.params
    if sc.offload_params != "none":
        if sc.offload_params == "cpu":
            cpu += params
        else:
            nvme += params
        params = 0
        params_term = params_term.then(", offloaded to {}", sc.offload_params)
    return Placement(params, grads, opt_gpu, temp, paged, cpu, nvme, (params_term, grads_term, opt_term))
