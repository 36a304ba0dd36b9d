"""How long reading a Python environment's versions takes (``--stack-from``, `vramplan.machine.environment`), on the
hostile folders the tests use, against floors run in the same loop (the speed bounds the tests used to hold:
tests/machine/test_environment.py and tests/cli/test_stack_from_cli.py check what is read, this checks how fast).

- in process: `read_environment` on each folder against the same call on a plain venv holding the same two
  packages (torch, peft), interleaved, median of ROUNDS; the budget is out of reach, so each scan runs to its end.
- cold process: ``vramplan estimate --stack-from DIR --json`` against ``vramplan estimate --json`` (no
  environment read), interleaved: the scan's share of a command.

Usage: python -m bench.bench_environment [ROUNDS]   (default 9; vramplan installed in this interpreter)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.cold_process import interleaved_cold
from vramplan.machine.environment import read_environment

SITE = "lib/python3.12/site-packages"
PACKAGES = {"torch": "2.5.1", "peft": "0.13.2"}


def dist_info(site: Path, name: str, version: str) -> Path:
    folder = site / f"{name}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder


def venv(root: Path) -> Path:
    """A venv's layout with `PACKAGES` installed (their dist-info folders)."""
    for name, version in PACKAGES.items():
        dist_info(root / SITE, name, version)
    return root


def hostile(root: Path) -> dict[str, Path]:
    """The folders tests/machine/test_environment.py and tests/cli/test_stack_from_cli.py time, made the same way."""
    out: dict[str, Path] = {"plain venv (the floor)": venv(root / "plain")}
    big = venv(root / "big")
    with open(big / SITE / "peft-0.13.2.dist-info" / "METADATA", "a") as f:
        f.truncate(50 * 2**20)  # its header, then 50 MB (sparse) the reader must not read
    out["50 MB METADATA"] = big
    many = venv(root / "many")
    for i in range(5000):
        (many / SITE / f"pkg{i}-1.0.dist-info").mkdir()
    out["5,000 dist-info folders"] = many
    odd = venv(root / "odd")
    (odd / "lib" / "python3.10").symlink_to("python3.10")  # a symlink loop where a python3.X folder should be
    os.mkfifo(odd / SITE / "fifo-1.0.dist-info")  # a FIFO where a folder should be
    (odd / SITE / "loop-1.0.dist-info").symlink_to("loop-1.0.dist-info")
    (odd / SITE / "trl-0.12.1.dist-info").mkdir()
    os.mkfifo(odd / SITE / "trl-0.12.1.dist-info" / "METADATA")  # and where a file should be
    out["symlink loops and FIFOs"] = odd
    return out


def timed_ms(fn: Callable[[], object], times: list[float]) -> None:
    t0 = time.perf_counter()
    fn()
    times.append((time.perf_counter() - t0) * 1000)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    with tempfile.TemporaryDirectory() as tmp:
        folders = hostile(Path(tmp))
        floor = next(iter(folders))
        in_process: dict[str, list[float]] = {name: [] for name in folders}
        for _ in range(rounds):
            for name, path in folders.items():
                timed_ms(lambda p=path: read_environment(p, time_budget_s=3600), in_process[name])
        print(f"read_environment in process, median of {rounds} interleaved rounds")
        base = statistics.median(in_process[floor])
        for name, ts in in_process.items():
            med = statistics.median(ts)
            print(f"  {name:<32} {med:8.2f} ms  {med / base:6.1f}x the plain venv")

        commands = {"vramplan estimate --json (the floor)": ["estimate", "--json"]}
        for name, path in folders.items():
            label = f"--stack-from {name.removesuffix(' (the floor)')}"
            commands[label] = ["estimate", "--stack-from", str(path), "--json"]
        interleaved_cold(commands, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
