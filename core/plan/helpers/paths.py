"""Paths the user typed (CLI flags, plan files, the app's prompts): ``~`` expanded like the shell, without the
exceptions `pathlib.Path.expanduser` raises for an unknown ``~user`` (RuntimeError) and the ValueError the OS layer
raises for a NUL character: both become one `PlanError` or a path kept as written."""

from __future__ import annotations

import os
from pathlib import Path

from vramplan.core.plan.helpers.errors import PlanError


def user_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with ``~`` / ``~user`` expanded (an unknown user: kept as written, so it reads as a missing file);
    a NUL character is a `PlanError` (no file system accepts one)."""
    text = os.fspath(path)
    if "\0" in text:
        raise PlanError("a path cannot contain a NUL character", repr(text))
    return Path(os.path.expanduser(text))


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute: symlinks resolved where they lead somewhere, else (a dangling link, a symlink loop,
    which `Path.resolve` raises RuntimeError for on Python < 3.13) the path as written, so the error names it."""
    p = user_path(path)
    try:
        return p.resolve(strict=True)
    except (OSError, RuntimeError):
        return Path(os.path.abspath(p))
