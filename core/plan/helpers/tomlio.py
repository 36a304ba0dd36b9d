"""Reading TOML files with one-line errors. ``tomllib`` on 3.11+, ``tomli`` on 3.10 (same API)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.jsonio import TOO_MANY_DIGITS, too_many_digits
from vramplan.core.plan.helpers.readfile import read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


MAX_DEPTH = 16  # tables and lists inside each other: a plan file needs 3
# plan files, presets and calibrations are a few KB; tomllib reads 1 MiB of the costliest valid TOML (a table
# header a line) in about 1 s, 4 MiB (the limit of other files, `MAX_TEXT_BYTES`) in 3 s
MAX_TOML_BYTES = 1 << 20


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


# What ``tomllib`` spends its time on, found before it runs: dotted keys (``[a.b.c]``, ``a.b.c = 1``, ``[[a.b]]``,
# ``{a.b = 1}``). It builds a key by adding one part at a time to a tuple and records every prefix of it, so a key
# of n parts costs n^2: a 200 KB ``[a.a.a...]`` of 100,000 parts took 8-45 s, ``a.a.a... = 1`` ran out of memory.
# One pass of `_TOKENS` finds every run of dotted parts outside strings and comments: strings are matched whole
# first (a dotted name inside a string counts nothing); a bare or quoted part and the parts that follow it are one
# match, so no part is tried twice. Linear: no alternative fails after a long scan (a string that does not close
# ends at its line's end, a multi-line one at the text's: where tomllib stops with an error anyway).
_BARE = r"[A-Za-z0-9_-]+"
_BASIC = r'"(?:[^"\\\n]|\\[\s\S])*(?:"|$)'
_LITERAL = r"'[^'\n]*(?:'|$)"
_PART = f"(?:{_BARE}|{_BASIC}|{_LITERAL})"
_TOKENS = re.compile(
    r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*(?:"{3,5}|\Z)'  # a multi-line basic string (up to two quotes end its text)
    r"|'''(?:[^']|'(?!''))*(?:'{3,5}|\Z)"  # a multi-line literal string
    rf"|(?P<key>{_PART}(?:[ \t]*\.[ \t]*{_PART})*)"  # parts joined by dots: a dotted key (a float is 2 parts)
    r"|#[^\n]*",  # a comment
    re.MULTILINE,
)
_PARTS = re.compile(_PART, re.MULTILINE)


def dotted_key_problem(text: str, limit: int = MAX_DEPTH) -> str:
    """``"a dotted key of more than 16 parts"`` when a key (a table header, the key of a key/value pair or of an
    inline table) has more than ``limit`` parts, else empty. Checked before ``tomllib`` parses, whose time grows
    with the square of a key's parts (see `_TOKENS`); a plan file's keys have 1 or 2 parts."""
    for m in _TOKENS.finditer(text):
        key = m.group("key")
        if key is not None and key.count(".") >= limit and len(_PARTS.findall(key)) > limit:
            return f"a dotted key of more than {limit} parts (tables nest {limit} levels at most)"
    return ""


def loads(text: str, where: str = "<string>") -> dict[str, Any]:
    """Parse TOML text; every failure (including integers of more than 4,300 digits, which ``tomllib`` refuses
    with a plain ValueError, nesting deep enough to exhaust the stack, and dotted keys long enough to take
    ``tomllib`` minutes: `dotted_key_problem`, checked first) is a one-line `PlanError`."""
    problem = dotted_key_problem(text)
    if problem:
        raise PlanError(problem, where)
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"not valid TOML: {exc}", where) from None
    except RecursionError:
        raise PlanError("not readable: tables or lists nested too deeply", where) from None
    except ValueError as exc:  # int("9" * 5000): Python's limit on converting long digit strings
        if too_many_digits(exc):
            raise PlanError(f"{TOO_MANY_DIGITS} (no plan value is that large)", where) from None
        raise PlanError(f"not valid TOML: {exc}", where) from None
    problem = depth_problem(data)
    if problem:
        raise PlanError(problem, where)
    return data


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file (a regular file of at most `MAX_TOML_BYTES`: `read_regular`); every failure is a
    `PlanError` naming the file. A UTF-8 byte order mark (as Windows editors write) is skipped: ``tomllib`` would
    call it an "Invalid statement"."""
    where = str(path)
    data = read_regular(Path(path), MAX_TOML_BYTES)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start}): TOML files must be UTF-8", where) from None
    return loads(text, where)
