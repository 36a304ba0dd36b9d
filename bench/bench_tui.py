"""Benchmark the planner app, headless: start to first painted frame, and a key press to the frame that shows the
new figure. Run: python bench/bench_tui.py   (the README quotes its output; this is not a timed test)

"Painted" means the compositor produced a frame and it was turned into the bytes a terminal would get: the headless
driver skips that last step, so the benchmark's app does it (`render_segments`) and looks for the figure in them.

- start (in process): `VramplanApp()` to the first frame showing the headline, Textual and the app imported.
- start (cold process): interpreter start, imports included, to that first frame (fresh `python` each run); and the
  same with a fake ``nvidia-smi`` on PATH that hangs for 5 s (detection on): it must not delay the first frame.
- key to frame: `pilot.press(key)` on a strategy toggle to the first frame whose bytes contain the new per-GPU
  total, for the keys c z a i x (checkpointing, ZeRO, attention, int8 activations, fused cross-entropy) in turn
  from the default plan.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from vramplan.core.memory.peak import estimate  # noqa: E402
from vramplan.core.plan.units import GiB  # noqa: E402
from vramplan.tui.app import VramplanApp  # noqa: E402
from vramplan.tui.choices import next_valid  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

KEYS = {
    "c": "strategy.gradient_checkpointing",
    "z": "strategy.zero_stage",
    "a": "strategy.attention",
    "i": "strategy.activation_compression",
    "x": "strategy.fused_cross_entropy",
}


class BenchApp(VramplanApp):
    """The real app, noting when a frame whose terminal bytes contain `wanted` is produced."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.wanted = ""
        self.painted: asyncio.Event | None = None
        self.painted_at = 0.0

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)
        if renderable is None or not self.wanted or self.painted is None or self.painted.is_set():
            return
        if self.wanted in renderable.render_segments(self.console):
            self.painted_at = time.perf_counter()
            self.painted.set()


def figure(total: int) -> str:
    return f"{total / GiB:.1f} / "


async def first_frame(size: tuple[int, int] = (80, 24)) -> tuple[float, BenchApp]:
    t0 = time.perf_counter()
    app = BenchApp()
    app.wanted = figure(estimate(app.start_plan).total)
    app.painted = asyncio.Event()
    async with app.run_test(size=size):
        await asyncio.wait_for(app.painted.wait(), 30)
    return app.painted_at - t0, app


async def key_to_frame(samples: int, size: tuple[int, int] = (80, 24)) -> list[float]:
    """Press the strategy keys in turn; time each press that changes the one-decimal per-GPU total (a press that
    leaves it unchanged, e.g. fused cross-entropy when the peak is the optimizer step, is made but not timed)."""
    app = BenchApp()
    times: list[float] = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        while len(times) < samples:
            for key, setting in KEYS.items():
                plan = app.planner.plan
                nxt = next_valid(plan, setting)
                assert not isinstance(nxt, Exception), nxt
                new = figure(estimate(nxt).total)
                if new == figure(estimate(plan).total):
                    await pilot.press(key)
                    continue
                app.wanted = new
                app.painted = asyncio.Event()
                t0 = time.perf_counter()
                await pilot.press(key)
                await asyncio.wait_for(app.painted.wait(), 10)
                assert app.planner.plan == nxt
                times.append(app.painted_at - t0)
    return times


def cold_start(env: dict[str, str] | None = None) -> float:
    """One fresh interpreter: process start to the first painted frame (this script with --cold)."""
    out = subprocess.run(
        [sys.executable, __file__, "--cold"], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    return float(out.stdout.strip().splitlines()[-1])


def hanging_nvidia_smi(directory: Path) -> dict[str, str]:
    """An environment whose ``nvidia-smi`` sleeps 5 s before answering (core.plan.detect gives up after 2 s)."""
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\nsleep 5\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}", "VRAMPLAN_DETECT": "1"}


def ms(values: list[float]) -> str:
    v = sorted(values)
    p90 = v[min(len(v) - 1, int(0.9 * len(v)))]
    return f"median {statistics.median(v) * 1e3:.1f} ms, p90 {p90 * 1e3:.1f} ms, best {v[0] * 1e3:.1f} ms (n={len(v)})"


def main() -> None:
    if "--cold" in sys.argv:
        asyncio.run(first_frame())
        print(time.perf_counter() - T_PROCESS)
        return
    asyncio.run(first_frame())  # warm caches and CPython
    warm = [asyncio.run(first_frame())[0] for _ in range(5)]
    print(f"start to first frame, in process (80x24): {ms(warm)}")
    wide = [asyncio.run(first_frame((160, 48)))[0] for _ in range(3)]
    print(f"start to first frame, in process (160x48): {ms(wide)}")
    cold = [cold_start() for _ in range(5)]
    print(f"start to first frame, cold process incl. imports (80x24): {ms(cold)}")
    with tempfile.TemporaryDirectory() as tmp:
        slow = [cold_start(hanging_nvidia_smi(Path(tmp))) for _ in range(5)]
    print(f"start to first frame, cold process, nvidia-smi hanging 5 s (80x24): {ms(slow)}")
    keys = asyncio.run(key_to_frame(30))
    print(f"strategy key to frame with the new figure (80x24): {ms(keys)}")
    keys_wide = asyncio.run(key_to_frame(20, (160, 48)))
    print(f"strategy key to frame with the new figure (160x48): {ms(keys_wide)}")


if __name__ == "__main__":
    main()
