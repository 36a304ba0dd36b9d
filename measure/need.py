"""What a measurement will need of this machine's memory, known before it builds anything: the estimate of the plan as
it runs here (`as_run_here`: the processes `launch_for` starts on this machine, one node, no tensor, pipeline or
expert parallelism, no offload, unsharded in one process), per process and in all. ``vramplan measure`` compares it
with what is free (host memory on the CPU, each GPU's on CUDA) and refuses before building when it does not fit: on
the CPU a plan past the host's memory is not an out-of-memory error but a failed allocation or the kernel's OOM
killer. Pure Python (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.distributed import launch_for, local_devices


@dataclass(frozen=True)
class Need:
    """The predicted peak of one measuring process and how many run here."""

    per_process_bytes: int
    processes: int

    @property
    def total_bytes(self) -> int:
        return self.per_process_bytes * self.processes


def as_run_here(plan: Plan, device: str, local_gpus: int) -> tuple[Plan, int]:
    """The plan as this machine measures it (`vramplan.measure.limitations` lists what differs) and its processes.
    A change the plan's rules refuse (a layout only the plan's GPU count allows) leaves the plan as it is: its own
    per-GPU estimate is then a lower bound of one process's need."""
    nproc = launch_for(plan, device, local_devices(device, local_gpus)).nproc
    changes: dict[str, object] = {
        "hardware.gpus_per_node": nproc,
        "hardware.nodes": 1,
        "strategy.tensor_parallel": 1,
        "strategy.pipeline_parallel": 1,
        "strategy.sequence_parallel": False,
        "strategy.expert_parallel": 1,
        "strategy.offload_optimizer": "none",
        "strategy.offload_parameters": "none",
    }
    if nproc == 1:  # one process measures the whole model: no sharding to run
        changes["strategy.zero_stage"] = 0
    try:
        return plan.with_changes(changes), nproc
    except PlanError:
        return plan, nproc


def memory_need(plan: Plan, device: str, local_gpus: int) -> Need:
    """The predicted peak of each measuring process (`as_run_here`; PyTorch's CPU kernels on the CPU)."""
    here, nproc = as_run_here(plan, device, local_gpus)
    return Need(estimate(here, cpu=device == "cpu").total, nproc)
