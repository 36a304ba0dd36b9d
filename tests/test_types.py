"""The core and the headless CLI type-check with mypy (strict; the config is pyproject.toml's ``[tool.mypy]``).

mypy cannot follow the import hook of an editable install, so it reads the sources through a folder that lays them
out as they are installed: ``vramplan/`` with the repository's top-level folders linked in as its sub-packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_error_in_core_and_cli(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extras")
    package = tmp_path / "src" / "vramplan"
    package.mkdir(parents=True)
    for module in (ROOT / "entry").glob("*.py"):
        (package / module.name).symlink_to(module)
    for folder in ("core", "cli", "tui", "presets", "machine", "measure"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-p",
            "vramplan.core",
            "-p",
            "vramplan.cli",
            "-p",
            "vramplan.machine",
            "-p",
            "vramplan.measure",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(tmp_path / "src")},
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success: no issues found" in r.stdout
