"""Time opening the planner's dialogs: a key reaching the app to the dialog's first painted frame, the first
opening of each dialog (its module imported, its CSS read) and a second one, each in a fresh process started the
way bench_tui.py starts the planner (headless, 80x24, keys pressed once the app's start-up work is done and
`minimal_app.READ_S` later). Run: python bench/bench_dialogs.py   (docs/benchmarks.md; not a timed test)"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from textual import events

from vramplan.tui.app import VramplanApp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minimal_app import READ_S

ROOT = Path(__file__).resolve().parent.parent
DIALOGS = {  # key -> the screen it opens
    "ctrl+s": "ExportScreen",
    "ctrl+o": "OpenScreen",
    "question_mark": "HelpScreen",
    "g": "GpuGuideScreen",
}


class DialogApp(VramplanApp):
    """The planner, noting when a frame of the screen named `waiting_for` is painted."""

    waiting_for = ""
    painted_at = 0.0

    def _display(self, screen: object, renderable: object) -> None:
        super()._display(screen, renderable)  # type: ignore[arg-type]
        if renderable is not None and not self.painted_at and type(self.screen).__name__ == self.waiting_for:
            self.painted_at = time.perf_counter()


async def open_twice(key: str) -> tuple[float, float]:
    """Seconds from ``key`` reaching the app to the dialog's first frame: its first opening, then a second one."""
    app = DialogApp()
    times = []
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.planner.pane_widget(app.planner.pane)
        await pilot.pause(READ_S)
        for _ in range(2):
            app.waiting_for, app.painted_at = DIALOGS[key], 0.0
            start = time.perf_counter()
            app.post_message(events.Key(key, None))  # as the terminal driver puts a key in the app's queue
            while not app.painted_at:
                await asyncio.sleep(0.001)
            times.append(app.painted_at - start)
            await pilot.pause(0.2)
            app.pop_screen()
            await pilot.pause(0.2)
    return times[0], times[1]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(*asyncio.run(open_twice(sys.argv[2])))
        return
    runs = int(os.environ.get("BENCH_ROUNDS", "9"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    for key, screen in DIALOGS.items():
        first, second = [], []
        for _ in range(runs):
            out = subprocess.run(
                [sys.executable, __file__, "--one", key], capture_output=True, text=True, check=True, cwd=ROOT, env=env
            )
            a, b = map(float, out.stdout.split())
            first.append(a)
            second.append(b)
        print(
            f"{screen:15} ({key}): first opening median {statistics.median(first) * 1e3:.1f} ms, "
            f"second {statistics.median(second) * 1e3:.1f} ms (n={runs})"
        )


if __name__ == "__main__":
    main()
