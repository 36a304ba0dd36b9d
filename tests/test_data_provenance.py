"""Reproducible data (issue 31.5): every file of tests/data is listed in docs/data.md with the script that produces
it, and that script exists; no committed file names an absolute path of one machine."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TABLE_ROW = re.compile(r"^\| `([^`]+)` \| (`[^`]+`|hand-written|transcribed|missing) \|")
# Files whose producing script was not kept (docs/data.md says what each needs): none since the four stack files got
# theirs (bench/data/sac_block.py, compile_block.py, chunked_ce.py, opt_in_bwd.py). A new one fails the suite: write
# its script instead.
KNOWN_MISSING: set[str] = set()


def rows() -> dict[str, str]:
    """docs/data.md's table: file pattern (relative to tests/data) -> script column."""
    text = (ROOT / "docs" / "data.md").read_text()
    return {m.group(1): m.group(2) for line in text.splitlines() if (m := TABLE_ROW.match(line))}


def data_files() -> list[str]:
    return sorted(
        p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def test_every_data_file_is_listed_with_its_producer() -> None:
    patterns = rows()
    assert len(patterns) > 20
    unlisted = [f for f in data_files() if not any(fnmatch.fnmatchcase(f, p) for p in patterns)]
    assert not unlisted, f"tests/data files not in docs/data.md's table: {unlisted}"


def test_every_row_matches_a_file() -> None:
    files = data_files()
    stale = [p for p in rows() if not any(fnmatch.fnmatchcase(f, p) for f in files)]
    assert not stale, f"docs/data.md lists files that are not in tests/data: {stale}"


def test_every_named_script_exists() -> None:
    scripts = {s.strip("`") for s in rows().values() if s.startswith("`")}
    assert "bench/data/qlora_cpu.py" in scripts and "bench/measure/measure_step.py" in scripts
    absent = sorted(s for s in scripts if not (ROOT / s).is_file())
    assert not absent, f"docs/data.md names scripts that do not exist: {absent}"


def test_only_the_known_files_lack_their_script() -> None:
    missing = {p for p, s in rows().items() if s == "missing"}
    assert missing == KNOWN_MISSING


# "/work/<name>" or "/root/<name>": a path of the machine the repository was written on (built so
# that this file does not match itself)
MACHINE_PATH = re.compile("(?<![\\w.~-])/(" + "work|root" + ")/[\\w.]")


def test_no_committed_file_names_an_absolute_path_of_this_machine() -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    found = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]
    assert not found, f"absolute paths of one machine (name files relative to the repository): {found[:20]}"
