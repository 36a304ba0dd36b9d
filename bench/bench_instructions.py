"""Count the instructions of a cold start to the first frame, the planner's against the yardstick's (the
one-widget Textual app of bench/minimal_app.py), with valgrind's callgrind: a count that does not move with the
machine's load, where bench_tui.py's times move by about 10% from run to run on a shared VM. Run:
python bench/bench_instructions.py   (about two minutes; needs `valgrind` on PATH; docs/benchmarks.md describes it)

Each app is started as bench_tui.py starts it cold (`--cold`), with its bytecode cached, and ends at once, with no
teardown, at two points: after its imports (``--exit-at-imports``) and at its first painted frame
(``--exit-at-frame``). The interpreter's own start (``python -c pass``) is taken off both. Instructions are not
time (an import is mostly memory traffic, a frame mostly Python calls), so the ratio differs from bench_tui's
(2.05x on 2026-12-02, against 1.7-2.1x in time); it tells where a start's work goes, and whether a change
removed some, to a tenth of a percent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
APPS = {"planner": HERE / "bench_tui.py", "yardstick": HERE / "minimal_app.py"}


def instructions(*args: str) -> int:
    """Instructions callgrind counts for ``python *args`` (hash seed fixed: the same run every time)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package has it
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        env=env,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"bench_instructions: no count in valgrind's output: {out.stderr[-300:]}")
    return int(found.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        print("bench_instructions: needs valgrind on PATH (apt install valgrind)", file=sys.stderr)
        raise SystemExit(2)
    for script in APPS.values():  # write the bytecode caches first
        subprocess.run([sys.executable, str(script), "--cold"], capture_output=True, check=True, cwd=HERE.parent)
    start = instructions("-c", "pass")
    totals = {}
    for name, script in APPS.items():
        imports = instructions(str(script), "--cold", "--exit-at-imports") - start
        total = instructions(str(script), "--cold", "--exit-at-frame") - start
        totals[name] = total
        frame = total - imports
        print(f"{name}: imports {imports / 1e6:,.1f}M, first frame {frame / 1e6:,.1f}M, total {total / 1e6:,.1f}M")
    print(f"interpreter start (taken off both): {start / 1e6:,.1f}M")
    print(f"RATIO instructions to the first frame (cold process): {totals['planner'] / totals['yardstick']:.2f}x")


if __name__ == "__main__":
    main()
