"""Errors that reach the user as one clear line (CLI: stderr + exit code 2; TUI: next to the field)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic is imported by the modules that validate, not by every importer of this one
    from pydantic import ValidationError


class PlanError(ValueError):
    """A problem with user input: a plan file, a key, a value, a preset id.

    `where` names the file and/or the dotted key (``plan.toml: training.seq_len``); `message` says what is wrong
    and, where we can, what would be right.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message

    def at(self, where: str) -> PlanError:
        """The same error located more precisely (``file`` prefixed to the key)."""
        return PlanError(self.message, f"{where}: {self.where}" if self.where else where)


class PlanNotice(UserWarning):
    """Something the user should know that is not an error (e.g. an exported plan's estimate changed).

    Core code emits it with `warnings.warn`; the CLI prints each as one line on stderr without changing the exit
    code, the TUI shows it next to the plan. `core.files.planio.load_plan_file` returns them instead of warning.
    """


def suggest(name: str, choices: Iterable[str]) -> str:
    """``; did you mean llama-7b?`` when a name is close to one of `choices`, else empty."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def pydantic_error(exc: ValidationError, known_keys: Callable[[list[str]], list[str]]) -> PlanError:
    """The first problem of a pydantic `ValidationError` as one `PlanError` naming its dotted key; an unknown key
    gets close matches among ``known_keys(parent_path)``."""
    err = exc.errors()[0]
    loc = [str(x) for x in err["loc"]]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, PlanError):
        return PlanError(ctx_error.message, ctx_error.where or ".".join(loc) or None)
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        parent = loc[:-1]
        known = known_keys(parent)
        hint = suggest(loc[-1], known) if known else ""
        what = "table" if not parent else "key"
        known_list = f" (known: {', '.join(known)})" if known else ""
        return PlanError(f"unknown {what}{hint or ''}" + ("" if hint else known_list), key)
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "missing":
        msg = "missing (no preset gives it)" if loc and loc[0] == "model" else "missing"
    if "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict):
        msg = f"{msg} (got {err['input']!r})"
    return PlanError(msg, key or None)
