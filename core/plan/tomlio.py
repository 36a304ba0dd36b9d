"""Reading TOML files with one-line errors. ``tomllib`` on 3.11+, ``tomli`` on 3.10 (same API)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vramplan.core.plan.errors import PlanError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str, where: str = "<string>") -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"not valid TOML: {exc}", where) from None
    return data


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; every failure is a `PlanError` naming the file."""
    p = Path(path)
    where = str(path)
    if not p.exists():
        raise PlanError("no such file", where)
    if p.is_dir():
        raise PlanError("is a directory, not a plan file", where)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise PlanError(f"cannot read: {exc.strerror or exc}", where) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start}): TOML files must be UTF-8", where) from None
    return loads(text, where)
