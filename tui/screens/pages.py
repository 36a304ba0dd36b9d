"""The documentation in the planner: the topics (the pages of docs/, as `vramplan help` lists them) and a page,
drawn by Textual's Markdown widget. Opened from the help screen (``t``); a link to another page opens it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, OptionList
from textual.widgets.option_list import Option

from vramplan.core.files.helppages import Topic, UnknownTopic, find_topic, page_text, topics
from vramplan.tui.screens.css import tcss


class TopicsScreen(ModalScreen[None]):
    """Every page, one line each (its name and title): enter opens it."""

    DEFAULT_CSS = tcss("pages.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "app.pop_screen", "Close", id="topics_close")]

    def compose(self) -> ComposeResult:
        every = topics()
        width = max((len(t.name) for t in every), default=0)
        yield OptionList(*(Option(f"{t.name:<{width}}  {t.listed}", id=t.name) for t in every), id="topics")

    def on_mount(self) -> None:
        box = self.query_one("#topics", OptionList)
        box.border_title = "Pages (vramplan help)"
        box.border_subtitle = "enter opens · esc closes"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.app.push_screen(PageScreen(find_topic(event.option.id)))


class PageScreen(ModalScreen[None]):
    """One page, scrolled with ↓ ↑ pgdn pgup home end."""

    DEFAULT_CSS = tcss("pages.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "app.pop_screen", "Close", id="page_close")]

    def __init__(self, topic: Topic) -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="page"):
            yield Markdown(page_text(self.topic), open_links=False)

    def on_mount(self) -> None:
        box = self.query_one("#page", VerticalScroll)
        box.border_title = f"{self.topic.name}: {self.topic.title}"
        box.border_subtitle = "↓ pgdn end: scroll · esc back"
        box.focus()

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        """A link to another page (``planner.md#keys``) opens that page; other links are left alone."""
        name = event.href.partition("#")[0]
        if name.endswith(".md") and "/" not in name:
            try:
                topic = find_topic(name)
            except UnknownTopic:
                return
            self.app.push_screen(PageScreen(topic))
