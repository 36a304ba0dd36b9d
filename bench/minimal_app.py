"""The yardstick for bench_tui.py: a one-widget Textual app (one Static), started the same way as the planner, and a
key that updates its Static. It imports Textual only, so ``python bench/minimal_app.py`` times a cold process (the
interpreter, imports, first painted frame) the way ``bench_tui.py --cold`` times the planner's."""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import TYPE_CHECKING, Any, ClassVar  # noqa: E402

from textual import events  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.widgets import Static  # noqa: E402

if TYPE_CHECKING:  # only a type here: the cold start imports what the app itself imports
    from textual.pilot import Pilot

GIB = 1 << 30
READ_S = 0.1  # before the first key: a person reads the first screen (both apps wait it, once the app is idle)
EXIT_AT_FRAME = "--exit-at-frame" in sys.argv  # see `Painted`
# Each timed key's CPU seconds on the app's thread (`time.thread_time`), beside its wall-clock seconds: on a machine
# other processes load, the wall clock also counts the time the app waited for a core; its own work does not move
CPU_TIMES: list[float] = []


def figure(total: int) -> str:
    return f"{total / GIB:.1f} / "


class Painted:
    """Notes when a frame whose terminal bytes contain `wanted` is produced (mixed into an `App`). With
    `EXIT_AT_FRAME` set (``--exit-at-frame``), the process ends right there, without the app's and the
    interpreter's teardown (bench_instructions.py counts a start up to its first frame)."""

    wanted = ""
    painted: asyncio.Event | None = None
    painted_at = 0.0
    painted_cpu = 0.0  # `time.thread_time()` at that frame

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)  # type: ignore[misc]
        if renderable is None or not self.wanted or self.painted is None or self.painted.is_set():
            return
        if self.wanted in renderable.render_segments(self.console):  # type: ignore[attr-defined]
            self.painted_at, self.painted_cpu = time.perf_counter(), time.thread_time()
            self.painted.set()
            if EXIT_AT_FRAME:
                os._exit(0)


async def timed_key(app: Painted, pilot: Pilot[Any], key: str, wanted: str) -> float:
    """Seconds from a key reaching the app to the first frame showing `wanted`. The key is put in the app's queue
    as the terminal driver puts it (`post_message`), not with `Pilot.press`: after sending a key, Pilot asks every
    widget on the screen to process a callback (`_wait_for_screen`), and those ~150 callbacks ran before the
    planner's frame, a cost of the test harness that grows with the widget count (one widget for the yardstick).
    The app is then left to finish (`pilot.pause`), untimed, before the next key."""
    app.wanted = wanted
    app.painted = asyncio.Event()
    t0, c0 = time.perf_counter(), time.thread_time()
    app.post_message(events.Key(key, key))  # type: ignore[attr-defined]
    await asyncio.wait_for(app.painted.wait(), 10)
    CPU_TIMES.append(app.painted_cpu - c0)
    await pilot.pause()
    return app.painted_at - t0


class MinimalApp(Painted, App[None]):
    """One Static; ``c`` shows the next figure in it."""

    BINDINGS: ClassVar = [("c", "bump")]

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def compose(self) -> ComposeResult:
        yield Static(figure(0), id="figure")

    def action_bump(self) -> None:
        self.count += 1
        self.query_one("#figure", Static).update(figure(self.count * GIB))


async def first_frame(size: tuple[int, int] = (80, 24)) -> float:
    t0 = time.perf_counter()
    app = MinimalApp()
    app.wanted = figure(0)
    app.painted = asyncio.Event()
    async with app.run_test(size=size):
        await asyncio.wait_for(app.painted.wait(), 30)
    return app.painted_at - t0


async def key_to_frame(samples: int, size: tuple[int, int] = (80, 24)) -> list[float]:
    app = MinimalApp()
    times: list[float] = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.pause(READ_S)
        while len(times) < samples:
            times.append(await timed_key(app, pilot, "c", figure((app.count + 1) * GIB)))
    return times


def size_arg(argv: list[str]) -> tuple[int, int]:
    """``--size 160x48`` (the terminal a cold start is timed in; 80x24 by default)."""
    if "--size" not in argv:
        return (80, 24)
    w, _, h = argv[argv.index("--size") + 1].partition("x")
    return int(w), int(h)


if __name__ == "__main__":  # a cold process: its start to the first painted frame, in seconds
    if "--exit-at-imports" in sys.argv:  # bench_instructions.py: the imports alone
        os._exit(0)
    asyncio.run(first_frame(size_arg(sys.argv)))
    print(time.perf_counter() - T_PROCESS)
