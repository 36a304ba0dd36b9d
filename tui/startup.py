"""Start-up: the modules the app imports (Textual, pydantic, the plan's model classes, the estimator, the widgets)
make some 80,000 objects that live as long as the process. Python's collector would walk them all again and again
while they are created: at start-up that is 30-50 ms of an app's 0.4 s, a full collection among them (20-30 ms on
this project's VM) included. `long_lived` pauses the collector while they are imported and then moves them out of
its sight (`gc.freeze`), as CPython's documentation suggests for objects made at start-up; objects made later are
collected as usual. What is frozen is never freed: the few hundred objects that were already garbage (reference
cycles left by imports) stay, a few tens of kilobytes.

The first frame makes tens of thousands of objects more (the screen, its widgets, their styles), most of them kept:
`FirstFrame` pauses the collector from the app's start to its first frame (7-8 ms of young collections) and then
turns it back on. In the `vramplan` command, whose process runs one app, they are frozen too (``freeze``), at the
first frame and again once the start-up work after it is done (the Model pane's config.json rows, drawn): left in
sight, the 48,000 objects made each full collection take 27-42 ms, a stalled key about every 70 keys
(`bench/bench_gc.py`: 3 in 200 keys, 99-108 ms in all); frozen, the 3 took 31-55 ms in all, 13-23 ms at most (what
drawing makes, some 17,000 strips, regions and caches, stays in sight). The 1,600 objects that were already garbage
at the first frame (reference cycles made by the start) stay, a few hundred kilobytes. At its end the app gives what
it froze back to the collector (`gc.unfreeze`, which gives back what the imports froze too: the process is ending).
Other apps (the tests run hundreds in one process) freeze nothing."""

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
    """The collector paused from `pause` (the app's start) to `resume` (its first frame); `resume` runs once and
    restores the collector as `pause` found it. With ``freeze``, what is alive is frozen at `resume` and at
    `settled`, and released at `release` (the app's end, which also resumes an app that ends before a frame)."""

    def __init__(self, *, freeze: bool = False) -> None:
        self._paused = False
        self._was_enabled = False
        self._freeze = freeze
        self._frozen = False
        self._released = False

    def pause(self) -> None:
        if not self._paused:
            self._paused, self._was_enabled = True, gc.isenabled()
            gc.disable()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self.settled()
            if self._was_enabled:
                gc.enable()

    def settled(self) -> None:
        """With ``freeze``: everything alive now is moved out of the collector's sight (not after `release`)."""
        if self._freeze and not self._released:
            gc.freeze()
            self._frozen = True

    def release(self) -> None:
        """The app's end: the collector back on, and what `freeze` kept out of its sight back in it (an app that
        froze nothing leaves the process's frozen objects alone)."""
        self._released = True
        self.resume()
        if self._frozen:
            self._frozen = False
            gc.unfreeze()
