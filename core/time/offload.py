"""Offload time: what parameter, gradient and optimizer-state offload moves per step, over which link, and how
long the host's CPU Adam takes. One function per quantity; `core.time.step` schedules them.

Bytes per step on one rank (its ZeRO partition):

- ZeRO-Offload, optimizer on the CPU (Ren et al. 2021 §4.1, Fig. 5): 16-bit gradients GPU -> host during the
  backward, the updated 16-bit parameters host -> GPU after CPU Adam (streamed tile by tile while it runs, §5.1);
- ZeRO-Infinity parameter offload (Rajbhandari et al. 2021 §5, §6): every parameter partition is fetched for the
  forward and again for the backward of every micro-batch; from NVMe it is read into pinned host buffers and then
  copied to the GPU, the two stages pipelined (the slower one sets the pace);
- optimizer states on NVMe (ZeRO-Infinity §5.1, DeepSpeed ``offload_optimizer.device = nvme``): the fp32 master
  and the dense states read in and written back every step (12 B per element for AdamW's master + 2 moments).

Bandwidths, each per direction, are the first of: the plan's key (a figure you measured: used as is), the
preset's rated figure x `LINK_EFFICIENCY` (the same 80% as every other link), else the rule of `nvme_drive_gbs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.catalogue import presets
from vramplan.core.time.comm import Link

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

# One NVMe drive's rated sequential read by the PCIe generation of the node (when the preset's node does not say):
# Gen3 x4 ~3.5 GB/s (Samsung 970 EVO Plus datasheet: 3,500 MB/s), Gen4 x4 ~7 GB/s (Samsung 990 PRO: 7,450 MB/s;
# enterprise U.2 Samsung PM1733 / Kioxia CM6: 7,000 / 6,900 MB/s). A Gen5 GPU server's data drives are mostly
# Gen4 U.2 parts, so Gen5 takes Gen4's figure.
NVME_DRIVE_GBS = {3: 3.5, 4: 7.0, 5: 7.0}
NVME_SRC = (
    "NVMe read: hardware.nvme_gbs (measured, as is), else 80% of the preset node's drives together (node_nvme_gbs), "
    "else 80% of one drive of the host link's PCIe generation (Gen3 3.5 GB/s, Gen4 and later 7 GB/s rated "
    "sequential read: Samsung 970 EVO Plus, 990 PRO, PM1733 datasheets), shared by the node's ranks"
)
PCIE_SRC = (
    "GPU-host link: hardware.pcie_gbs (measured, as is), else 80% of the preset's host link per direction "
    "(PCIe 4.0 x16: 32 GB/s -> 25.6, PCIe 5.0 x16: 64 -> 51.2)"
)

# DeepSpeed CPU Adam (csrc/adam/cpu_adam_impl.cpp: AVX-512/AVX2, one OpenMP thread per core): DeepSpeed PR #735
# (its author, R. Yazdani Aminabadi): "reduces the optimizer time from 56 seconds to 8.2 seconds [for] an 11.6B
# parameter GPT2 model" = 1.41e9 parameters/s; the host is not named there: taken as ZeRO-Offload's testbed (§6.1,
# a DGX-2 with 2 x 24-core Xeon Platinum 8168: 48 cores), 1.41e9 / 48 = 2.9e7 parameters/s per core. Slower hosts
# exist (DeepSpeed issue #1635: 1.35B parameters in 22 s on a 10-core Xeon Silver 4210R, 6e6 per core).
CPU_ADAM_PARAMS_PER_CORE_S = 11.6e9 / 8.2 / 48
HOST_MEMORY_GBS_PER_NODE = 100.0
HOST_MEMORY_SRC = (
    "assumed 100 GB/s of host memory bandwidth per node for CPU Adam, shared by the node's ranks (one 8-channel "
    "DDR4-3200 socket peaks at 204.8 GB/s; CPU Adam streams ~30 B per element: ZeRO-Offload §5.1). Reports: "
    "Qwen-72B ZeRO-3 offload on 4 x 8 A100, ~10 s per step (DeepSpeed issue #6834); Qwen2.5-3B on 2 A100, "
    "2.4-3.1 s per step (DeepSpeed PR #7474)"
)
CPU_CORES_PER_GPU = 8  # when neither the plan nor the preset's node says: a 64-core host for 8 GPUs
CPU_ADAM_SRC = (
    f"DeepSpeed CPU Adam at {CPU_ADAM_PARAMS_PER_CORE_S / 1e6:.1f}e6 parameters/s per core (DeepSpeed PR #735: 11.6B "
    "parameters in 8.2 s, on ZeRO-Offload's 48-core DGX-2 host, §6.1), or the host memory bandwidth if that is "
    "slower; the updated 16-bit parameters stream back to the GPU meanwhile (ZeRO-Offload §5.1); not overlapped "
    "with the GPU's step (one-step delayed update off)"
)


def pcie_generation(host_link_gbs: float) -> int:
    """The PCIe generation of an x16 host link from its per-direction peak: 16 GB/s Gen3, 32 Gen4, 64 Gen5."""
    return 3 if host_link_gbs <= 16 else 4 if host_link_gbs <= 32 else 5


def pcie_link(plan: Plan) -> Link:
    """One GPU's link to the host: the measured ``hardware.pcie_gbs`` as is, else the preset's host link peak
    x `LINK_EFFICIENCY`."""
    gpu = presets.gpu(plan.hardware.gpu)
    if plan.hardware.pcie_gbs is not None:
        return Link(f"{gpu.host_link} (hardware.pcie_gbs)", plan.hardware.pcie_gbs, 1.0)
    return Link(gpu.host_link, gpu.host_link_gbs)


def nvme_link(plan: Plan) -> Link:
    """One rank's share of its node's NVMe read bandwidth (see `NVME_SRC`): the node's figure / GPUs per node. A
    preset's typical node of ``node_gpus`` GPUs comes to a plan's node as gpus_per_node / node_gpus of it (as its
    NVMe space does: `core.plan.node`), so one rank's share is the typical node's figure / node_gpus."""
    hw = plan.hardware
    gpu = presets.gpu(hw.gpu)
    if hw.nvme_gbs is not None:
        return Link("NVMe (hardware.nvme_gbs)", hw.nvme_gbs / hw.gpus_per_node, 1.0)
    if gpu.node_nvme_gbs is not None:
        return Link("NVMe (the preset node's drives)", gpu.node_nvme_gbs / gpu.node_gpus)
    gen = pcie_generation(gpu.host_link_gbs)
    return Link(f"NVMe (one PCIe Gen{gen} drive per node)", NVME_DRIVE_GBS[gen] / hw.gpus_per_node)


def cpu_cores_per_rank(plan: Plan) -> float:
    """CPU cores one rank's CPU Adam runs on: ``hardware.cpu_cores`` / GPUs per node, else the preset node's
    cores / node_gpus, else `CPU_CORES_PER_GPU`."""
    hw = plan.hardware
    gpu = presets.gpu(hw.gpu)
    if hw.cpu_cores is not None:
        return hw.cpu_cores / hw.gpus_per_node
    if gpu.node_cpu_cores is not None:
        return gpu.node_cpu_cores / gpu.node_gpus
    return float(CPU_CORES_PER_GPU)


def param_fetch_bytes(gathered_bytes: float, dp: int) -> float:
    """Bytes of parameters one rank fetches from the host or NVMe for one pass (forward or backward) of one
    micro-batch: its ZeRO-3 partition of what the pass gathers (ZeRO-Infinity §5: each rank reads 1/dp of the
    parameters and the all-gather assembles them), even with one rank."""
    return gathered_bytes / dp


def param_fetch_seconds(nbytes: float, offload: str, pcie: Link, nvme: Link) -> tuple[float, float]:
    """(PCIe seconds, NVMe seconds) of one pass's parameter fetch: host -> GPU over PCIe for both devices, and
    for ``nvme`` also NVMe -> pinned host memory first (pipelined with the copy: ZeRO-Infinity §6.2)."""
    if offload == "none":
        return 0.0, 0.0
    on_pcie = nbytes / pcie.bytes_per_second
    return on_pcie, (nbytes / nvme.bytes_per_second if offload == "nvme" else 0.0)


def nvme_optimizer_bytes(elems: float, dense_states: int) -> float:
    """Bytes optimizer swapping moves per step: the fp32 master and each dense fp32 state read in before the
    CPU step and written back after it: 2 x elems x 4 B x (1 + states) (AdamW: 2 x 12 B per element)."""
    return 2 * elems * 4 * (1 + dense_states)


def cpu_adam_seconds(elems: float, cores: float, bytes_per_elem: int, host_bps: float) -> float:
    """CPU Adam over one rank's partition: elems / (`CPU_ADAM_PARAMS_PER_CORE_S` x cores), or the bytes it
    streams over the rank's share of host memory bandwidth if that is slower (`CPU_ADAM_SRC`)."""
    return max(elems / (CPU_ADAM_PARAMS_PER_CORE_S * cores), elems * bytes_per_elem / host_bps)


def exposed_shares(window: float, *busy: float) -> tuple[float, ...]:
    """Exposed seconds of transfers on separate links (network, PCIe, NVMe) running concurrently with `window`
    seconds of compute and with each other: together max(0, max(busy) - window); the excess is the first link's
    first, then the next one's (each term gets what it adds beyond the ones before it)."""
    out, before = [], 0.0
    for i in range(len(busy)):
        upto = max(0.0, max(busy[: i + 1]) - window)
        out.append(upto - before)
        before = upto
    return tuple(out)


class OffloadOverlap(NamedTuple):
    """How much of a pass's offload traffic runs under its compute, and how much the step waits for."""

    overlapped: float  # seconds the longest offload transfer runs while compute runs
    exposed: float


def offload_overlap(window: float, *busy: float) -> OffloadOverlap:
    """The offload transfers of one pass against its compute window: min(max(busy), window) overlaps, the rest
    max(0, max(busy) - window) is exposed (prefetch overlaps compute, never more than the compute it hides in)."""
    longest = max(busy, default=0.0)
    return OffloadOverlap(min(longest, window), max(0.0, longest - window))
