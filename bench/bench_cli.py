"""Cold-process time of the trivial commands against a floor run in the same loop.

``vramplan --help``, ``vramplan --version`` and a usage error must not import pydantic or the estimator (the package
``__init__``s are docstrings; the commands import their modules when they run). Each round runs the floor
(``python -c "import argparse"``) and each command once, interleaved, so a slow moment of a shared machine hits
both; the medians and their ratios are printed.

Usage: python bench/bench_cli.py [ROUNDS]   (vramplan installed in this interpreter's environment)
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def run_ms(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=False)
    return (time.perf_counter() - t0) * 1000


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    exe = shutil.which("vramplan") or "vramplan"
    commands = {
        "floor: python -c 'import argparse'": [sys.executable, "-c", "import argparse"],
        "vramplan --help": [exe, "--help"],
        "vramplan --version": [exe, "--version"],
        "vramplan estimate --bogus (usage error)": [exe, "estimate", "--bogus"],
        "python -m vramplan --help": [sys.executable, "-m", "vramplan", "--help"],
        "vramplan estimate --json (for scale)": [exe, "estimate", "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, cmd in commands.items():
            times[name].append(run_ms(cmd))
    floor = statistics.median(next(iter(times.values())))
    print(f"cold process, median of {rounds} interleaved rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<42} {med:7.1f} ms  {med / floor:5.2f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
