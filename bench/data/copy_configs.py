#!/usr/bin/env python3
"""Write tests/data/import/: the training configs the ``--from FILE`` tests read.

Usage, from the repository root:

    python -m bench.data.copy_configs [--seed ../shared/seeds/000_b36c5506ea95523d.txt] [--fetch]

* ``seed_13b_zero3.json``: the DeepSpeed config of the seed article on memory planning (section 5.2: a 13B model on
  4 x A100 80GB), cut verbatim from the article's text (the first ``{`` line after the line naming the DeepSpeed
  config, to its closing ``}``). Needs only the shared folder.
* With ``--fetch``: the projects' example configs, downloaded unchanged from raw.githubusercontent.com at the
  commits tests/data/import/README.md lists (its table is read here: file, repository, path, commit). Needs the
  network.

Without ``--fetch`` the downloaded files are left as they are; ``--check`` writes nothing and exits 1 when a file
would change.
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.request
from pathlib import Path

DEST = Path("tests/data/import")
SEED = Path("../shared/seeds/000_b36c5506ea95523d.txt")
ROW = re.compile(r"^\| `([^`]+)` \| ([\w.-]+/[\w.-]+) \| (\S+) \| ([0-9a-f]{40}) \|$")


def seed_config(text: str) -> str:
    """The JSON block that follows the line naming the DeepSpeed config in the seed article."""
    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if "DeepSpeed" in line and i + 1 < len(lines) and lines[i + 1] == "{"
    )
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start + 1 : end + 1]) + "\n"


def sources(readme: Path) -> list[tuple[str, str, str, str]]:
    """(file, owner/repo, path, commit) per row of the README's table."""
    return [m.groups() for line in readme.read_text().splitlines() if (m := ROW.match(line))]  # type: ignore[misc]


def fetch(repo: str, path: str, commit: str) -> bytes:
    url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return bytes(r.read())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=Path, default=SEED)
    ap.add_argument("--fetch", action="store_true", help="download the projects' example configs (network)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = ap.parse_args(argv)
    wanted: dict[str, bytes] = {"seed_13b_zero3.json": seed_config(args.seed.read_text()).encode()}
    if args.fetch:
        for name, repo, path, commit in sources(DEST / "README.md"):
            wanted[name] = fetch(repo, path, commit)
    changed = [n for n, data in wanted.items() if not (DEST / n).is_file() or (DEST / n).read_bytes() != data]
    if args.check:
        print("\n".join(f"differs: {n}" for n in changed) or f"{len(wanted)} files as committed")
        return 1 if changed else 0
    for name in changed:
        (DEST / name).write_bytes(wanted[name])
    print(f"wrote {len(changed)} of {len(wanted)} files to {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
