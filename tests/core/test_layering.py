"""core/ is pure: importing every core module pulls in neither Textual nor Rich."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import core

ROOT = Path(__file__).resolve().parents[2]


def test_core_imports_without_textual_or_rich() -> None:
    modules = sorted(f"core.{m.name}" for m in pkgutil.iter_modules(core.__path__))
    assert "core.estimate" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def test_core_sources_do_not_mention_textual_imports() -> None:
    for path in (ROOT / "core").rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("import textual", "from textual", "import rich", "from rich")), path
