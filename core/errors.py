"""Errors that reach the user as one clear line (CLI: stderr + exit code 2; TUI: next to the field)."""

from __future__ import annotations


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
    code, the TUI shows it next to the plan. `core.planio.load_plan_file` returns them instead of warning.
    """
