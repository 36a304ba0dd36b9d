"""One rank of a data-parallel plan on fake tensors (`vramplan trace`): the model sharded or replicated as
`vramplan measure` does it on real GPUs (`vramplan.measure.distributed.wrap_model`: FSDP2 ``fully_shard`` on each
block and the root, or DDP), in a process group of the plan's data-parallel degree whose collectives do nothing
(PyTorch's fake process group: torch/testing/_internal/distributed/fake_pg.py, the ``fake`` backend that
torch.distributed._tools.fsdp2_mem_tracker is tested with). Rank 0's step then allocates what a rank allocates: its
shards, FSDP2's all-gather and reduce-scatter buffers on their own streams, the unsharded parameters of the units in
use, DDP's gradient buckets. Which plans run this way: `vramplan.measure.trace_limits.parallel_mode`.

DDP on fake tensors needs three things it would read real data for skipped (each a no-op for memory): the
parameters' shapes checked and broadcast across ranks at construction (``_verify_param_shape_across_processes``,
``_sync_module_states``), the buckets' rebuild after the first step (``Reducer._rebuild_buckets`` broadcasts their
order; the rebuilt buckets hold the same bytes), and the all-reduce's result (the fake group's work returns none: a
comm hook returns the bucket itself, as the default all-reduce does in place)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vramplan.core.plan.schema.plan import Plan


@dataclass(frozen=True)
class Parallel:
    """How the traced rank runs: ``mode`` fsdp2 or ddp (`trace_limits.parallel_mode`), over ``world`` ranks."""

    mode: str
    world: int
    plan: Plan

    @property
    def fsdp2(self) -> bool:
        return self.mode == "fsdp2"


@contextmanager
def fake_group(world: int) -> Iterator[None]:
    """A default process group of `world` ranks, this process rank 0, whose collectives do nothing."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

    if dist.is_initialized():
        raise RuntimeError("a process group is already running in this process: trace a data-parallel plan alone")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def shard_meta(model: Any, par: Parallel) -> Any:
    """FSDP2: `model` (on the meta device) sharded over a CPU device mesh of the group, each block then the root
    (`wrap_model`); its parameters become DTensor shards, given storage by ``to_empty`` later. DDP: unchanged."""
    if not par.fsdp2:
        return model
    from torch.distributed.device_mesh import init_device_mesh

    from vramplan.measure.distributed import Launch, wrap_model

    init_device_mesh("cpu", (par.world,))  # the default mesh fully_shard takes
    return wrap_model(model, Launch(par.world, "fsdp2", True, ()), par.plan)


def wrap_fake(model: Any, par: Parallel) -> Any:
    """The module the step calls: DDP over `model` (its parameters already fake: DDP allocates its buckets now),
    or `model` itself."""
    if par.mode != "ddp":
        return model
    from unittest import mock

    import torch.nn.parallel.distributed as ddp_module
    from torch._C._distributed_c10d import Reducer

    from vramplan.measure.distributed import Launch, wrap_model

    with (
        mock.patch.object(ddp_module, "_verify_param_shape_across_processes", lambda *a, **k: None),
        mock.patch.object(ddp_module, "_sync_module_states", lambda *a, **k: None),
    ):
        ddp = wrap_model(model, Launch(par.world, "ddp", None, ()), par.plan)

    # register_comm_hook reads the hook's annotations (a string under postponed evaluation is refused): a lambda
    ddp.register_comm_hook(None, lambda state, bucket: _done(bucket.buffer()))
    ddp.vramplan_patches = [mock.patch.object(Reducer, "_rebuild_buckets", lambda self: False)]
    return ddp


def _done(value: Any) -> Any:
    """A completed future of `value` (what an all-reduce hook returns)."""
    import torch

    fut: Any = torch.futures.Future()
    fut.set_result(value)
    return fut


@contextmanager
def running(runner: Any) -> Iterator[None]:
    """What the step needs around it: DDP's buckets not rebuilt (their order would be broadcast)."""
    patches = getattr(runner, "vramplan_patches", [])
    for p in patches:
        p.start()
    try:
        yield
    finally:
        for p in patches:
            p.stop()


@contextmanager
def micro_batch(runner: Any, par: Parallel | None, last: bool) -> Iterator[None]:
    """A micro-batch before the last of an accumulated step: DDP's ``no_sync`` (what accelerate's ``accumulate``
    does), FSDP2 without the gradient reduce-scatter when the plan syncs only the last
    (``strategy.fsdp_grad_sync = last``: ``set_requires_gradient_sync(False)``)."""
    if par is None or last:
        yield
        return
    if par.mode == "ddp":
        with runner.no_sync():
            yield
        return
    skip = par.plan.strategy.fsdp_grad_sync == "last"
    if skip:
        runner.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        if skip:
            runner.set_requires_gradient_sync(True)
