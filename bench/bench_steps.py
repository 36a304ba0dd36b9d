"""Where the time of bench_tui's two measurements goes, step by step: where a key's time goes, and
a cold start cut at each step (docs/benchmarks.md). Run: python bench/bench_steps.py [--cold]   (not a timed test)

- a key (default): for the planner's strategy keys and the yardstick's key (bench/minimal_app.py), pressed as
  bench_tui presses them, the moments after the key reaches the app's queue at which the key's action starts and
  ends, Textual's repaint starts (`Screen._compositor_refresh`) and ends (`Compositor.render_update`), and the frame
  with the new figure is produced; medians. Marks are taken by wrapping those methods in this process only.
- ``--cold``: a cold start of the planner (fresh interpreter, bytecode cached, as bench_tui's) cut at each step:
  Textual's import, pydantic's import, the plan's model classes, the app's other modules, the first frame; medians
  of fresh processes.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
KEYS = 60  # keys timed per app
COLD_RUNS = 6


def cold_child() -> None:
    """One cold start, printing the milliseconds of each step."""
    marks = [T_PROCESS]
    import textual.app  # noqa: F401

    marks.append(time.perf_counter())
    from vramplan.__main__ import skip_plugin_discovery

    skip_plugin_discovery()
    from vramplan.tui.startup import long_lived

    with long_lived():  # as `vramplan.__main__.run_app` imports the app
        import pydantic  # noqa: F401

        marks.append(time.perf_counter())
        import vramplan.core.plan.schema.plan

        marks.append(time.perf_counter())
        import vramplan.tui.app  # noqa: F401
    marks.append(time.perf_counter())
    sys.path.insert(0, str(HERE))
    import bench_tui

    t = time.perf_counter()
    asyncio.run(bench_tui.first_frame())
    marks += [t, time.perf_counter()]
    steps = [marks[1] - marks[0], marks[2] - marks[1], marks[3] - marks[2], marks[4] - marks[3], marks[6] - marks[5]]
    print(" ".join(f"{s * 1e3:.1f}" for s in steps))


def cold() -> None:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package has it (see bench_tui)
    runs = []
    for _ in range(COLD_RUNS + 1):
        out = subprocess.run(
            [sys.executable, __file__, "--cold-child"], capture_output=True, text=True, check=True, env=env
        )
        runs.append([float(x) for x in out.stdout.split()])
    runs = runs[1:]  # the first writes the bytecode caches
    names = ("Textual's import", "pydantic's import", "the plan's model classes", "the app's other modules")
    for i, name in enumerate((*names, "the first frame")):
        values = sorted(r[i] for r in runs)
        print(f"{name}: median {statistics.median(values):.0f} ms ({values[0]:.0f}-{values[-1]:.0f}, n={len(values)})")


Marks = list[tuple[str, float]]


def wrap(cls: type, name: str, label: str, marks: Marks, is_async: bool = False) -> None:
    """Mark ``label>`` and ``label<`` around ``cls.name`` (its signature kept: Textual counts a watcher's
    parameters, and an action's)."""
    f: Callable[..., Any] = getattr(cls, name)
    if is_async:

        @functools.wraps(f)
        async def g(*a: Any, **k: Any) -> Any:
            marks.append((label + ">", time.perf_counter()))
            try:
                return await f(*a, **k)
            finally:
                marks.append((label + "<", time.perf_counter()))

    else:

        @functools.wraps(f)
        def g(*a: Any, **k: Any) -> Any:
            marks.append((label + ">", time.perf_counter()))
            try:
                return f(*a, **k)
            finally:
                marks.append((label + "<", time.perf_counter()))

    setattr(cls, name, g)


def summary(title: str, keys: list[Marks]) -> None:
    """Per step, the median of its first mark after the key, in ms."""
    print(title)
    steps = (
        ("action>", "the action starts"),
        ("action<", "the action ends"),
        ("repaint>", "Textual's repaint starts"),
        ("render<", "the repaint ends"),
        ("frame", "the frame with the new figure"),
    )
    for label, words in steps:
        values = [next(t for lab, t in key if lab == label) for key in keys if any(lab == label for lab, _ in key)]
        print(f"  {words}: {statistics.median(values) * 1e3:.2f} ms (n={len(values)})")


def keys() -> None:
    sys.path.insert(0, str(HERE))
    import bench_tui
    import minimal_app
    from textual import events
    from textual._compositor import Compositor
    from textual.screen import Screen

    from vramplan.tui.screens.planner import PlannerScreen

    marks: Marks = []
    wrap(PlannerScreen, "action_cycle", "action", marks)
    wrap(minimal_app.MinimalApp, "action_bump", "action", marks)
    wrap(Screen, "_compositor_refresh", "repaint", marks)
    wrap(Compositor, "render_update", "render", marks)
    timed: list[Marks] = []

    async def timed_key(app: Any, pilot: Any, key: str, wanted: str) -> float:
        """`minimal_app.timed_key`, keeping the marks up to the frame, relative to the key."""
        app.wanted, app.painted = wanted, asyncio.Event()
        marks.clear()
        t0 = time.perf_counter()
        app.post_message(events.Key(key, key))
        await asyncio.wait_for(app.painted.wait(), 10)
        key_marks = [(lab, t - t0) for lab, t in marks if t <= app.painted_at]
        timed.append([*key_marks, ("frame", app.painted_at - t0)])
        await pilot.pause()
        return app.painted_at - t0

    bench_tui.timed_key = timed_key  # type: ignore[assignment]
    minimal_app.timed_key = timed_key  # type: ignore[assignment]
    asyncio.run(bench_tui.key_to_frame(KEYS))
    summary(f"planner, a strategy key (80x24, {len(timed)} keys):", timed)
    timed.clear()
    asyncio.run(minimal_app.key_to_frame(KEYS))
    summary(f"yardstick, a key updating its Static ({len(timed)} keys):", timed)


if __name__ == "__main__":
    if "--cold-child" in sys.argv:
        cold_child()
    elif "--cold" in sys.argv:
        cold()
    else:
        from vramplan.__main__ import skip_plugin_discovery

        skip_plugin_discovery()
        keys()
