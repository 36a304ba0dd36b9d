"""The planner's help screen opens the documentation pages `vramplan help` prints (issue 31.3): ``t`` lists the
topics, enter opens one in a Markdown view that scrolls at 80x24, a link to another page opens it, esc goes back."""

from __future__ import annotations

from textual.widgets import Markdown, OptionList

from tests.waiting import until
from vramplan.core.files.helppages import find_topic, topics
from vramplan.tui.app import VramplanApp
from vramplan.tui.screens.pages import PageScreen, TopicsScreen


async def test_t_lists_the_topics_and_enter_opens_a_page_at_80x24() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TopicsScreen)
        box = app.screen.query_one("#topics", OptionList)
        assert [box.get_option_at_index(i).id for i in range(box.option_count)] == [t.name for t in topics()]
        assert box.region.bottom <= 24
        await pilot.press("down", "down", "enter")  # the third topic: keys
        await pilot.pause()
        assert isinstance(app.screen, PageScreen) and app.screen.topic.name == topics()[2].name
        page = app.screen.query_one("#page")
        assert page.region.width <= 80 and page.region.bottom <= 24
        assert page.max_scroll_y > 0  # a long page scrolls
        await pilot.press("end")
        await until(pilot, lambda: page.scroll_y == page.max_scroll_y, "the page at its end")
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, TopicsScreen)
        await pilot.press("escape", "escape")
        await pilot.pause()
        assert app.screen.id != "help" and not isinstance(app.screen, (TopicsScreen, PageScreen))


async def test_a_link_to_another_page_opens_it() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(PageScreen(find_topic("keys")))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PageScreen)
        markdown = screen.query_one(Markdown)
        screen.post_message(Markdown.LinkClicked(markdown, "planner.md#keys"))
        await pilot.pause()
        assert isinstance(app.screen, PageScreen) and app.screen.topic.name == "planner"
        screen_before = app.screen
        app.screen.post_message(Markdown.LinkClicked(markdown, "https://example.com"))  # not a page: left alone
        await pilot.pause()
        assert app.screen is screen_before
