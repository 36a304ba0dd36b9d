"""Packaging: the wheel ships the preset TOML files; README and CI run the same test command."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_COMMAND = "python3 -m pip install -e '.[test]' && python3 -m pytest -q"


def test_readme_and_ci_run_the_same_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND in readme.split("\n\n", 3)[1] + readme  # the README opens with it
    assert TEST_COMMAND in ci


def test_built_wheel_contains_presets(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("vramplan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "presets/models/llama-7b.toml",
        "presets/hardware/a100-80gb.toml",
        "core/estimate.py",
        "tui/cli.py",
        "tui/app.py",
        "tui/app.tcss",
        "tui/screens/planner.py",
        "tui/widgets/gauges.py",
    ):
        assert required in names
    built_in = {p.relative_to(ROOT).as_posix() for p in (ROOT / "presets").rglob("*.toml")}
    assert built_in <= names
    sources = {p.relative_to(ROOT).as_posix() for d in ("core", "tui") for p in (ROOT / d).rglob("*.py")}
    assert sources <= names, sorted(sources - names)  # subpackages too (core/checks)
