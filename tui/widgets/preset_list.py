"""A list of presets (models or GPUs) with the plan's current one marked; picking one posts a plan change."""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from vramplan.core.plan.catalogue import presets
from vramplan.tui.widgets.text import compact


class PresetList(OptionList):
    """Rows are (preset id, text). The current preset is marked ``●`` and highlighted when shown."""

    def __init__(self, key: str, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        compact(self)
        self.key = key  # the plan key a pick sets: model.preset or hardware.gpu
        self._shown: tuple[tuple[str, str], ...] = ()
        self._current: str | None = None
        self._notes: tuple[str, ...] = ()

    def show_rows(self, rows: Sequence[tuple[str, str]], current: str | None, notes: tuple[str, ...] = ()) -> None:
        """The presets (id, text), the current one marked; `notes` (broken user files) follow, not selectable."""
        new = tuple(rows)
        if new == self._shown and current == self._current and notes == self._notes:
            return
        keep = self.highlighted_option.id if self.highlighted_option is not None else None
        self._shown, self._current, self._notes = new, current, notes
        self.set_options(
            [
                *(
                    Option(Content.assemble(("● " if pid == current else "  ", "$accent"), text), id=pid)
                    for pid, text in new
                ),
                *(Option(Content.styled(f"✘ {note}", "$text-error"), disabled=True) for note in notes),
            ]
        )
        ids = [pid for pid, _ in new]
        target = keep if keep in ids and self.has_focus else current if current in ids else None
        if target is not None:
            self.highlighted = ids.index(target)
        elif ids:
            self.highlighted = 0
        self.call_after_refresh(self.scroll_to_highlight)


USER_MARK = " (user)"


def broken_notes(kind: str) -> tuple[str, ...]:
    """One note per broken user preset file of `kind` (``models`` or ``hardware``): its path and the problem."""
    prefix = f"{kind}/"
    return tuple(
        f"skipped user preset: {line}" for key, line in presets.registry().broken.items() if key.startswith(prefix)
    )
