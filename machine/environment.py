"""The versions installed in a Python environment (a venv or a conda prefix), for the plan's ``[stack]`` table: read
from each package's ``*.dist-info/METADATA`` ``Version:`` line (``*.egg-info/PKG-INFO`` for older installs), as
importlib.metadata finds them, without importing anything.

The environment may be hostile (symlink loops, a FIFO or a device where a file or a folder should be, a METADATA of
50 MB, thousands of dist-info folders, a path on a stalled mount): nothing here follows more than one level into
site-packages, every file is checked to be a regular file before and after it is opened (``O_NONBLOCK``: a FIFO
never blocks the open), only the first `MAX_HEADER_BYTES` of a METADATA are read, and the whole scan runs in a
worker thread given `TIME_BUDGET_S`: what it has found by then is taken. Whatever was skipped is said in ONE line
(`EnvironmentStack.warning`); nothing raises.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from vramplan.core.plan.stack.config import PACKAGES, StackConfig, version_tuple

TIME_BUDGET_S = 1.0  # the whole scan, every site-packages folder together
MAX_HEADER_BYTES = 8 * 1024  # of one METADATA: the Version: line is in its first lines (core metadata spec)
MAX_TOTAL_BYTES = 256 * 1024  # read from every METADATA together
MAX_ENTRIES = 100_000  # directory entries looked at, every folder together
MAX_PROBLEMS_SHOWN = 3
_SEPARATORS = re.compile(r"[-_.]+")
_PYTHON_DIR = re.compile(r"^(python|pypy)3(\.\d{1,3})?t?$")


class EnvironmentStack(NamedTuple):
    """What `read_environment` found: ``versions`` maps each package of `core.plan.stack.config.PACKAGES` found to its
    version (valid for `StackConfig`); ``warning`` is one line naming what was skipped and why ("" when
    nothing was)."""

    path: str
    versions: dict[str, str]
    warning: str = ""


def canonical_name(name: str) -> str:
    """A distribution name as packaging's ``canonicalize_name`` writes it: lowercase, runs of ``-``, ``_`` and ``.``
    as one ``-`` (PEP 503)."""
    return _SEPARATORS.sub("-", name).lower()


class _Scan:
    """The state of one scan, shared with the thread that runs it: the versions found, the problems met and the
    budgets spent."""

    def __init__(self, root: Path, deadline: float) -> None:
        self.root = root
        self.deadline = deadline
        self.found: dict[str, list[str]] = {}
        self.problems: list[str] = []
        self.entries = 0
        self.bytes_read = 0
        self.stopped = ""  # why the scan stopped early ("" when it did not)
        self.done = False

    def problem(self, path: Path | str, why: str) -> None:
        self.problems.append(f"skipped {self.shown(path)} ({why})")

    def shown(self, path: Path | str) -> str:
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)

    def over_budget(self) -> bool:
        if self.stopped:
            return True
        if time.monotonic() > self.deadline:
            self.stopped = f"stopped after {TIME_BUDGET_S:g} s"
        elif self.entries > MAX_ENTRIES:
            self.stopped = f"stopped after {MAX_ENTRIES:,} folder entries"
        elif self.bytes_read > MAX_TOTAL_BYTES:
            self.stopped = f"stopped after reading {MAX_TOTAL_BYTES // 1024} KiB"
        return bool(self.stopped)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a file"),
    ):
        if test(mode):
            return name
    return "not a regular file"  # a door, a whiteout


def _stat(scan: _Scan, path: Path, missing: str | None) -> os.stat_result | None:
    """``path``'s stat (symlinks followed), or None with a problem: ``missing`` when it does not exist (None: say
    nothing), why otherwise."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if missing is not None:
            scan.problem(path, missing)
    except OSError as exc:
        scan.problem(path, _why(exc))
    return None


def _is_dir(scan: _Scan, path: Path, quiet_missing: bool = True) -> os.stat_result | None:
    """``path``'s stat when it is a folder (symlinks followed: a venv's ``lib64`` is one), else None (and a
    problem, unless it is simply missing and ``quiet_missing``)."""
    st = _stat(scan, path, None if quiet_missing else "no such folder")
    if st is None:
        return None
    if not stat.S_ISDIR(st.st_mode):
        scan.problem(path, f"{_kind(st.st_mode)}, not a folder")
        return None
    return st


def _entries(scan: _Scan, folder: Path) -> Iterator[str]:
    """The names in ``folder``, within the scan's budgets; an unreadable folder is a problem."""
    try:
        with os.scandir(folder) as it:
            for entry in it:
                scan.entries += 1
                if scan.over_budget():
                    return
                yield entry.name
    except OSError as exc:
        scan.problem(folder, _why(exc))


def site_packages(scan: _Scan) -> list[Path]:
    """The environment's site-packages folders, as a venv or conda lays them out: ``lib/python3.X/site-packages``,
    ``lib64/python3.X/site-packages`` (POSIX) and ``Lib/site-packages`` (Windows); each folder once."""
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def add(path: Path) -> None:
        st = _is_dir(scan, path)
        if st is not None and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(path)

    for lib in ("lib", "lib64"):
        if _is_dir(scan, scan.root / lib) is None:
            continue
        for name in sorted(_entries(scan, scan.root / lib)):
            if _PYTHON_DIR.match(name):
                add(scan.root / lib / name / "site-packages")
    add(scan.root / "Lib" / "site-packages")
    return out


def read_header(scan: _Scan, path: Path) -> str | None:
    """The ``Version:`` of a core-metadata file (METADATA, PKG-INFO), reading at most `MAX_HEADER_BYTES` of it, or
    None (a problem says why). Only a regular file is opened, and it is checked again once open (``O_NONBLOCK``: a
    FIFO put there in between does not block)."""
    st = _stat(scan, path, "missing")
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        scan.problem(path, _kind(st.st_mode))
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        scan.problem(path, _why(exc))
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            scan.problem(path, "not a regular file")
            return None
        data = os.read(fd, MAX_HEADER_BYTES)
    except OSError as exc:
        scan.problem(path, _why(exc))
        return None
    finally:
        os.close(fd)
    scan.bytes_read += len(data)
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            break  # the header ends at the first empty line; the description follows
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "version":
            return value.strip()
    scan.problem(path, f"no Version: line in its first {MAX_HEADER_BYTES // 1024} KiB")
    return None


def _metadata_file(folder: Path, name: str) -> Path:
    """The core-metadata file of a ``*.dist-info`` folder (METADATA) or of an ``*.egg-info`` folder (PKG-INFO); an
    ``*.egg-info`` that is not a folder is that file itself (distutils' form)."""
    path = folder / name
    if name.endswith(".dist-info"):
        return path / "METADATA"
    try:
        return path / "PKG-INFO" if stat.S_ISDIR(os.stat(path).st_mode) else path
    except OSError:
        return path / "PKG-INFO"  # read_header then says what is wrong


def _scan_folder(scan: _Scan, folder: Path) -> None:
    """The versions of the wanted packages in one site-packages folder."""
    for name in _entries(scan, folder):
        if not name.endswith((".dist-info", ".egg-info")):
            continue
        package = canonical_name(name.partition("-")[0])
        if package not in PACKAGES:
            continue
        version = read_header(scan, _metadata_file(folder, name))
        if version is None:
            continue
        try:
            StackConfig.model_validate({package: version})
        except ValidationError:
            scan.problem(folder / name, f"not a version: {version[:40]!r}")
            continue
        scan.found.setdefault(package, []).append(version)
        if scan.over_budget():
            return


def _run(scan: _Scan) -> None:
    try:
        folders = site_packages(scan)
        if not folders and not scan.problems:
            scan.problems.append("no site-packages folder (lib/python3.*/site-packages or Lib/site-packages)")
        for folder in folders:
            if scan.over_budget():
                break
            _scan_folder(scan, folder)
    except Exception as exc:  # a hostile folder must never traceback: said in the warning
        scan.problems.append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        scan.done = True


def _versions(scan: _Scan) -> tuple[dict[str, str], list[str]]:
    """One version per package; two different ones (a stale dist-info an interrupted upgrade left, or one in
    ``lib`` and another in ``lib64``) are said, and the newest taken."""
    versions: dict[str, str] = {}
    notes: list[str] = []
    snapshot = dict(scan.found)  # a copy: a worker left behind may still be adding
    for package in PACKAGES:
        found = list(snapshot.get(package, ()))
        if not found:
            continue
        unique = list(dict.fromkeys(found))
        versions[package] = max(unique, key=version_tuple) if len(unique) > 1 else unique[0]
        if len(unique) > 1:
            notes.append(f"{package} installed {len(unique)} times ({', '.join(unique)}): took {versions[package]}")
    return versions, notes


def read_environment(env_dir: str | os.PathLike[str], time_budget_s: float = TIME_BUDGET_S) -> EnvironmentStack:
    """The versions of `core.plan.stack.config.PACKAGES` installed in the environment at ``env_dir`` (a venv or conda
    prefix), within ``time_budget_s`` and the byte and entry budgets; never raises."""
    shown = os.fspath(env_dir)
    root = Path(shown)
    try:
        st = os.stat(root)
    except OSError as exc:
        why = "no such folder" if isinstance(exc, FileNotFoundError) else _why(exc)
        return EnvironmentStack(shown, {}, f"stack from {shown}: {why}; no versions read")
    if not stat.S_ISDIR(st.st_mode):
        return EnvironmentStack(shown, {}, f"stack from {shown}: {_kind(st.st_mode)}, not a folder; no versions read")
    scan = _Scan(root, time.monotonic() + time_budget_s)
    worker = threading.Thread(target=_run, args=(scan,), name="vramplan-environment", daemon=True)
    worker.start()
    worker.join(time_budget_s + 0.2)  # a read stuck in the kernel (a stalled mount) is left behind, not waited on
    if not scan.done:
        scan.stopped = scan.stopped or f"gave up after {time_budget_s:g} s (a read did not return)"
    versions, notes = _versions(scan)
    problems = [*notes, *list(scan.problems)]
    if scan.stopped:
        problems.insert(0, scan.stopped)
    if not problems:
        return EnvironmentStack(shown, versions, "")
    more = len(problems) - MAX_PROBLEMS_SHOWN
    text = "; ".join(problems[:MAX_PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    got = ", ".join(f"{k} {v}" for k, v in versions.items()) or "no versions read"
    return EnvironmentStack(shown, versions, f"stack from {shown}: {text} ({got})")


def default_environment() -> str | None:
    """The environment vramplan runs under, to read by default: ``VIRTUAL_ENV`` (an activated venv), else
    ``CONDA_PREFIX``; None when neither is set or ``VRAMPLAN_DETECT=0``."""
    if os.environ.get("VRAMPLAN_DETECT", "1").strip().lower() in ("0", "no", "false", "off"):
        return None
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None
