"""Every package of the installed `vramplan` type-checks with mypy, strict (pyproject's ``[tool.mypy]``): the
package itself (entry/), core, the CLI, the TUI, the presets, the machine and measure packages.

mypy is given each module's file under its installed name (`tests.installed`: its docstring says why that way and
not a folder of links), in a child process (its memory is its own; a hang is stopped); its incremental cache lives in
pytest's cache folder, so a second run reads what did not change (about a second) instead of all of it again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.installed import ROOT, modules, package_names

# Both runs in one test: mypy's cache folder is written by one process at a time.
PROBE = """\
from vramplan.core.plan.helpers.units import fmt_steps


def untyped(x):
    return x


fmt_steps("many")
"""


def _mypy(cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.installed", str(cache), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_mypy_strict_reports_no_error_in_any_package(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extras")
    store = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache = store.mkdir("mypy") if store is not None else tmp_path / "cache"
    r = _mypy(cache)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert f"Success: no issues found in {len(modules())} source files" in r.stdout, r.stdout[-2000:]

    # Not vacuous: a module beside the package finds `vramplan.core` through the same sources (a wrong argument
    # type, not a missing import), and the strict flags are on (an unannotated function is an error).
    probe = tmp_path / "probe.py"
    probe.write_text(f"# {tmp_path}: new text, so mypy checks it now rather than recall its cached errors\n{PROBE}")
    r = _mypy(cache, f"vramplan_probe={probe}")
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    errors = [line.split(": error: ", 1)[1] for line in r.stdout.splitlines() if ": error: " in line]
    assert errors == [
        "Function is missing a type annotation  [no-untyped-def]",
        'Argument 1 to "fmt_steps" has incompatible type "str"; expected "int"  [arg-type]',
    ], r.stdout[-4000:]


def test_the_sources_are_every_package_pyproject_installs() -> None:
    names = modules()
    packages = package_names()
    assert {"vramplan", "vramplan.core", "vramplan.tui", "vramplan.presets", "vramplan.measure"} <= set(packages)
    assert all(names[p].name == "__init__.py" for p in packages), packages
    assert {"vramplan.__main__", "vramplan.tui.app", "vramplan.core.plan.schema.plan"} <= set(names)
    assert all(path.is_file() for path in names.values())
