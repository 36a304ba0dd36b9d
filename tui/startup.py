"""Start-up: the modules the app imports (Textual, pydantic, the plan's model classes, the estimator, the widgets)
make some 80,000 objects that live as long as the process. Python's collector would walk them all again and again
while they are created: at start-up that is 30-50 ms of an app's 0.4 s, a full collection among them (20-30 ms on
this project's VM) included. `long_lived` pauses the collector while they are imported and then moves them out of
its sight (`gc.freeze`), as CPython's documentation suggests for objects made at start-up; objects made later are
collected as usual. What is frozen is never freed: the few hundred objects that were already garbage (reference
cycles left by imports) stay, a few tens of kilobytes.

The first frame makes tens of thousands of objects more (the screen, its widgets, their styles), most of them kept:
`FirstFrame` pauses the collector from the app's start to its first frame (7-8 ms of young collections) and then
turns it back on. They are not frozen: a process may run several apps (the tests do), and a frozen widget tree
would never be freed once its app ended."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived() -> Iterator[None]:
    """No collection while the block runs (imports); then everything alive is frozen and collection resumes (if
    it was on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class FirstFrame:
    """The collector paused from `pause` (the app's start) to `resume` (its first frame, or its end if it ends
    before one); `resume` runs once and restores the collector as `pause` found it."""

    def __init__(self) -> None:
        self._paused = False
        self._was_enabled = False

    def pause(self) -> None:
        if not self._paused:
            self._paused, self._was_enabled = True, gc.isenabled()
            gc.disable()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            if self._was_enabled:
                gc.enable()
