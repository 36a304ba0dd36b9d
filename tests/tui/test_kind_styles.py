"""Each kind of memory is drawn from its record (`core.memory.kinds.KindSpec`): a theme variable for its colour, a
letter of its own without colour, and one CSS rule per kind made from the table."""

from __future__ import annotations

from textual.app import App

from vramplan.core.memory.kinds import HOST, KIND_SPECS
from vramplan.tui.widgets.bars import GLYPHS_NO_COLOR, KIND_CLASSES, KIND_CSS


def test_every_kind_has_its_own_glyph_and_a_theme_colour() -> None:
    specs = (*KIND_SPECS, HOST)
    assert len({k.glyph for k in specs}) == len(specs) == len(GLYPHS_NO_COLOR)
    variables = App().get_css_variables()
    for k in specs:
        assert k.colour.startswith("$") and k.colour[1:] in variables, k
        assert f"MemoryGauges > .kind--{k.key} {{ color: {k.colour}; }}" in KIND_CSS
        assert f"kind--{k.key}" in KIND_CLASSES
