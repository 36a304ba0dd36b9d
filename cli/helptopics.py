"""``vramplan help [TOPIC]``: the documentation pages (docs/*.md, shipped in the wheel) in the terminal.

Without a topic: the topics, one line each. With one: its page. On a terminal the page is Rich markdown through a
pager (``$PAGER``, else ``less -R``: pydoc's choice); with ``NO_COLOR`` set, or when stdout is a pipe or a file, it
is the plain markdown, unpaged when piped. Rich (installed with Textual) is imported only here, only for a
terminal, so the other commands never load it. An unknown topic is one line naming the topics, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # the pages are read only when `help` runs: building the parser imports none of it
    from vramplan.core.files.helppages import Topic


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "help",
        help="the documentation in the terminal: the topics, or one page",
        description="The user documentation (the pages of docs/): without TOPIC, the topics; with it, its page, "
        "as Rich markdown in a pager on a terminal, plain markdown with NO_COLOR or when piped.",
        epilog="example: vramplan help keys",
    )
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="a topic (vramplan help lists them)")
    p.set_defaults(handler=cmd_help)


def listing(every: tuple[Topic, ...]) -> str:
    """``  keys               Every key of a plan``, one line a topic (the user pages first, the developer pages
    after, marked), under a line saying how to open one."""
    width = max((len(t.name) for t in every), default=0)
    lines = ["vramplan help TOPIC prints a page; the topics:"]
    lines += [f"  {t.name:<{width}}  {t.listed}" for t in every]
    return "\n".join(lines) + "\n"


def _terminal() -> TextIO | None:
    """The process's own stdout when it is a terminal (`vramplan.cli.parser.run` holds a command's output in a
    buffer, so ``sys.stdout`` is not it), else None."""
    real = sys.__stdout__
    return real if real is not None and real.isatty() else None


def _show_rich(text: str) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(file=sys.stdout)
    os.environ.setdefault("LESS", "-R")  # pydoc's default pager is less: let it pass Rich's colours through
    with console.pager(styles=True):
        console.print(Markdown(text))


def cmd_help(args: argparse.Namespace) -> int:
    from vramplan.core.files.helppages import UnknownTopic, find_topic, page_text, topics

    if not args.topic:
        sys.stdout.write(listing(topics()))
        return 0
    try:
        topic = find_topic(args.topic)
    except UnknownTopic as exc:
        print(f"vramplan help: {exc}", file=sys.stderr)
        return 2
    text = page_text(topic)
    terminal = _terminal()
    if terminal is None:  # a pipe or a file: the plain page, unpaged
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    with contextlib.redirect_stdout(terminal):  # the pager writes to the terminal itself
        if "NO_COLOR" in os.environ:  # https://no-color.org: set, even empty; the plain page, still paged
            import pydoc

            pydoc.pager(text)
        else:
            _show_rich(text)
    return 0
