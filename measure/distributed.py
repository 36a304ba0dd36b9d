"""Measuring a multi-GPU plan: `vramplan measure` relaunches itself under ``torchrun`` with one process per local GPU,
shards the model as the plan says and gathers every rank's figures on rank 0, which reports them (the worst rank
is the one that limits the plan).

- `launch_for` (pure, no torch): how many processes, which wrapper, and what of the plan this machine cannot
  reproduce (more nodes than this one, fewer GPUs here than per node, tensor/pipeline parallel, offload), each one
  line. ZeRO-3 is FSDP2 ``fully_shard(reshard_after_forward=True)`` (FULL_SHARD), ZeRO-2 ``reshard_after_forward=
  False`` (SHARD_GRAD_OP: torch/distributed/fsdp/_fully_shard/_fully_shard.py, fully_shard's docstring), ZeRO-0/1
  torch's DistributedDataParallel (ZeRO-1's optimizer sharding is not run: said so).
- `relaunch`: ``python -m torch.distributed.run --standalone --nproc-per-node N -m vramplan <same arguments>``, each
  rank marked by ``VRAMPLAN_MEASURE_WORKER=1``; Ctrl-C is passed on and the ranks get 5 s to stop.
- `start` (the CLI, before measuring): relaunch, or join the process group in a rank; `shard_built` (run.py,
  after the build): `wrap_model` and the optimizer made again; `gather_figures` (run.py: every rank's figures on
  rank 0, which alone prints); `close_worker`.

torch is imported inside the functions that need it (the ``measure`` extra).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from vramplan.core.plan.schema.plan import Plan

if TYPE_CHECKING:
    from vramplan.measure.records import RankFigures

Wrap = Literal["fsdp2", "ddp", "none"]
WORKER_ENV = "VRAMPLAN_MEASURE_WORKER"
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Launch:
    """How a plan is measured here: ``nproc`` processes (1: no relaunch), the wrapper, FSDP2's
    ``reshard_after_forward`` (None unless fsdp2), and one line per thing of the plan not reproduced."""

    nproc: int
    wrap: Wrap
    reshard_after_forward: bool | None
    caveats: tuple[str, ...]

    @property
    def relaunches(self) -> bool:
        return self.nproc > 1


def launch_for(plan: Plan, device: str, local_devices: int) -> Launch:
    """The launch of `plan` on `device` with `local_devices` here (GPUs; on the CPU, the processes allowed).

    One node at most: its ``gpus_per_node`` ranks (or as many as are here) form the data-parallel group, so a
    sharded state is 1/ranks here, not 1/dp of the plan. Tensor and pipeline parallel are not run: one process
    measures the unsplit model (`vramplan.measure.limitations` marks the rows)."""
    s, hw = plan.strategy, plan.hardware
    if hw.total_gpus == 1:
        return Launch(1, "none", None, ())
    caveats: list[str] = []
    if s.tensor_parallel > 1 or s.pipeline_parallel > 1:
        caveats.append(
            f"tensor parallel {s.tensor_parallel} x pipeline parallel {s.pipeline_parallel}: not reproduced "
            "(vramplan measure runs data parallel only); one process measures the unsplit model"
        )
        return Launch(1, "none", None, tuple(caveats))
    ranks = min(hw.gpus_per_node, max(1, local_devices))
    if hw.nodes > 1:
        caveats.append(
            f"{hw.nodes} nodes: only this one is measured, {ranks} rank(s)"
            + (f"; sharded states are 1/{ranks} here, 1/{plan.data_parallel} in the plan" if s.zero_stage else "")
        )
    if ranks < hw.gpus_per_node:
        caveats.append(
            f"{hw.gpus_per_node} GPUs per node in the plan, {local_devices} here: {ranks} rank(s) measured"
            + (f", each holding 1/{ranks} of the sharded states" if s.zero_stage and ranks > 1 else "")
        )
    if s.offload_optimizer != "none" or s.offload_parameters != "none":
        caveats.append(
            f"DeepSpeed offload (optimizer {s.offload_optimizer}, parameters {s.offload_parameters}): not "
            "reproduced; measured without offload (more GPU memory than the plan's)"
        )
    if ranks == 1:
        return Launch(1, "none", None, tuple(caveats))
    if s.zero_stage >= 2:
        if s.zero_stage == 2:
            caveats.append(
                "ZeRO-2 as FSDP2 reshard_after_forward=False: parameters are sharded between steps (ZeRO-2 keeps "
                "them whole)"
            )
        if s.fsdp_version == 1:
            caveats.append("FSDP1's flat parameters: FSDP2 (one shard per parameter) is run")
        return Launch(ranks, "fsdp2", s.zero_stage == 3, tuple(caveats))
    if s.zero_stage == 1:
        caveats.append("ZeRO-1: DDP is run, so every rank holds whole optimizer states (not 1/dp)")
    return Launch(ranks, "ddp", None, tuple(caveats))


CPU_RANKS_ENV = "VRAMPLAN_MEASURE_CPU_RANKS"


def local_devices(device: str, gpus: int) -> int:
    """The ranks this machine can run: its GPUs on CUDA; on the CPU one process, unless ``VRAMPLAN_MEASURE_CPU_RANKS``
    allows more (gloo ranks: the multi-GPU path tested on machines without a GPU)."""
    if device == "cuda":
        return gpus
    text = os.environ.get(CPU_RANKS_ENV, "1")
    return max(1, min(64, int(text))) if text.isdigit() else 1


def start(plan: Plan, device: str, gpus: int, say: Callable[[str], None]) -> int | None:
    """The multi-GPU part of ``vramplan measure`` before it measures: with more than one rank to run, this process
    relaunches itself under torchrun and returns torchrun's exit code (after saying what is not reproduced); in
    one of those ranks it joins the process group and returns None; with one rank, None."""
    launch = launch_for(plan, device, local_devices(device, gpus))
    if is_worker():
        init_worker(device)
        return None
    if not launch.relaunches:
        return None
    say(f"{launch.nproc} ranks ({launch.wrap}): relaunching under torchrun")
    return relaunch(sys.argv[1:], launch.nproc)


def shard_built(built: Any, plan: Plan, device: str) -> Any:
    """A rank's built model sharded as the plan says (`wrap_model`), its optimizer made again over the sharded
    parameters (FSDP2 replaces each parameter by its DTensor shard; nothing has stepped yet)."""
    from vramplan.measure import cuda
    from vramplan.measure.build import make_optimizer
    from vramplan.measure.recipe import recipe

    launch = launch_for(plan, device, local_devices(device, cuda.local_gpus() if device == "cuda" else 0))
    if launch.wrap == "none":
        return built
    r = recipe(plan)
    built.model = wrap_model(built.model, launch, plan)
    params = [p for p in built.model.parameters() if p.requires_grad]
    built.optimizer = make_optimizer(params, r.optimizer, r.optimizer_impl, r.learning_rate)
    return built


def is_sharded(model: Any) -> bool:
    """Some parameter of `model` is a DTensor shard (FSDP2)."""
    return any(hasattr(p, "to_local") for p in model.parameters())


def is_worker() -> bool:
    """This process is one rank of `relaunch`'s torchrun."""
    return os.environ.get(WORKER_ENV) == "1" and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def relaunch_command(argv: list[str], nproc: int) -> list[str]:
    """The torchrun command line that reruns ``vramplan <argv>`` once per rank (torch/distributed/run.py: ``-m``
    runs a module; ``--standalone`` starts a local rendezvous on a free port)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "vramplan",
        *argv,
    ]


def relaunch(argv: list[str], nproc: int) -> int:
    """Run the measurement in `nproc` ranks; the exit code of torchrun (rank 0 printed the report). Ctrl-C goes to
    torchrun, which passes it to the ranks; after `STOP_GRACE_S` they are killed. 130 after an interrupt."""
    env = {**os.environ, WORKER_ENV: "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen(relaunch_command(argv, nproc), env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 130


# -- inside a rank (torch) ------------------------------------------------------------------------------------


def init_worker(device: str) -> Any:
    """Join the process group (NCCL on CUDA, gloo on the CPU) and return this rank's ``torch.device``."""
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        from vramplan.measure import cuda

        cuda.set_device(local)
        before, reserved = cuda.used_bytes()[0], cuda.reserved_bytes()
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        dist.barrier(device_ids=[local])  # the communicator and its channel buffers exist from here
        cuda.synchronize()
        # NCCL cudaMalloc's its buffers itself (NCCL_BUFFSIZE per channel and peer): the driver sees them, the
        # caching allocator does not; the barrier's own tensor is in the allocator's reserve, taken out
        NCCL["bytes"] = max(0, cuda.used_bytes()[0] - before - (cuda.reserved_bytes() - reserved))
        return torch.device("cuda", local)
    dist.init_process_group("gloo")
    return torch.device("cpu")


NCCL: dict[str, int] = {}  # this rank's NCCL buffers, bytes, measured by `init_worker` (CUDA only)


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def block_classes(model: Any) -> set[str]:
    """The class names of the model's repeated blocks: transformers' ``_no_split_modules`` (what accelerate's FSDP
    auto-wrap policy wraps: accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin), found through PEFT's
    wrappers too."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def wrap_model(model: Any, launch: Launch, plan: Plan) -> Any:
    """`model` sharded as `launch` says, before its optimizer is made: FSDP2 ``fully_shard`` on each block and then
    the root (torchtitan's parallelize apply_fsdp; HF accelerate's fsdp2_prepare_model), or DDP with the plan's
    ``overhead.ddp_gradient_as_bucket_view`` (torch/nn/parallel/distributed.py)."""
    import torch

    if launch.wrap == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy()
        if plan.training.regime == "bf16-fsdp":  # bf16 compute over fp32 shards (torchtitan's default)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        reshard = bool(launch.reshard_after_forward)
        blocks = block_classes(model)
        for module in list(model.modules()):
            if type(module).__name__ in blocks:
                fully_shard(module, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, reshard_after_forward=reshard, mp_policy=mp)
        return model
    if launch.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        dev = next(model.parameters()).device
        return DistributedDataParallel(
            model,
            device_ids=[dev.index] if dev.type == "cuda" else None,
            gradient_as_bucket_view=plan.overhead.ddp_gradient_as_bucket_view,
        )
    return model


def gather_figures(figures: RankFigures) -> tuple[RankFigures, ...]:
    """Every rank's figures on rank 0, in rank order (the others get ()); every rank must call it."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return (figures,)
    figures = replace(figures, rank=dist.get_rank(), nccl_bytes=NCCL.get("bytes"))
    out: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(figures, out if dist.get_rank() == 0 else None, dst=0)
    return tuple(out)


def close_worker() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
