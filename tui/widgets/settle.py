"""Work a keystroke need not wait for: run it after the frame, and during a burst of changes, once at its end.

A key's new figure is painted first (the estimate and the gauges take microseconds); what costs milliseconds per
change (each strategy choice's effect, the checklist, the time table) runs after that frame. When changes come
faster than `SETTLE_S` apart (a held key, typing 4096), it runs once, `SETTLE_S` after the last one, so it never
delays the next key's frame."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic

from textual.timer import Timer
from textual.widget import Widget

SETTLE_S = 0.05


class Settled:
    """Calling it asks for `callback` to run: now (or, with ``after_frame``, after the next frame) if it has not
    run for `SETTLE_S`, else `SETTLE_S` after the last call (each call restarts the wait). Panes call it from their
    sync, which already follows the frame: running there shares that sync's layout pass."""

    def __init__(
        self, widget: Widget, callback: Callable[[], object], *, after_frame: bool = False, delay: float = SETTLE_S
    ) -> None:
        self.widget = widget
        self.callback = callback
        self.after_frame = after_frame
        self.delay = delay
        self._timer: Timer | None = None
        self._queued = False
        self._last = -1e9

    def __call__(self) -> None:
        if self._queued:
            return
        if self._timer is None and monotonic() - self._last >= self.delay:
            if self.after_frame:
                self._queued = True
                self.widget.call_after_refresh(self._run)
            else:
                self._run()
            return
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.widget.set_timer(self.delay, self._run)

    def _run(self) -> None:
        self._timer = None
        self._queued = False
        self._last = monotonic()
        self.callback()
