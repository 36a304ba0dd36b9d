"""The light planner: widgets built when first needed and drawn cheaply, checked on what the app draws (Pilot): the
one-widget pane tabs, texts drawn line by line, the gauges fitting 80x24, the palette of kinds held by the gauges,
widgets built when first needed, and the helpers behind them."""

from __future__ import annotations

from textual.color import Color
from textual.content import Content
from textual.widgets import Input

from tests.waiting import until
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.bars import KindLegend, StackedBar, kind_style
from vramplan.tui.widgets.pane_tabs import PaneTabs, tab_spans
from vramplan.tui.widgets.text import LineText, compact, shown_height


def strip_text(strip: object) -> str:
    return "".join(segment.text for segment in strip)  # type: ignore[attr-defined]


def test_tab_spans_put_one_space_before_each_title() -> None:
    assert tab_spans(["Model", "Hardware", "Checks"]) == [(0, 6), (6, 15), (15, 22)]


async def test_pane_tabs_mark_the_shown_pane_without_colour_and_pick_panes() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tabs = app.planner.query_one(PaneTabs)
        titles, bar = str(tabs.render()).splitlines()
        assert titles.startswith(" Model Hardware Training Strategies Checks")
        start, end = tabs.spans[0]  # the shown pane (Model) over a heavy bar, the others over a light one
        assert bar[start:end] == "━" * (end - start) and set(bar[end:]) == {"─"}
        x = tabs.spans[2][0] + 2  # a click on "Training"
        await pilot.click(PaneTabs, offset=(x, 0))
        await pilot.pause()
        assert app.planner.pane == "training" and tabs.shown == "training"
        start, end = tabs.spans[2]
        assert str(tabs.render()).splitlines()[1][start:end] == "━" * (end - start)
        app.planner.set_focus(tabs)
        await pilot.press("right")  # focused: left and right move between panes
        await pilot.pause()
        assert app.planner.pane == "strategy"
        await pilot.press("left", "left", "left", "left")  # and wrap around
        await pilot.pause()
        assert app.planner.pane == "checklist"


async def test_line_text_draws_the_lines_a_static_wraps_and_redraws_a_changed_line() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        moment = app.planner.query_one("#peak-moment", LineText)
        width = moment.size.width
        text = moment.visual
        assert isinstance(text, Content)
        wrapped = [line.plain for line in text.wrap(width)]
        assert len(wrapped) > 1  # the moment wraps at 80x24
        drawn = [strip_text(moment.render_line(y)).rstrip() for y in range(len(wrapped))]
        assert drawn == [line.rstrip() for line in wrapped]
        headline = app.planner.query_one("#headline", LineText)
        before = strip_text(headline.render_line(0))
        await pilot.press("z")  # ZeRO-3 -> off: the verdict changes
        await pilot.pause()
        after = strip_text(headline.render_line(0))
        assert after != before and after.startswith("✘ does not fit")


async def test_the_gauges_fit_80x24_with_every_legend_row() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gauges = app.planner.query_one("#gauges")
        assert gauges.virtual_size.height <= gauges.size.height  # no scrolling, no scrollbar to draw
        legend = app.planner.query_one(KindLegend)
        assert legend.region.bottom <= gauges.region.bottom  # the last row (overhead) is on screen
        assert legend.rows[-1][0] == "overhead"
        assert not app.planner.query_one("#explain").display  # below the legend only where there is room


async def test_the_explanation_shows_when_reading_the_legend_or_on_a_tall_terminal() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        assert app.planner.query_one("#explain").display
    app = VramplanApp()
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        assert app.planner.query_one("#explain").display


async def test_bars_and_legend_take_each_kind_colour_from_the_gauges() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gauges = app.planner.query_one("#gauges")
        bar = app.planner.query_one("#gpu-bar", StackedBar)
        legend = app.planner.query_one(KindLegend)
        assert "kind--parameters" in gauges.COMPONENT_CLASSES
        assert not any(name.startswith("stacked-bar--param") for name in bar.COMPONENT_CLASSES)
        colour = gauges.get_visual_style("kind--parameters", partial=True).foreground
        assert colour is not None and colour == Color.parse(app.theme_variables["primary"])
        assert kind_style(bar, "parameters") == kind_style(legend, "parameters")
        assert kind_style(bar, "gradients").foreground != colour  # one colour per kind


def test_shown_height_counts_min_height() -> None:
    widget = LineText("one line")
    assert shown_height(widget, 1) == 1
    widget.styles.min_height = 4
    assert shown_height(widget, 1) == 4 and shown_height(widget, 5) == 5


def test_compact_gives_the_look_without_the_reactive() -> None:
    field = compact(Input())
    assert field.has_class("-textual-compact") and field.compact


async def test_the_pinned_and_host_bars_are_built_when_first_needed() -> None:
    app = VramplanApp(plan=default_plan())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.planner.query("#pinned-bar") and not app.planner.query("#host-bar")
        await pilot.press("P")
        await pilot.pause()
        assert app.planner.query_one("#pinned-bar", StackedBar).display
        await pilot.press("o")  # offload the optimizer: host RAM
        await pilot.pause()
        plan = app.planner.plan
        assert estimate(plan).cpu_per_node > 0
        await until(pilot, lambda: app.planner.query("#host-bar"), "the host RAM bar")  # built after the frame
        assert app.planner.query_one("#host-bar", StackedBar).display


async def test_pane_tabs_stay_on_their_two_lines_when_narrow_and_show_the_shown_pane() -> None:
    app = VramplanApp()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        tabs = app.planner.query_one(PaneTabs)
        titles, bar = str(tabs.render()).splitlines()  # cut at the edge, not wrapped over the bar
        assert len(titles) == len(bar) == tabs.size.width and "━" in bar
        await pilot.press("5")  # the Checks pane, whose title lies past 40 columns
        await pilot.pause()
        titles, bar = str(tabs.render()).splitlines()
        assert titles.endswith("Checks") and bar.endswith("━" * len(" Checks"))
