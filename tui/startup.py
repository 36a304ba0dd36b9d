"""Start-up: the modules the app imports (Textual, pydantic, the plan's model classes, the estimator, the widgets)
make some 80,000 objects that live as long as the process. Python's collector would walk them all again and again
while they are created: at start-up that is 30-50 ms of an app's 0.4 s, a full collection among them (20-30 ms on
this project's VM) included. `long_lived` pauses the collector while they are imported and then moves them out of
its sight (`gc.freeze`), as CPython's documentation suggests for objects made at start-up; objects made later are
collected as usual. What is frozen is never freed: the few hundred objects that were already garbage (reference
cycles left by imports) stay, a few tens of kilobytes."""

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
