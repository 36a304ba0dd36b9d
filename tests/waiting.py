"""Waiting in tests for what happens, never for how long something takes.

A test waits for an event: a process's output line or its exit, a thread's Event, a worker's end, the screen showing
what the test expects (`until`). `HANG_S` bounds each wait only so that a hang fails instead of stopping the suite: a
passing run never comes near it on any machine, however loaded (the waits it bounds take milliseconds to seconds
idle). How fast something is belongs to bench/, measured as a ratio to a floor run in the same process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

HANG_S = 300.0
POLL_S = 0.01  # between two looks at the screen: the app runs its timers and messages meanwhile

T = TypeVar("T")


class Pausing(Protocol):
    async def pause(self, delay: float | None = None) -> None: ...


async def until(pilot: Pausing, condition: Callable[[], object], what: str = "the view to update") -> None:
    """Let the app run (its messages, timers, workers' results) until ``condition()`` is true (a widget it asks for
    and cannot find yet counts as false). For what the app does after a frame or after a burst of changes
    (`vramplan.tui.widgets.settle.Settled`: a timer), in a worker thread, or on a polling timer (the detected GPUs),
    where no one message says it is done."""

    def check() -> None:
        assert condition(), f"waited {HANG_S:g} s for {what}"

    await eventually(pilot, check)


async def eventually(pilot: Pausing, check: Callable[[], T]) -> T:
    """``check()``'s result once it passes: it asserts what the screen should show (a widget not there yet fails
    it too), and runs again while the app works (as `until`); after `HANG_S`, its last failure is raised as it is."""
    from textual.css.query import NoMatches

    loop = asyncio.get_running_loop()
    give_up = loop.time() + HANG_S
    while True:
        try:
            return check()
        except (AssertionError, NoMatches):
            if loop.time() > give_up:
                raise
        await pilot.pause(POLL_S)


def returns(fn: Callable[[], T], release: Callable[[], object], what: str) -> T:
    """``fn()``'s result, run in a thread; if it has not returned after `HANG_S` (it is blocked: a FIFO opened
    without O_NONBLOCK waits for a writer forever), ``release()`` unblocks it and the test fails."""
    result: list[T] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        release()
        thread.join(HANG_S)
        raise AssertionError(f"{what} blocked")
    assert result, f"{what} raised (see the thread's traceback above)"
    return result[0]
