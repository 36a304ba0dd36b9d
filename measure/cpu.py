"""The CPU's memory figures, by the method of the oracle (bench/measure/measure_step.py, its profile pass):
``torch.profiler(profile_memory=True)`` started before the model is built, so the CPU allocator's running total
(``total_allocated``, carried by every allocation and free event) counts every live tensor; each phase of each step
runs in a ``record_function`` range named ``VP:step:phase:micro_batch``, and an event belongs to the phase whose range
holds its timestamp. The counter is process-wide and keeps blocks of earlier sessions that were freed after they
stopped, so totals are taken relative to its value when this session started."""

from __future__ import annotations

import bisect
import itertools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function

PREFIX = "VP:"


@dataclass(frozen=True)
class PhaseFigures:
    """One phase of one step: the running total just before its range, its maximum inside and at its end."""

    step: int
    phase: str
    micro_batch: int | None
    start: int
    peak: int
    end: int
    num_alloc_events: int
    first_peak_ns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "micro_batch": self.micro_batch,
            "start": self.start,
            "peak": self.peak,
            "end": self.end,
            "num_alloc_events": self.num_alloc_events,
        }


@dataclass(frozen=True)
class StepFigures:
    """One optimizer step: its baseline (the first phase's start), peak, the phase that first reached it, its end."""

    step: int
    baseline_bytes: int
    peak_bytes: int
    peak_phase: str
    peak_micro_batch: int | None
    end_bytes: int
    phases: tuple[PhaseFigures, ...]


@dataclass(frozen=True)
class ProfileFigures:
    steps: tuple[StepFigures, ...]
    consistent: bool  # every event's total = the previous one's + its size
    attention_kernels: tuple[str, ...]
    num_alloc_events: int
    counter_offset: int
    session_end_bytes: int


class CpuProfiler:
    """The profiler session of one measurement: `start` before the build, `phase` around each phase, `stop` (which
    analyses the events: its cost grows with them, so the run stops it after the first measured steps, and the
    later steps run, and are timed, without it), then `figures`."""

    def __init__(self) -> None:
        self.prof: Any = None
        self.result: ProfileFigures | None = None

    def start(self) -> None:
        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with quiet_stderr():
            self.prof.__enter__()

    @contextmanager
    def phase(self, step: int, name: str, micro_batch: int) -> Iterator[None]:
        if self.prof is None:  # stopped: the step runs unprofiled
            yield
            return
        with record_function(f"{PREFIX}{step}:{name}:{micro_batch}"):
            yield

    @property
    def running(self) -> bool:
        return self.prof is not None

    def stop(self) -> None:
        if self.prof is not None:
            with quiet_stderr():
                self.prof.__exit__(None, None, None)
            self.result = analyse(self.prof)
            self.prof = None

    def figures(self) -> ProfileFigures | None:
        return self.result


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment: the profiler's C++ side (kineto) prints a ``profiler_start`` /
    ``profiler_stop`` line at each start and stop, between the command's progress lines, and no setting stops it."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@dataclass(frozen=True)
class Events:
    """What one profiler session recorded, in the order of its event tree: the CPU allocator's events (time, size:
    negative for a free, running total), the ranges whose name starts with the prefix asked (start, end, name) and
    the SDPA kernels that ran (``aten::_scaled_dot_product_*``, backward left out)."""

    allocs: list[tuple[int, int, int]]
    ranges: list[tuple[int, int, str]]
    kernels: set[str]


def events(prof: Any, prefix: str = PREFIX) -> Events:
    """Every allocation event of the CPU allocator, every range named ``prefix...`` and the SDPA kernels of `prof`
    (a stopped ``torch.profiler.profile(profile_memory=True)``), not sorted: each caller orders them its way."""
    from torch._C._profiler import _EventType

    out = Events([], [], set())
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation:
            x = e.extra_fields
            if x.device.type == "cpu":
                out.allocs.append((e.start_time_ns, x.alloc_size, x.total_allocated))
        elif e.name.startswith(prefix):
            out.ranges.append((e.start_time_ns, e.end_time_ns, e.name))
        elif e.name.startswith("aten::_scaled_dot_product") and not e.name.endswith("_backward"):
            out.kernels.add(e.name.split("::")[-1])
    return out


def from_session_start(allocs: list[tuple[int, int, int]]) -> tuple[list[tuple[int, int, int]], int]:
    """The allocation events (in time order) with their running totals taken from this session's start, and the
    counter's value then (the process-wide counter keeps blocks that earlier sessions saw allocated)."""
    offset = allocs[0][2] - allocs[0][1] if allocs else 0
    return [(t, n, tot - offset) for t, n, tot in allocs], offset


def analyse(prof: Any) -> ProfileFigures:
    """Allocation events in time order, and each phase's start/peak/end from the running total."""
    ev = events(prof)
    ranges: list[tuple[int, int, int, str, int | None]] = []
    for t0, t1, name in ev.ranges:
        _, step_text, ph, mb_text = name.split(":")
        ranges.append((t0, t1, int(step_text), ph, int(mb_text) or None))
    allocs, offset = from_session_start(sorted(ev.allocs, key=lambda a: a[0]))
    consistent = all(b[2] == a[2] + b[1] for a, b in itertools.pairwise(allocs))
    times = [a[0] for a in allocs]
    phases = []
    for t0, t1, step, ph, mb in sorted(ranges):
        i, j = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
        start = allocs[i - 1][2] if i else 0
        in_range = allocs[i:j]
        peak = max([start] + [a[2] for a in in_range])
        first = next((a[0] for a in in_range if a[2] == peak), t0)
        end = in_range[-1][2] if in_range else start
        phases.append(PhaseFigures(step, ph, mb, start, peak, end, sum(a[1] > 0 for a in in_range), first))
    return ProfileFigures(
        steps=per_step(phases),
        consistent=consistent,
        attention_kernels=tuple(sorted(ev.kernels)),
        num_alloc_events=len(allocs),
        counter_offset=offset,
        session_end_bytes=allocs[-1][2] if allocs else 0,
    )


def per_step(phases: list[PhaseFigures]) -> tuple[StepFigures, ...]:
    """The phases grouped by step (steps whose phases all ran: a stopped run's last step may be incomplete)."""
    out = []
    for step in sorted({p.step for p in phases}):
        ps = tuple(p for p in phases if p.step == step)
        top = max(p.peak for p in ps)
        at = min((p for p in ps if p.peak == top), key=lambda p: p.first_peak_ns)
        out.append(StepFigures(step, ps[0].start, top, at.phase, at.micro_batch, ps[-1].end, ps))
    return tuple(out)


def is_out_of_memory(exc: BaseException) -> bool:
    """The CPU allocator's failure: MemoryError, or c10's ``DefaultCPUAllocator: can't allocate memory``."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))
