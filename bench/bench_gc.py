"""The garbage collector's full passes while keys are pressed: 200 strategy keys (as bench_tui.py presses them) in
the planner, with what its start made frozen (the `vramplan` command's app, ``freeze=True``) and without (an app
in a process that runs several), each in a fresh process; how many full collections ran, their total and longest
time. Run: python bench/bench_gc.py   (tui/startup.py quotes it; not a timed test)"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import BenchApp, press_strategy_keys
from minimal_app import READ_S

PRESSES = 200


class Unfrozen(BenchApp):
    def __init__(self) -> None:
        super(BenchApp, self).__init__(freeze=False)


async def full_collections(app: BenchApp) -> list[float]:
    """Seconds of each full collection while `PRESSES` keys that change the per-GPU figure are pressed."""
    durations: list[float] = []
    started: list[float] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started.append(time.perf_counter())
        else:
            durations.append(time.perf_counter() - started.pop())

    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.planner.pane_widget(app.planner.pane)
        await pilot.pause(READ_S)
        gc.callbacks.append(watch)
        await press_strategy_keys(app, pilot, PRESSES)
        gc.callbacks.remove(watch)
    return durations


def one(frozen: bool) -> str:
    d = asyncio.run(full_collections(BenchApp() if frozen else Unfrozen()))
    longest = max(d, default=0.0)
    return f"{len(d)} full collections in {PRESSES} keys, {sum(d) * 1e3:.0f} ms in all, {longest * 1e3:.1f} ms at most"


def main() -> None:
    if "--one" in sys.argv:  # one app per process: a frozen app's end unfreezes the imports' objects too
        print(one("frozen" in sys.argv))
        return
    for name, mode in (("frozen (the vramplan command)", "frozen"), ("not frozen", "unfrozen")):
        for _ in range(2):
            out = subprocess.run([sys.executable, __file__, "--one", mode], capture_output=True, text=True, check=True)
            print(f"{name}: {out.stdout.strip()}")


if __name__ == "__main__":
    main()
