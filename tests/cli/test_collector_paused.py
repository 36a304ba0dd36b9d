"""A headless command runs with the garbage collector paused (`vramplan.__main__.pause_collector`), except
``vramplan measure``; the collector is on again when the command returns or raises. In the command's own process
(`main` reading ``sys.argv``) what is alive is frozen at its end; a caller's `main(argv)` freezes nothing."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

import vramplan.__main__ as entry
import vramplan.cli.parser as parser


def _collector_during(monkeypatch: pytest.MonkeyPatch, argv: list[str], fail: bool = False) -> bool:
    seen: list[bool] = []

    def fake_run(args: list[str]) -> int:
        seen.append(gc.isenabled())
        if fail:
            raise RuntimeError("boom")
        return 0

    monkeypatch.setattr(parser, "run", fake_run)
    if fail:
        with pytest.raises(RuntimeError):
            entry.main(argv)
    else:
        assert entry.main(argv) == 0
    assert gc.isenabled()  # on again after the command
    return seen[0]


def test_a_command_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.isenabled()
    assert _collector_during(monkeypatch, ["estimate", "--json"]) is False
    assert _collector_during(monkeypatch, ["check"], fail=True) is False


def test_measure_keeps_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _collector_during(monkeypatch, ["measure"]) is True


def test_a_collector_already_off_stays_off(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.disable()
    try:
        monkeypatch.setattr(parser, "run", lambda args: 0)
        assert entry.main(["keys"]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_commands_own_process_freezes_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parser, "run", lambda args: 0)
    before = gc.get_freeze_count()
    assert entry.main(["keys"]) == 0
    assert gc.get_freeze_count() == before  # called with argv: the caller's process
    monkeypatch.setattr(sys, "argv", ["vramplan", "keys"])
    # main() in its own process ignores a Ctrl-C while the interpreter exits; this process goes on, and the
    # processes it starts would inherit SIGINT ignored (Python keeps an inherited SIG_IGN)
    handler = signal.getsignal(signal.SIGINT)
    try:
        assert entry.main() == 0
        assert gc.get_freeze_count() > before
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        signal.signal(signal.SIGINT, handler)
