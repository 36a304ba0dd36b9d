"""Paths typed in the app (a plan to open, an export's file, a config.json): completed from the file system as
you type (the rest of the first matching name is suggested; right arrow at the end takes it)."""

from __future__ import annotations

import os
from pathlib import Path

from textual.suggester import Suggester


def complete_path(value: str, suffixes: tuple[str, ...] = ()) -> str | None:
    """`value` completed to the first name in its directory that starts with what was typed: directories (with a
    trailing ``/``) and files ending in one of `suffixes` (any file when empty); None if nothing matches."""
    if not value:
        return None
    expanded = os.path.expanduser(value)
    tail = expanded.rpartition(os.sep)[2]
    directory = Path(expanded[: len(expanded) - len(tail)] or ".")
    hidden = tail.startswith(".")
    try:  # only the names that match are sorted: a checkpoint folder can hold thousands of files
        with os.scandir(directory) as it:
            entries = sorted(
                (e for e in it if e.name.startswith(tail) and (hidden or not e.name.startswith("."))),
                key=lambda e: e.name,
            )
    except (OSError, ValueError):  # ValueError: a NUL character
        return None
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if not is_dir and suffixes and not name.lower().endswith(suffixes):
            continue
        rest = name[len(tail) :] + (os.sep if is_dir else "")
        if rest:
            return value + rest
    return None


class PathSuggester(Suggester):
    """`complete_path` as an `Input` suggester."""

    def __init__(self, suffixes: tuple[str, ...] = ()) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.suffixes = suffixes

    async def get_suggestion(self, value: str) -> str | None:
        return complete_path(value, self.suffixes)
