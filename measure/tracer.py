"""Recording every allocation and free of a step run on fake tensors (`vramplan trace`).

`Recorder` is a ``TorchDispatchMode`` entered above ``FakeTensorMode``: every op reaches it with its outputs, and each
output whose storage it has not seen is a new allocation (its bytes: the storage's ``nbytes``; views and in-place
results share a storage it knows). A ``weakref`` on the storage records the free when the storage dies (fake tensors'
storages keep their Python object while alive, as torch.distributed._tools.mem_tracker relies on). Each allocation
carries the phase the runner set (build, forward, backward, optimizer, zero_grad; its step and micro-batch), the op
that made it, the stream it was made on (FSDP2's all-gather and reduce-scatter streams: ``torch.cpu.current_stream``,
which FSDP2's ``device_handle.stream(...)`` sets on the CPU as ``torch.cuda.stream`` does on a GPU) and the innermost
module running (forward and pre hooks on every module; in backward, hooks on the
module's outputs' and inputs' gradients, as torch.utils.module_tracker does, so a checkpointed block's recomputation
counts in its module). What a tensor is (parameter, gradient, optimizer state, activation, temporary) is decided by
`Recorder.settle_roles` at the end, from what holds it and when it lived.

Two things a dispatch mode does not see by itself, as torch.distributed._tools.mem_tracker finds too: a storage
resized in place (FSDP2 frees and re-allocates each unsharded parameter with ``UntypedStorage.resize_``:
_fully_shard/_fsdp_param.py ``free_storage`` / ``alloc_storage``), which `Recorder.resizing` records as a free and a
new allocation; and a DTensor's bytes, which are its local shard's (`local`).

With ``cuda=True`` each op's outputs are corrected to CUDA's (`vramplan.measure.trace_kernels`): their layout or
dtype, the kernel's own temporaries, the cuBLAS workspace at the first matmul."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from vramplan.measure import trace_kernels

ALLOC, FREE = 1, 0
PHASES = ("build", "forward", "backward", "optimizer", "zero_grad")
ROLES = (
    "parameter",
    "gathered",  # a parameter all-gathered whole for compute (FSDP2's unsharded parameters)
    "buffer",
    "input",
    "gradient",
    "optimizer_state",
    "activation",
    "recomputed",  # made by a checkpointed block's forward run again in backward, alive after it (what it saves)
    "temporary",
    "workspace",
)
BACKWARD = PHASES.index("backward")


@dataclass
class Alloc:
    """One allocation: its bytes, the phase, step and micro-batch it was made in, the op and module that made it;
    ``freed_phase``/``freed_step``: when it died (None: alive at the end); ``role``: what it is (`ROLES`)."""

    nbytes: int
    phase: int
    step: int
    micro: int
    op: str
    module: str
    freed_phase: int | None = None
    freed_step: int | None = None
    role: str = "temporary"
    window: int = 0  # the recomputation it was made in (0: none)
    stream: int = 0  # 0: the default stream; FSDP2's own streams from 1 on, in the order first used


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (what its rank allocates), any other tensor itself."""
    inner = getattr(t, "_local_tensor", None)
    return inner if isinstance(inner, torch.Tensor) else t


class Recorder(TorchDispatchMode):  # type: ignore[misc]
    """The events of a traced run: ``events`` as (ALLOC or FREE, allocation id, phase, step), ``allocs`` by id.
    ``cuda``: correct each op to CUDA's kernels (``hopper``: the cuBLAS workspace of Hopper and later);
    ``stop_check`` is called every 4,096 ops (it raises to stop the run); ``gathers``: the model is FSDP2's, so
    the parameters a module holds when its forward starts are all-gathered copies."""

    def __init__(
        self,
        cuda: bool = True,
        hopper: bool = True,
        stop_check: Callable[[], None] | None = None,
        gathers: bool = False,
    ) -> None:
        super().__init__()
        self.cuda, self.hopper, self.stop_check = cuda, hopper, stop_check
        self.gathers = gathers  # FSDP2: a module's parameters when its forward starts are all-gathered ("gathered")
        self.events: list[tuple[int, int, int, int]] = []
        self.allocs: list[Alloc] = []
        self.phase = self.step = self.micro = self.ops = 0
        self.module = ""
        self._ids: Any = WeakIdKeyDictionary()  # storage -> [its allocation now (-1: resized to 0), its last]
        self._refs: dict[int, Any] = {}
        self._streams: dict[int, int] = {id(torch.cpu.current_stream()): 0}
        self._workspace = False
        self.closed = False  # set when the run ends: what dies afterwards (the model itself) is not the step's
        self.recompute_depth = 0  # modules' forwards running inside backward (a checkpoint's recomputation)
        self.recompute_window = 0

    def set_phase(self, name: str, step: int, micro: int = 0) -> None:
        self.phase, self.step, self.micro = PHASES.index(name), step, micro

    # -- the dispatch ----------------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        self.ops += 1
        if self.ops % 4096 == 0 and self.stop_check is not None:
            self.stop_check()
        out = trace_kernels.grouped_mm_output(func, args, kwargs or {})
        if out is None:
            out = func(*args, **(kwargs or {}))
        if self.cuda:
            if not self._workspace and func in trace_kernels.MATMULS:
                self._workspace = True
                self.allocate_workspace("cublas workspace", trace_kernels.cublas_workspace_bytes(self.hopper))
            out = trace_kernels.cuda_outputs(func, args, out)
            temps = trace_kernels.cuda_temporaries(func, args, out)
        else:
            temps = ()
        name = func.__name__ if hasattr(func, "__name__") else str(func)
        for n in temps:
            i = self._new(n, name)
            self._free(i)
        self._track_all(out, name)
        return out

    def _track_all(self, out: Any, op: str) -> None:
        if isinstance(out, torch.Tensor):
            self.track(out, op)
        elif isinstance(out, (tuple, list)):
            for t in out:
                self._track_all(t, op)

    def allocate_workspace(self, what: str, n_bytes: int) -> None:
        """An allocation that lives to the end (a library's workspace)."""
        i = self._new(n_bytes, what)
        self.allocs[i].role = "workspace"

    def track(self, t: torch.Tensor, op: str) -> int:
        """The allocation id of `t`'s storage (a DTensor's: its shard's), recording it as new if unseen."""
        st = local(t).untyped_storage()
        cell = self._ids.get(st)
        if cell is None:
            i = self._new(st.nbytes(), op)
            cell = [i, i]  # the allocation now (-1: resized to 0), the last one
            self._ids[st] = cell
            self._refs[id(cell)] = weakref.ref(st, self._on_free(cell))
        return int(cell[0])

    def storage_id(self, t: torch.Tensor) -> int | None:
        """The allocation id of `t`'s storage (a DTensor's: its shard's), if recorded and not resized to 0."""
        cell = self._ids.get(local(t).untyped_storage())
        return None if cell is None or cell[0] < 0 else int(cell[0])

    def resizing(self) -> Any:
        """A context in which ``UntypedStorage.resize_`` of a recorded storage is a free of what it held and, to a
        non-zero size, a new allocation (of the same role when it was an all-gathered parameter)."""
        from unittest import mock

        original = torch.UntypedStorage.resize_

        def resize_(st: Any, size: int) -> Any:
            out = original(st, size)
            cell = self._ids.get(st)
            if cell is not None:
                if cell[0] >= 0:
                    self._free(cell[0])
                cell[0] = -1
                if size:
                    was = self.allocs[cell[1]]
                    cell[0] = cell[1] = self._new(int(size), "resize_")
                    if was.role == "gathered":
                        self.allocs[cell[0]].role = "gathered"
            return out

        return mock.patch.object(torch.UntypedStorage, "resize_", resize_)

    def _stream(self) -> int:
        s = torch.cpu.current_stream()
        return self._streams.setdefault(id(s), len(self._streams))

    def _new(self, n_bytes: int, op: str) -> int:
        i = len(self.allocs)
        a = Alloc(n_bytes, self.phase, self.step, self.micro, op, self.module, stream=self._stream())
        if self.recompute_depth and self.phase == BACKWARD:
            a.role, a.window = "recomputed", self.recompute_window
        self.allocs.append(a)
        self.events.append((ALLOC, i, self.phase, self.step))
        return i

    def _free(self, i: int) -> None:
        if self.closed:
            return
        a = self.allocs[i]
        if a.role == "recomputed" and self.recompute_depth and a.window == self.recompute_window:
            a.role = "temporary"  # freed within the recomputation: not what it saves
        if a.freed_phase is None:
            a.freed_phase, a.freed_step = self.phase, self.step
            self.events.append((FREE, i, self.phase, self.step))

    def _on_free(self, cell: list[int]) -> Callable[[Any], None]:
        def on_free(_: Any) -> None:
            self._refs.pop(id(cell), None)
            if cell[0] >= 0:
                self._free(cell[0])

        return on_free

    # -- what each allocation is ---------------------------------------------------------------------------------
    def mark(self, tensors: Any, role: str) -> None:
        """Each storage of `tensors` (recorded) is of `role`."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                i = self.storage_id(t)
                if i is not None:
                    self.allocs[i].role = role

    def mark_gathered(self, module: Any) -> None:
        """`module`'s own parameters, if they are not its shards (FSDP2 swaps in the unsharded parameters, views of
        the all-gather outputs, before the forward: _fsdp_param.py ``to_unsharded``), are all-gathered copies."""
        for p in module._parameters.values():
            if p is not None:
                i = self.storage_id(p)
                if i is not None and self.allocs[i].role in ("temporary", "activation", "recomputed"):
                    self.allocs[i].role = "gathered"

    def settle_roles(self) -> None:
        """What is left unmarked: made in the forward and alive at its end (saved for backward, the loss, the
        logits): an activation; everything else a temporary."""
        fwd = PHASES.index("forward")
        for a in self.allocs:
            if a.role != "temporary":
                continue
            if a.phase == fwd and (a.freed_phase != fwd or a.freed_step != a.step):
                a.role = "activation"


class ModuleNames:
    """The innermost module running, in forward (global forward pre/post hooks) and backward (hooks on the
    gradients of a module's outputs, when its backward starts, and of its inputs, when it ends), as
    torch.utils.module_tracker.ModuleTracker does; names are the model's ``named_modules`` paths."""

    def __init__(self, model: Any, recorder: Recorder) -> None:
        self.names = {id(m): n for n, m in model.named_modules()}
        self.rec = recorder
        self.stack: list[str] = []
        self.handles: list[Any] = []
        self.grad_hooks: list[Any] = []

    def _push(self, name: str) -> None:
        self.stack.append(name)
        self.rec.module = name

    def _pop(self, name: str) -> None:
        if name in self.stack:
            idx = len(self.stack) - 1 - self.stack[::-1].index(name)
            del self.stack[idx]
        self.rec.module = self.stack[-1] if self.stack else ""

    def __enter__(self) -> ModuleNames:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()
        self.clear_grad_hooks()

    def clear_grad_hooks(self) -> None:
        for h in self.grad_hooks:
            h.remove()
        self.grad_hooks.clear()
        self.stack.clear()
        self.rec.module = ""

    def _tensors(self, x: Any) -> list[torch.Tensor]:
        flat, _ = tree_flatten(x)
        return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]

    def _pre(self, mod: Any, inputs: Any) -> None:
        name = self.names.get(id(mod))
        if name is None:
            return
        rec = self.rec
        if rec.phase == BACKWARD:  # a checkpoint's recomputation
            if not rec.recompute_depth:
                rec.recompute_window += 1
            rec.recompute_depth += 1
        self._push(name)
        if rec.gathers:
            rec.mark_gathered(mod)
        if torch.is_grad_enabled() and rec.phase != BACKWARD:  # a recomputed graph is not run backward, and the
            # hook's closure would keep its nodes (their saved tensors) alive
            ts = self._tensors(inputs)
            if ts:
                self.grad_hooks.append(torch.autograd.graph.register_multi_grad_hook(ts, lambda _: self._pop(name)))

    def _post(self, mod: Any, inputs: Any, output: Any) -> None:
        name = self.names.get(id(mod))
        if name is None:
            return
        if self.rec.phase == BACKWARD and self.rec.recompute_depth:
            self.rec.recompute_depth -= 1
        self._pop(name)
        if torch.is_grad_enabled() and self.rec.phase != BACKWARD:
            ts = self._tensors(output)
            if ts:
                self.grad_hooks.append(torch.autograd.graph.register_multi_grad_hook(ts, lambda _: self._push(name)))
