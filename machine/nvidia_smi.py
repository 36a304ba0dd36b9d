"""This machine's GPUs, from ``nvidia-smi``, matched to a hardware preset (the default plan's hardware): the half of
GPU detection that runs a process (`vramplan.core.plan.catalogue.gpu_match` parses and matches what it prints).

No ``nvidia-smi``, a failing or slow one (short timeout), or output that does not parse: None, and callers fall
back silently to the documented default. ``VRAMPLAN_DETECT=0`` turns detection off. The result is cached per
process (and forgotten when the presets reload).

`starting_plan`: the plan vramplan starts from without a plan file, the default plan on these GPUs.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING

from vramplan.core.plan.catalogue.gpu_match import QUERY, DetectedGpus, detected_from
from vramplan.core.plan.detected import plan_on
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.plan import Plan
from vramplan.machine.host import detection_on

if TYPE_CHECKING:
    import subprocess

TIMEOUT_S = 2.0
MAX_OUTPUT_BYTES = 256 * 1024  # what is read from nvidia-smi at most; more means it is not the CSV asked for


def query() -> str | None:
    """nvidia-smi's CSV output, or None (not installed, failed, timed out, printed more than `MAX_OUTPUT_BYTES`
    or something that is not text). At most `MAX_OUTPUT_BYTES` are read: one that prints without end is stopped
    there, not read into memory for the whole timeout."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    import subprocess  # a machine with nvidia-smi only: elsewhere a command never loads it

    try:
        proc = subprocess.Popen(
            [exe, *QUERY], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    try:
        out = _read_bounded(proc, TIMEOUT_S)
        code = proc.wait(timeout=max(0.05, TIMEOUT_S / 4)) if out is not None else None
    except (subprocess.TimeoutExpired, OSError, ValueError):  # ValueError: select() on a Windows pipe
        out, code = None, None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    if out is None or code != 0:
        return None
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_bounded(proc: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    """What the process prints until it closes its output, or None past ``timeout`` seconds or
    `MAX_OUTPUT_BYTES` bytes (then it is killed by the caller)."""
    import select

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_OUTPUT_BYTES:
            return None
        chunks.append(chunk)


@memoised(None, group="presets")
def detected_gpus() -> DetectedGpus | None:
    """This machine's GPUs mapped to a preset, or None (see the module docstring). Registers a runtime preset
    for an unknown GPU, so the plan can name it."""
    if not detection_on():
        return None
    out = query()
    return detected_from(out) if out else None


def starting_plan() -> Plan:
    """The plan vramplan starts from without a plan file: the default plan, on this machine's GPUs when
    nvidia-smi reports them (the matching hardware preset, the GPU count per node), else on the documented default
    hardware (8 x A100-80GB)."""
    return plan_on(detected_gpus())
