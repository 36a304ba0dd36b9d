"""Benchmark the planner app, headless: start to first painted frame, and a key press to the frame that shows the
new figure. Run: python bench/bench_tui.py   (docs/benchmarks.md describes it; not a timed test)

"Painted" means the compositor produced a frame and it was turned into the bytes a terminal would get: the headless
driver skips that last step, so the benchmark's app does it (`render_segments`) and looks for the figure in them.

- start (in process): `VramplanApp()` to the first frame showing the headline, Textual and the app imported.
- start (cold process): interpreter start, imports included, to that first frame (fresh `python` each run); and the
  same with a fake ``nvidia-smi`` on PATH that hangs for 5 s (detection on): it must not delay the first frame.
- the yardstick, measured in the same run, interleaved: a one-widget Textual app (`MinimalApp`: one Static) started
  the same way (bench/minimal_app.py), to its first frame (cold process, and in process), and a key that updates
  its Static to the frame showing the new text; the ratios of the medians (planner / yardstick; the first frame
  from a cold process, imports included, as a user starts it, at 80x24 and at 160x48, where the wide layout shows
  every pane) are printed (``--ratios``: stop there).
- key to frame: a strategy key reaching the app (`minimal_app.timed_key`) to the first frame whose bytes contain
  the new per-GPU total, for the keys c z a i x (checkpointing, ZeRO, attention, int8 activations, fused
  cross-entropy) in turn from the default plan; in wall-clock time and in CPU time on the app's thread (which
  other processes' load does not add to: on a busy shared machine, the ratio to compare). The keys are pressed
  once the app has started: its first frame painted, the work it leaves for after that frame done (the Model
  pane's config.json rows, mounted after the first frame) and then `READ_S` (0.1 s), as a person reads the first
  screen before typing; the yardstick is pressed the same way (it leaves no work, and waits `READ_S` too). A key
  pressed at the very first frame, while those rows are being mounted, is timed apart ("first key at the first
  frame").
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

# The app's module first, as `vramplan` imports it (`vramplan.__main__.run_app`): it loads pydantic, the plan's
# classes and Textual with the collector paused (`vramplan.tui.startup.long_lived`). Imported before it, the core
# modules loaded with the collector running, a cost that a user's start does not have.
# isort: off
from vramplan.__main__ import skip_plugin_discovery  # noqa: E402

skip_plugin_discovery()  # as `vramplan` does first (`vramplan.__main__.main`)
from vramplan.tui.app import VramplanApp  # noqa: E402
from vramplan.core.memory.peak import estimate  # noqa: E402
from vramplan.tui.choices import next_valid  # noqa: E402
# isort: on

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minimal_app  # noqa: E402
from minimal_app import READ_S, Painted, figure, size_arg, timed_key  # noqa: E402

if TYPE_CHECKING:  # only a type here: the cold start imports what the app itself imports
    from textual.pilot import Pilot

ROOT = Path(__file__).resolve().parent.parent

WIDE = (160, 48)  # the wide and tall layout: every pane at once

KEYS = {
    "c": "strategy.gradient_checkpointing",
    "z": "strategy.zero_stage",
    "a": "strategy.attention",
    "i": "strategy.activation_compression",
    "x": "strategy.fused_cross_entropy",
}


class BenchApp(Painted, VramplanApp):
    """The real app, as the `vramplan` command makes it (alone in its process: ``freeze``, see tui/startup.py)."""

    def __init__(self) -> None:
        super().__init__(freeze=True)


async def first_frame(size: tuple[int, int] = (80, 24)) -> tuple[float, BenchApp]:
    t0 = time.perf_counter()
    app = BenchApp()
    app.wanted = figure(estimate(app.start_plan).total)
    app.painted = asyncio.Event()
    async with app.run_test(size=size):
        await asyncio.wait_for(app.painted.wait(), 30)
    return app.painted_at - t0, app


async def key_to_frame(samples: int, size: tuple[int, int] = (80, 24), started: bool = True) -> list[float]:
    """Press the strategy keys in turn; time each press that changes the one-decimal per-GPU total (a press that
    leaves it unchanged, e.g. fused cross-entropy when the peak is the optimizer step, is made but not timed).
    ``started``: wait until the app's start-up work is done (the shown pane built) before the first key."""
    app = BenchApp()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if started:
            await app.planner.pane_widget(app.planner.pane)
            await pilot.pause(READ_S)
        return await press_strategy_keys(app, pilot, samples)


async def press_strategy_keys(app: BenchApp, pilot: Pilot[Any], samples: int) -> list[float]:
    """The strategy keys pressed in turn until at least ``samples`` presses changed the one-decimal per-GPU total:
    the seconds from each of those to its frame (`timed_key`)."""
    times: list[float] = []
    while len(times) < samples:
        for key, setting in KEYS.items():
            plan = app.planner.plan
            nxt = next_valid(plan, setting)
            assert not isinstance(nxt, Exception), nxt
            new = figure(estimate(nxt).total)
            if new == figure(estimate(plan).total):
                await pilot.press(key)
                continue
            times.append(await timed_key(app, pilot, key, new))
            assert app.planner.plan == nxt
    return times


def cold_start(env: dict[str, str] | None = None, script: str = __file__, size: tuple[int, int] = (80, 24)) -> float:
    """One fresh interpreter: process start to the first painted frame (this script with --cold, or the
    yardstick's). Python may cache bytecode, as it does for an installed package (pip compiles it at install;
    Textual's is): with ``PYTHONDONTWRITEBYTECODE=1`` set, as on this project's VM, every start would compile
    vramplan's hundred modules from source while Textual's come compiled."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [sys.executable, script, "--cold", "--size", f"{size[0]}x{size[1]}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
    )
    return float(out.stdout.strip().splitlines()[-1])


def hanging_nvidia_smi(directory: Path) -> dict[str, str]:
    """An environment whose ``nvidia-smi`` sleeps 5 s before answering (vramplan.machine.nvidia_smi gives up
    after 2 s)."""
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\nsleep 5\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}", "VRAMPLAN_DETECT": "1"}


def ms(values: list[float]) -> str:
    from statistics import median  # here, not at the top: a cold start (--cold) imports what the app imports

    v = sorted(values)
    p90 = v[min(len(v) - 1, int(0.9 * len(v)))]
    return f"median {median(v) * 1e3:.1f} ms, p90 {p90 * 1e3:.1f} ms, best {v[0] * 1e3:.1f} ms (n={len(v)})"


def main() -> None:
    if "--exit-at-imports" in sys.argv:  # bench_instructions.py: the imports alone
        os._exit(0)
    if "--cold" in sys.argv:
        asyncio.run(first_frame(size_arg(sys.argv)))
        print(time.perf_counter() - T_PROCESS)
        return
    asyncio.run(first_frame())  # warm caches and CPython
    asyncio.run(minimal_app.first_frame())
    cold_start(), cold_start(script=minimal_app.__file__)  # the bytecode caches written
    rounds = int(os.environ.get("BENCH_ROUNDS", "7"))
    warm, base, cold, base_cold, keys, base_keys = [], [], [], [], [], []
    wide_cold, base_wide_cold, keys_cpu, base_keys_cpu = [], [], [], []
    for _ in range(rounds):  # interleaved: the planner and the yardstick see the same machine
        base_cold.append(cold_start(script=minimal_app.__file__))
        cold.append(cold_start())
        base_wide_cold.append(cold_start(script=minimal_app.__file__, size=WIDE))
        wide_cold.append(cold_start(size=WIDE))
        base.append(asyncio.run(minimal_app.first_frame()))
        warm.append(asyncio.run(first_frame())[0])
        minimal_app.CPU_TIMES.clear()
        base_keys += asyncio.run(minimal_app.key_to_frame(5))
        base_keys_cpu += minimal_app.CPU_TIMES
        minimal_app.CPU_TIMES.clear()
        keys += asyncio.run(key_to_frame(5))
        keys_cpu += minimal_app.CPU_TIMES
    print(f"start to first frame, cold process incl. imports (80x24): {ms(cold)}")
    print(f"  one-widget Textual app, same run: {ms(base_cold)}")
    print(f"start to first frame, in process (80x24): {ms(warm)}")
    print(f"  one-widget Textual app, same run: {ms(base)}")
    print(f"start to first frame, cold process incl. imports (160x48): {ms(wide_cold)}")
    print(f"  one-widget Textual app, same run: {ms(base_wide_cold)}")
    print(f"strategy key to frame with the new figure (80x24): {ms(keys)}")
    print(f"  one-widget app, a key updating its Static: {ms(base_keys)}")
    print(f"the same keys in CPU time on the app's thread: {ms(keys_cpu)}")
    print(f"  one-widget app: {ms(base_keys_cpu)}")
    from statistics import median

    first_ratio = median(cold) / median(base_cold)
    wide_ratio = median(wide_cold) / median(base_wide_cold)
    key_ratio = median(keys) / median(base_keys)
    cpu_ratio = median(keys_cpu) / median(base_keys_cpu)
    print(
        f"RATIO first frame (cold process) {first_ratio:.2f}x at 80x24 (target 2x), {wide_ratio:.2f}x at 160x48 "
        f"(target 2.5x); strategy key {key_ratio:.2f}x, in CPU time {cpu_ratio:.2f}x (target 3x)"
    )
    if "--ratios" in sys.argv:
        return
    wide = [asyncio.run(first_frame((160, 48)))[0] for _ in range(3)]
    print(f"start to first frame, in process (160x48): {ms(wide)}")
    with tempfile.TemporaryDirectory() as tmp:
        slow = [cold_start(hanging_nvidia_smi(Path(tmp))) for _ in range(5)]
    print(f"start to first frame, cold process, nvidia-smi hanging 5 s (80x24): {ms(slow)}")
    keys_wide = asyncio.run(key_to_frame(20, (160, 48)))
    print(f"strategy key to frame with the new figure (160x48): {ms(keys_wide)}")
    first = [asyncio.run(key_to_frame(1, started=False))[0] for _ in range(rounds)]
    print(f"first key at the first frame, before the start-up work is done (80x24): {ms(first)}")


if __name__ == "__main__":
    main()
