"""What one node of the plan has beside its GPUs: host memory and local NVMe, the limits of offload.

Offloaded optimizer states, parameters and activations live in the node's host memory (or on its NVMe), so a plan
that offloads more than the node holds does not run, however well it fits on the GPUs. Each limit, per node, is the
first of:

1. the plan's key (``hardware.host_memory_gib``, ``hardware.nvme_gib``): always wins;
2. host memory only: this machine's (``MemTotal`` of /proc/meminfo), when the plan's GPU is the GPU of the machine
   vramplan runs on. Core reads no machine: a front end reads it (vramplan.machine.host) and registers it
   (`presets.register_machine_host`), as it does a detected GPU; ``VRAMPLAN_DETECT=0`` turns both off;
3. the GPU preset's typical node (``node_host_memory_gib``, ``node_nvme_gib`` for ``node_gpus`` GPUs, with
   ``node_source``), as that node's share per GPU: figure x ``hardware.gpus_per_node`` / ``node_gpus`` (one GPU of
   an 8-GPU DGX A100 with 2 TiB comes with 256 GiB);
4. a conservative rule where no source is known: host memory = `HOST_PER_GPU_MEMORY` x the node's GPU memory (the
   smallest ratio of the sourced nodes: DGX-1, 512 GB for 8 x 32 GB; DGX A100 and H100, p4d and g5 have 3-4x),
   NVMe = `NVME_PER_HOST` x that host memory (every sourced node has 2-15x as much NVMe as DRAM: p3dn.24xlarge
   1.8 TB for 768 GiB, DGX H100 30 TB for 2 TiB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import GiB

if TYPE_CHECKING:
    from vramplan.core.plan.catalogue.specs import GpuSpec
    from vramplan.core.plan.schema.plan import Plan

HOST_PER_GPU_MEMORY = 2  # host memory per byte of GPU memory when the node is unknown (rule 4)
NVME_PER_HOST = 1  # NVMe per byte of host memory when the node's NVMe is unknown (rule 4)


class Limit(NamedTuple):
    """One limit of a node: its bytes and where they come from (shown in the verdict)."""

    bytes: int
    source: str  # "hardware.host_memory_gib" | "this machine (/proc/meminfo)" | "typical node: ..." | "rule: ..."
    user: bool  # set by the plan's key (the user raised or lowered it)


class NodeLimits(NamedTuple):
    host: Limit
    nvme: Limit


def _share(figure_gib: float, gpus: int, node_gpus: int) -> int:
    """The plan's node's share of a typical node's figure: figure x gpus / node_gpus, in bytes."""
    return int(figure_gib * GiB) * gpus // node_gpus


def _typical(gpu: GpuSpec, gpus: int) -> str:
    """``typical node: DGX A100 640GB, 2 TiB, ... (1/8 of it)``: the first part of the preset's node_source."""
    where = gpu.node_source.partition(";")[0].strip() or "the GPU preset's"
    return f"typical node: {where}" + ("" if gpus == gpu.node_gpus else f" ({gpus}/{gpu.node_gpus} of it)")


def host_limit(plan: Plan) -> Limit:
    """Host memory per node (see the module docstring for the order)."""
    hw = plan.hardware
    if hw.host_memory_gib is not None:
        return Limit(int(hw.host_memory_gib * GiB), "hardware.host_memory_gib", True)
    machine = presets.registry().machine_host.get(hw.gpu)
    if machine is not None:
        return Limit(machine, "this machine (/proc/meminfo MemTotal)", False)
    gpu = presets.gpu(hw.gpu)
    if gpu.node_host_memory_gib is not None:
        share = _share(gpu.node_host_memory_gib, hw.gpus_per_node, gpu.node_gpus)
        return Limit(share, _typical(gpu, hw.gpus_per_node), False)
    rule = HOST_PER_GPU_MEMORY * gpu.memory_bytes * hw.gpus_per_node
    return Limit(rule, f"rule: {HOST_PER_GPU_MEMORY} x the node's GPU memory (no node figure known)", False)


def nvme_limit(plan: Plan) -> Limit:
    """NVMe space per node for NVMe offload (the key, the typical node's share, else the rule on host memory)."""
    hw = plan.hardware
    if hw.nvme_gib is not None:
        return Limit(int(hw.nvme_gib * GiB), "hardware.nvme_gib", True)
    gpu = presets.gpu(hw.gpu)
    if gpu.node_nvme_gib is not None:
        share = _share(gpu.node_nvme_gib, hw.gpus_per_node, gpu.node_gpus)
        return Limit(share, _typical(gpu, hw.gpus_per_node), False)
    host = host_limit(plan)
    return Limit(NVME_PER_HOST * host.bytes, f"rule: {NVME_PER_HOST} x host memory (no NVMe figure known)", False)


def node_limits(plan: Plan) -> NodeLimits:
    return NodeLimits(host_limit(plan), nvme_limit(plan))
