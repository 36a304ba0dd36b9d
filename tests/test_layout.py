"""The repository's layout: a module's file name says what it holds and means one thing across the package.

Two modules called ``result.py`` (the estimate's record, the step time's record) or ``commands.py`` (the CLI's
parser, the TUI's command table) make a reader guess from the folder; the suite keeps every basename unique across
the folders pyproject installs as `vramplan` (``__init__.py`` and ``__main__.py`` aside).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_MARKERS = ("__init__.py", "__main__.py")


def _package_folders() -> list[Path]:
    """The repository folders pyproject maps to `vramplan` and its sub-packages (``entry/``, ``core/``, ...)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        package_dir: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return [ROOT / folder for folder in package_dir.values()]


def test_the_package_folders_are_read_from_pyproject() -> None:
    folders = {p.name for p in _package_folders()}
    assert {"entry", "core", "cli", "tui", "measure", "machine"} <= folders
    assert all(p.is_dir() for p in _package_folders())


def test_every_module_basename_in_the_package_is_unique() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for folder in _package_folders():
        for path in folder.rglob("*.py"):
            if path.name not in PACKAGE_MARKERS:
                where[path.name].append(path.relative_to(ROOT).as_posix())
    assert len(where) > 100  # the scan found the package's modules (over 150 today)
    repeated = {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}
    assert repeated == {}, repeated
