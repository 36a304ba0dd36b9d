"""The installed package's modules by the names Python imports them by, for the suite's static checks: the import
analysis (tests/test_architecture.py) and mypy (tests/test_types.py; ``python -m tests.installed`` runs it alone).

Why a map of names to files, handed to mypy as its sources. The repository's top-level folders are `vramplan`'s
sub-packages only through setuptools' ``package-dir`` (``core/`` is ``vramplan.core``, ``entry/`` is ``vramplan``).
The README's ``pip install -e`` reaches them through setuptools' import hook (its "lenient" editable mode, the one a
``package-dir`` mapping gets): Python follows the hook, mypy does not. mypy finds a module by searching folders
(``mypy_path``, site-packages and the folders ``.pth`` files add), has no option that maps a folder to a package
name, and so cannot find ``vramplan.core`` (python/mypy#13392, pypa/setuptools#3518, both open). The other ways:

- setuptools' other editable modes: ``strict`` builds a tree of links under ``build/`` (a symlink farm made by the
  installer), ``compat`` adds the repository's root to ``sys.path`` (where ``core/`` is ``core``, not
  ``vramplan.core``); either needs ``--config-settings editable_mode=...``, which the README's command does not pass;
- a non-editable install into a temporary target (``pip install --no-deps --target``): builds and copies the package
  on every run (2.3 s of CPU, a third of mypy's cold run), and mypy's messages name the copies, not the files;
- a temporary folder of symlinks laid out as installed (what tests/test_types.py did): an extra tree, and mypy's
  messages name the links;
- mypy's build given every module as ``BuildSource(path, module)``: mypy searches folders only for names that are
  not among its sources, so every ``import vramplan...`` resolves to the repository's file it was given, nothing is
  built or copied, and the messages name the files as they are in the repository. The suite does this, through
  ``mypy.build.build``, what mypy's command calls once it has parsed its arguments (``mypy.api`` takes only
  command-line arguments, which have no form for "this file is that module"): pyproject pins mypy's minor version.

The map is made the way Python sees the package: each package that pyproject's ``package-dir`` names is imported
(the editable hook or a wheel's folder says where it is) and its folder walked, so it is the installed package
whichever way pip installed it. mypy reads its options from pyproject's ``[tool.mypy]`` through its own command-line
parser (``strict = true`` expands there), and keeps its incremental cache in pytest's cache folder: a cold check of
the 179 modules (and the ~750 of Textual, Rich, pydantic... they import) takes 6 s of CPU, a warm one 0.2 s.
"""

from __future__ import annotations

import importlib
import io
import os
import pkgutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def package_names() -> list[str]:
    """The packages of Python code that pyproject maps to repository folders: ``vramplan`` (entry/) and its
    sub-packages (not ``vramplan.docs``, the pages: a folder without an ``__init__.py``)."""
    with PYPROJECT.open("rb") as f:
        package_dir: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return [name for name, folder in package_dir.items() if (ROOT / folder / "__init__.py").is_file()]


def modules() -> dict[str, Path]:
    """Every module of the installed package by name (``vramplan.core.plan.schema.plan`` ->
    ``.../core/plan/schema/plan.py``; a package -> its ``__init__.py``)."""
    out: dict[str, Path] = {}

    def walk(name: str, folder: Path) -> None:
        if (folder / "__init__.py").is_file():
            out[name] = folder / "__init__.py"
        for info in pkgutil.iter_modules([str(folder)]):
            if info.ispkg:
                walk(f"{name}.{info.name}", folder / info.name)
            else:
                out[f"{name}.{info.name}"] = folder / f"{info.name}.py"

    for name in package_names():
        for folder in importlib.import_module(name).__path__:
            walk(name, Path(folder))
    return out


def run_mypy(cache_dir: Path, extra: dict[str, Path] | None = None) -> tuple[bool, str]:
    """mypy (pyproject's ``[tool.mypy]``: strict) over every module of the installed package, and the ``extra``
    modules (name -> file) beside them: (clean, report)."""
    from mypy import build
    from mypy.errors import CompileError
    from mypy.fscache import FileSystemCache
    from mypy.main import process_options
    from mypy.modulefinder import BuildSource

    stdout, stderr = io.StringIO(), io.StringIO()
    fscache = FileSystemCache()
    args = ["--config-file", str(PYPROJECT), "--cache-dir", str(cache_dir)]
    _, options = process_options(args, stdout=stdout, stderr=stderr, require_targets=False, fscache=fscache)
    sources = [BuildSource(str(path), name) for name, path in sorted((modules() | (extra or {})).items())]
    messages: list[str] = []

    def flush(_filename: str | None, new: list[str], _serious: bool) -> None:
        messages.extend(new)

    try:  # every message goes to `flush` (the result's own list stays empty), a blocking one too
        result = build.build(sources, options, None, flush, fscache, stdout, stderr)
        result.manager.metastore.close()  # its SQLite cache, as mypy's command closes it
        clean = not any(": error: " in m for m in messages)  # notes alone pass, as with mypy's command
    except CompileError:  # a blocking error (a syntax error, a file found twice)
        clean = False
    summary = "Success: no issues found" if clean else f"{len(messages)} lines of errors and notes"
    report = "\n".join([*messages, f"{summary} in {len(sources)} source files"])
    return clean, "\n".join(t for t in (stdout.getvalue(), stderr.getvalue(), report) if t)


def main(argv: list[str]) -> int:
    """``python -m tests.installed [CACHE_DIR [MODULE=FILE ...]]`` from the repository's root: mypy as the suite
    runs it (the cache pytest's, ``.pytest_cache/d/mypy``, unless given), with extra modules beside the package."""
    cache = Path(argv[0]) if argv else ROOT / ".pytest_cache" / "d" / "mypy"
    extra = {name: Path(path) for name, _, path in (a.partition("=") for a in argv[1:])}
    clean, report = run_mypy(cache, extra)
    print(report)
    return 0 if clean else 1


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(status)  # as mypy's command does: freeing the ~900 modules' trees one by one takes 5 s more
