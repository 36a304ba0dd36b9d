"""Reading TOML files with one-line errors. ``tomllib`` on 3.11+, ``tomli`` on 3.10 (same API)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.readfile import read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


MAX_DEPTH = 16  # tables and lists inside each other: a plan file needs 3


def depth_problem(data: Any, limit: int = MAX_DEPTH) -> str:
    """``"nested more than 16 levels deep"`` when tables/lists (dicts/lists) nest deeper than ``limit``, else
    empty. Iterative: a deeply nested value must not exhaust the stack here or in what reads it later."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list | tuple):
            children = list(value)
        else:
            continue
        if depth >= limit:
            return f"tables or lists nested more than {limit} levels deep"
        stack.extend((child, depth + 1) for child in children)
    return ""


def loads(text: str, where: str = "<string>") -> dict[str, Any]:
    """Parse TOML text; every failure (including integers of more than 4,300 digits, which ``tomllib`` refuses
    with a plain ValueError, and nesting deep enough to exhaust the stack) is a one-line `PlanError`."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"not valid TOML: {exc}", where) from None
    except RecursionError:
        raise PlanError("not readable: tables or lists nested too deeply", where) from None
    except ValueError as exc:  # int("9" * 5000): Python's limit on converting long digit strings
        if "digits" in str(exc):
            raise PlanError("a number with more than 4,300 digits (no plan value is that large)", where) from None
        raise PlanError(f"not valid TOML: {exc}", where) from None
    problem = depth_problem(data)
    if problem:
        raise PlanError(problem, where)
    return data


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file (a regular file of at most a few MB: `read_regular`); every failure is a `PlanError`
    naming the file."""
    where = str(path)
    data = read_regular(Path(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start}): TOML files must be UTF-8", where) from None
    return loads(text, where)
