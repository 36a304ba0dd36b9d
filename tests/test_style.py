"""The repository passes ruff: ``ruff check .`` and ``ruff format --check .`` from its root (pyproject's
``[tool.ruff]``; ruff leaves out what .gitignore does, the virtual environment included), with the ruff that the test
extra installs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.installed import ROOT


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes_on_the_repository(command: list[str]) -> None:
    pytest.importorskip("ruff", reason="ruff is in the test extras")
    r = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
