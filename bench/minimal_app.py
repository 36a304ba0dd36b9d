"""The yardstick for bench_tui.py: a one-widget Textual app (one Static), started the same way as the planner, and a
key that updates its Static. It imports Textual only, so ``python bench/minimal_app.py`` times a cold process (the
interpreter, imports, first painted frame) the way ``bench_tui.py --cold`` times the planner's."""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from textual.app import App, ComposeResult  # noqa: E402
from textual.widgets import Static  # noqa: E402

GIB = 1 << 30


def figure(total: int) -> str:
    return f"{total / GIB:.1f} / "


class Painted:
    """Notes when a frame whose terminal bytes contain `wanted` is produced (mixed into an `App`)."""

    wanted = ""
    painted: asyncio.Event | None = None
    painted_at = 0.0

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)  # type: ignore[misc]
        if renderable is None or not self.wanted or self.painted is None or self.painted.is_set():
            return
        if self.wanted in renderable.render_segments(self.console):  # type: ignore[attr-defined]
            self.painted_at = time.perf_counter()
            self.painted.set()


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
        while len(times) < samples:
            app.wanted = figure((app.count + 1) * GIB)
            app.painted = asyncio.Event()
            t0 = time.perf_counter()
            await pilot.press("c")
            await asyncio.wait_for(app.painted.wait(), 10)
            times.append(app.painted_at - t0)
    return times


if __name__ == "__main__":  # a cold process: its start to the first painted frame, in seconds
    asyncio.run(first_frame())
    print(time.perf_counter() - T_PROCESS)
