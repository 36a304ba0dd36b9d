"""The dialogs' and views' CSS: each screen's rules are a .tcss file beside its module, read into the screen's
``DEFAULT_CSS`` (`tcss`) when the module is first imported, as the screen is first shown.

Not ``CSS_PATH``: the first time a screen with a ``CSS_PATH`` is pushed, Textual parses the app's whole stylesheet
again and restyles every widget of every screen (`App._load_screen_css`: ``stylesheet.reparse()`` and
``stylesheet.update(app)``), the planner's 142 widgets included: 44 ms for their restyle alone on the first opening
of each dialog (timed around `Stylesheet.update_nodes`). A widget's ``DEFAULT_CSS`` is added when the widget is
mounted and styles the new widgets only. The rules are scoped to their screen (Textual's ``SCOPED_CSS``), so a
dialog's rules never reach the planner's widgets."""

from __future__ import annotations

from pathlib import Path


def tcss(name: str) -> str:
    """The rules in ``name``, a .tcss file in this package."""
    return (Path(__file__).parent / name).read_text(encoding="utf-8")
