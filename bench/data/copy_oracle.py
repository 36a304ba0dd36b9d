#!/usr/bin/env python3
"""Copy the read-only CPU oracle's cases and measurements into tests/data for the test suite.

Usage, from the repository root:  python -m bench.data.copy_oracle [SOURCE]   (SOURCE: ../shared/oracle)

Copies ``cases.json`` to ``tests/data/oracle_cases.json`` and ``truth.json`` to ``tests/data/oracle_truth.json``,
unchanged (the oracle's README, in SOURCE, says how it measured them: torch 2.13.0+cpu training steps, the CPU
allocator's running total from the profiler). ``--check`` writes nothing and exits 1 when a copy differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

DEST = Path("tests/data")
FILES = {"cases.json": "oracle_cases.json", "truth.json": "oracle_truth.json"}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    src = Path(args[0] if args else "../shared/oracle")
    if not all((src / name).is_file() for name in FILES):
        print(f"copy_oracle: no {' and '.join(FILES)} in {src}", file=sys.stderr)
        return 2
    differ = [dest for name, dest in FILES.items() if (src / name).read_bytes() != _read(DEST / dest)]
    if check:
        print("\n".join(f"differs: {d}" for d in differ) or "the copies are as committed")
        return 1 if differ else 0
    for name, dest in FILES.items():
        (DEST / dest).write_bytes((src / name).read_bytes())
    print(f"copied {len(FILES)} files from {src} to {DEST}")
    return 0


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
