"""The repository's layout: a module's file name says what it holds, and one name means one thing.

Parallel names for parallel things are fine (``memory/formulas.py`` and ``time/formulas.py``: each package's formula
texts); one name meaning two things is not (``commands.py`` for the CLI's parser and the TUI's command table made a
reader guess from the folder). A basename used in more than one folder of the package must be in `PARALLEL_NAMES`,
which says the one thing it means wherever it is (``__init__.py`` and ``__main__.py`` aside).
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


# A basename used in several folders, and the one thing it means in each of them.
PARALLEL_NAMES: dict[str, str] = {
    "accuracy.py": "how far to trust a figure: the memory estimate's (core/memory), the step time's (core/time)",
    "config.py": "a package's plan table: [model] (core/plan/architecture), [stack] (core/plan/stack)",
    "checklist.py": "the troubleshooting checklist: the plan's [checklist] table (core/plan), its items (core/advice)",
    "loss.py": "the loss: its tensors per micro-batch (core/memory/activations), through the step (core/memory/step)",
    "offload.py": "offload: where offloaded states live (core/memory/states), its transfers' time (core/time)",
    "record.py": "the records a package makes: an import's log (core/files/importers), the estimate "
    "(core/memory), a stage's model states (core/memory/states)",
    "overhead.py": "GPU memory outside the step's tensors: the plan's [overhead] table (core/plan), its terms "
    "(core/memory)",
    "vision.py": "a multimodal model's vision tower: its parameters from the config.json (core/plan/architecture), "
    "its place in the model states (core/memory/states)",
}


def test_a_basename_used_twice_means_one_thing() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for folder in _package_folders():
        for path in folder.rglob("*.py"):
            if path.name not in PACKAGE_MARKERS:
                where[path.name].append(path.relative_to(ROOT).as_posix())
    assert len(where) > 100  # the scan found the package's modules (over 150 today)
    repeated = {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}
    unexplained = {name: paths for name, paths in repeated.items() if name not in PARALLEL_NAMES}
    assert unexplained == {}, f"say in PARALLEL_NAMES what each of these names means: {unexplained}"
    stale = set(PARALLEL_NAMES) - set(repeated)
    assert not stale, f"PARALLEL_NAMES lists names used once: {stale}"
