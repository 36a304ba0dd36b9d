"""`vramplan help [TOPIC]` (issue 31.3): the topics, each page, an unknown topic, and how a page is shown: Rich
markdown through a pager on a terminal, the plain page under NO_COLOR (still paged) or through a pipe."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from vramplan.cli import helptopics
from vramplan.cli.parser import run
from vramplan.core.files.helppages import ORDER, find_topic, page_text, page_title, topics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_help_lists_every_page_with_its_title(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("vramplan help TOPIC")
    listed = [line.split()[0] for line in lines[1:]]
    assert set(listed) == {p.stem for p in DOCS.glob("*.md")}
    assert listed[: len(ORDER)] == list(ORDER)  # the usual pages first, in reading order
    for line in lines[1:]:
        name = line.split()[0]
        title = page_title((DOCS / f"{name}.md").read_text())
        assert line.strip().removesuffix(" (for developers)").endswith(title), line


@pytest.mark.parametrize("name", [t.name for t in topics()])
def test_each_topic_prints_its_page_plain_through_a_pipe(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["help", name]) == 0
    out = capsys.readouterr().out
    assert out.rstrip("\n") == page_text(find_topic(name)).rstrip("\n")
    assert out.startswith("# ") and "\x1b" not in out and "<!-- generated" not in out.splitlines()[0]


def test_a_topic_takes_any_case_and_the_md_suffix(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["help", "KEYS.md"]) == 0
    assert capsys.readouterr().out.startswith("# Every key of a plan")


def test_an_unknown_topic_is_one_line_naming_the_topics_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["help", "kyes"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert "'kyes'" in line and "did you mean keys?" in line
    assert all(t.name in line for t in topics())


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_color_on_a_terminal_pages_the_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    paged: list[str] = []
    monkeypatch.setattr(helptopics, "_terminal", FakeTerminal)
    monkeypatch.setattr("pydoc.pager", paged.append)
    monkeypatch.setenv("NO_COLOR", "1")
    assert run(["help", "keys"]) == 0
    assert paged == [page_text(find_topic("keys"))]


def test_a_terminal_gets_rich_markdown_through_the_pager(monkeypatch: pytest.MonkeyPatch) -> None:
    paged: list[str] = []
    monkeypatch.setattr(helptopics, "_terminal", FakeTerminal)
    monkeypatch.setattr("pydoc.pager", paged.append)  # Rich's system pager is pydoc's
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "100")
    assert run(["help", "keys"]) == 0
    (text,) = paged
    assert "\x1b[" in text  # styled
    assert "Every key of a plan" in text and "# Every key" not in text  # rendered, not the source
    assert "training.seq_len" in text


def test_help_through_a_pipe_loads_neither_rich_nor_textual() -> None:
    code = (
        "import sys\nfrom vramplan.__main__ import main\nrc = main(['help', 'planner'])\n"
        "assert rc == 0, rc\nassert not {'rich', 'textual'} & set(sys.modules), 'rich or textual loaded'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# The planner")


def test_user_topics_come_first_and_developer_pages_last_and_marked(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 40.7: `vramplan help` listed the developer pages beside the user ones."""
    assert run(["help"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    marked = [line.split()[0] for line in lines if line.endswith("(for developers)")]
    assert marked == ["development", "benchmarks", "data"]
    assert [line.split()[0] for line in lines[-3:]] == marked  # after every user page
    assert lines[0].split()[0] == "getting-started"


def test_the_readme_links_every_page() -> None:
    """The README's list of pages is up to date: every docs/ page is linked in its Documentation section (and its
    `vramplan help` block is generated: tests/core/files/test_docpages.py)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Documentation", 1)[1]
    missing = [t.name for t in topics() if f"(docs/{t.name}.md)" not in section]
    assert not missing, f"docs pages the README's Documentation section does not link: {missing}"
