"""GPU detection off the UI thread. `vramplan.machine.nvidia_smi.detected_gpus` runs ``nvidia-smi`` (up to a 2-second
timeout); here it runs once, in a background thread started as early as possible (`vramplan` starts it before importing
Textual), so a slow or hanging ``nvidia-smi`` never delays the first frame: the planner starts on the documented
default and takes the detected GPUs when they arrive, if the user has not changed the plan yet. The same thread
reads this machine's host memory (vramplan.machine.host) for plans on the detected GPU. No Textual here.
"""

from __future__ import annotations

import threading

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.machine import host, nvidia_smi


class Detection:
    """One run of `detected_gpus` in a thread; `done` and `result` never block."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.result: DetectedGpus | None = None
        self._thread = threading.Thread(target=self._run, name="vramplan-detect-gpus", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = nvidia_smi.detected_gpus()
        except Exception:  # detection is best effort: anything odd means the documented default
            self.result = None
        try:
            host.note_this_machine(self.result)  # this machine's host memory, for plans on its GPU
        except Exception:  # best effort too: the GPU preset's typical node then
            pass
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)


_lock = threading.Lock()
_current: tuple[presets.Registry, Detection] | None = None


def begin() -> Detection:
    """The detection for the current presets (started now unless already running or done). `presets.reload()`
    forgets detected GPUs, so a new registry means a new detection."""
    global _current
    reg = presets.registry()  # loaded here, on the caller's thread, not raced by the detection thread
    with _lock:
        if _current is None or _current[0] is not reg:
            _current = (reg, Detection())
        return _current[1]


def known() -> DetectedGpus | None:
    """The detected GPUs if detection has finished and found some; never waits, never starts it."""
    cur = _current
    if cur is None or cur[0] is not presets.registry() or not cur[1].done:
        return None
    return cur[1].result


def detected_notice(det: DetectedGpus, kept: bool = False) -> str:
    """What the planner says about detected GPUs (``detected: 8 x H100 80GB HBM3 (nvidia-smi): ...``)."""
    if kept:
        return f"{det.label} (nvidia-smi): pick it in the Hardware pane (your changes are kept)"
    return f"{det.label} (nvidia-smi): planning for these GPUs"
