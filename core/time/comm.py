"""Links and collectives: how long moving bytes between GPUs, nodes and the host takes.

Bandwidths are per direction (GpuSpec: ``gpu_link_gbs`` inside a node, ``internode_gbs`` per GPU between nodes,
``host_link_gbs`` to the host). A collective's time is the bytes each rank sends over one link divided by the
link's usable bandwidth; latency is left out (it matters only for small messages, and frameworks bucket them).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.catalogue.specs import GpuSpec

LINK_EFFICIENCY = 0.8
LINK_EFFICIENCY_SRC = (
    "assumed: large NCCL transfers and memory-bound kernels reach about 80% of the per-direction peak "
    "(nccl-tests doc/PERFORMANCE.md defines the bus bandwidth compared with it)"
)
RING_SRC = (
    "ring all-reduce = reduce-scatter + all-gather: each rank sends 2·(n-1)/n·S (Patarasuk & Yuan 2009; the "
    "bus-bandwidth factor of nccl-tests doc/PERFORMANCE.md); a group that spans nodes runs at the per-GPU network "
    "bandwidth (one NIC per GPU), inside a node at the GPU link's"
)


class Link(NamedTuple):
    name: str
    gbs: float  # GB/s per direction: a rated peak, or a measured figure (efficiency 1)
    efficiency: float = LINK_EFFICIENCY  # the usable share of `gbs`

    @property
    def bytes_per_second(self) -> float:
        return self.gbs * 1e9 * self.efficiency


def all_reduce_seconds(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of `nbytes` over `n` ranks: 2·(n-1)/n·S / bandwidth."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / link.bytes_per_second


def reduce_scatter_seconds(nbytes: float, n: int, link: Link) -> float:
    """Reduce-scatter of `nbytes` (the unsharded size) over `n` ranks: (n-1)/n·S / bandwidth."""
    return 0.0 if n <= 1 else (n - 1) / n * nbytes / link.bytes_per_second


def all_gather_seconds(nbytes: float, n: int, link: Link) -> float:
    """All-gather into `nbytes` (the unsharded size) over `n` ranks: (n-1)/n·S / bandwidth."""
    return reduce_scatter_seconds(nbytes, n, link)


ALL_TO_ALL_SRC = (
    "all-to-all: each rank keeps 1/n of its S bytes and sends (n-1)/n·S (nccl-tests doc/PERFORMANCE.md, alltoall "
    "bus bandwidth = algbw·(n-1)/n); expert parallelism runs two per MoE layer forward (dispatch, combine) and two "
    "backward (DeepSpeed-MoE, Rajbhandari et al. 2022 §5; GShard, Lepikhin et al. 2020)"
)


def all_to_all_seconds(nbytes: float, n: int, link: Link) -> float:
    """All-to-all of the `nbytes` one rank holds over `n` ranks: (n-1)/n·S / bandwidth."""
    return 0.0 if n <= 1 else (n - 1) / n * nbytes / link.bytes_per_second


def expert_link(gpu: GpuSpec, gpus_per_node: int, tp: int, ep: int) -> Link:
    """The expert-parallel group is ep consecutive data-parallel ranks (TP innermost): inside a node while
    tp·ep <= GPUs per node, else every rank's all-to-all leaves through its own NIC."""
    if tp * ep <= gpus_per_node:
        return Link(gpu.gpu_link, gpu.gpu_link_gbs)
    return Link("inter-node network", gpu.internode_gbs)


def transfer_seconds(nbytes: float, link: Link) -> float:
    """A point-to-point copy (pipeline send, host <-> GPU): S / bandwidth."""
    return nbytes / link.bytes_per_second


class Links(NamedTuple):
    tp: Link
    dp: Link
    pp: Link
    host: Link


def links(gpu: GpuSpec, gpus_per_node: int, nodes: int, tp: int, dp: int) -> Links:
    """Which link each group uses. Ranks are laid out TP innermost, then DP, then PP (Megatron's default order,
    ``parallel_state.initialize_model_parallel``): the TP group spans nodes when tp > GPUs per node, the DP group
    when tp·dp > GPUs per node, and with more than one node some pipeline boundary crosses the network. NCCL runs
    a ring as several channels, one per NIC (nccl-tests doc/PERFORMANCE.md: bus bandwidth), so a DP group with g
    ranks per node crosses each node boundary g times in parallel."""
    intra = Link(gpu.gpu_link, gpu.gpu_link_gbs)
    inter = Link("inter-node network", gpu.internode_gbs)
    if nodes == 1:
        return Links(intra, intra, intra, Link(gpu.host_link, gpu.host_link_gbs))
    # a data-parallel ring that spans nodes runs one NCCL channel per NIC: with g of its ranks in each node, g
    # channels cross every node boundary in parallel, so the ring's bus bandwidth is g NICs' (capped by the GPU link)
    g = max(1, min(dp, gpus_per_node // tp)) if tp <= gpus_per_node else 1
    dp_inter = (
        inter
        if g == 1
        else Link(f"inter-node network ({g} NICs per node)", min(gpu.gpu_link_gbs, g * gpu.internode_gbs))
    )
    return Links(
        intra if tp <= gpus_per_node else inter,
        intra if tp * dp <= gpus_per_node else dp_inter,
        inter,
        Link(gpu.host_link, gpu.host_link_gbs),
    )
