"""Cold-process time of the headless commands against two floors run in the same loop.

``vramplan --help``, ``vramplan --version`` and a usage error must not import pydantic or the estimator (the package
``__init__``s are docstrings; the commands import their modules when they run): their floor is
``python -c "import argparse"``. ``vramplan estimate`` must import pydantic (the plan is a pydantic model) and
nothing the estimate does not use (issue 31.6: within 1.3x): its floor is a program that imports pydantic, defines a
one-field model and validates one (`MODEL_FLOOR`). Each round runs both floors and each command once, interleaved, so
a slow moment of a shared machine hits all of them; the medians and their ratios to the floor are printed.

Usage: python -m bench.bench_cli [ROUNDS]   (default 20; vramplan installed in this interpreter's environment)
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


MODEL_FLOOR = "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)\n"
ARGPARSE_FLOOR = "floor: python -c 'import argparse'"
PYDANTIC_FLOOR = "floor: pydantic, one model validated"


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    exe = shutil.which("vramplan") or "vramplan"
    commands = {  # name -> (command, its floor)
        ARGPARSE_FLOOR: ([sys.executable, "-c", "import argparse"], ARGPARSE_FLOOR),
        PYDANTIC_FLOOR: ([sys.executable, "-c", MODEL_FLOOR], ARGPARSE_FLOOR),
        "vramplan --help": ([exe, "--help"], ARGPARSE_FLOOR),
        "vramplan --version": ([exe, "--version"], ARGPARSE_FLOOR),
        "vramplan estimate --bogus (usage error)": ([exe, "estimate", "--bogus"], ARGPARSE_FLOOR),
        "python -m vramplan --help": ([sys.executable, "-m", "vramplan", "--help"], ARGPARSE_FLOOR),
        "vramplan estimate": ([exe, "estimate"], PYDANTIC_FLOOR),
        "vramplan estimate --json": ([exe, "estimate", "--json"], PYDANTIC_FLOOR),
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, (cmd, _floor) in commands.items():
            times[name].append(run_ms(cmd))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"cold process, median of {rounds} interleaved rounds")
    for name, med in medians.items():
        floor = commands[name][1]
        ratio = "" if floor == name else f"{med / medians[floor]:5.2f}x {floor.removeprefix('floor: ')}"
        print(f"  {name:<42} {med:7.1f} ms  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
