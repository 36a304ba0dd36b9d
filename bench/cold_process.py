"""Cold ``vramplan`` processes timed against a floor command, interleaved round by round so that the machine's
load falls on each alike (what bench_environment and bench_gpus compare: a ratio, not a time)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def interleaved_cold(commands: dict[str, list[str]], rounds: int) -> None:
    """Run ``python -m vramplan ARGV`` for each of ``commands`` (the first is the floor) once per round, with GPU
    detection off, and print each median in ms and as a ratio to the floor's."""
    cold: dict[str, list[float]] = {name: [] for name in commands}
    env = {**os.environ, "VRAMPLAN_DETECT": "0"}
    for _ in range(rounds):
        for name, argv in commands.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "vramplan", *argv], capture_output=True, check=True, env=env)
            cold[name].append((time.perf_counter() - t0) * 1000)
    print(f"cold process, median of {rounds} interleaved rounds")
    floor = statistics.median(next(iter(cold.values())))
    width = max(len(name) for name in cold)
    for name, ts in cold.items():
        med = statistics.median(ts)
        print(f"  {name:<{width}} {med:8.1f} ms  {med / floor:5.2f}x")
