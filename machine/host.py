"""This machine's host memory, from ``MemTotal`` of /proc/meminfo: the limit of offload for plans on this
machine's GPU (`vramplan.core.plan.node`).

The file is read within a byte budget (`MAX_BYTES`) and only if it is a regular file (/proc/meminfo is one; a FIFO
or a device is opened without blocking and refused), so a strange path never hangs. Anything that does not parse
(no ``MemTotal`` line, a unit other than kB, a figure past `MAX_HOST_BYTES`) is None: callers fall back to the GPU
preset's typical node. ``VRAMPLAN_DETECT=0`` turns the reading off, as it turns GPU detection off.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.core.plan.catalogue.specs import MAX_NODE_GIB
from vramplan.core.plan.helpers.units import GiB

MEMINFO = Path("/proc/meminfo")
MAX_BYTES = 64 * 1024  # /proc/meminfo is about 1.5 KiB; more is not it
MAX_HOST_BYTES = MAX_NODE_GIB * GiB  # the bound of hardware.host_memory_gib
_MEMTOTAL = re.compile(rb"^MemTotal:[ \t]*([0-9]{1,20})[ \t]*kB[ \t]*$", re.MULTILINE)
_MEMAVAILABLE = re.compile(rb"^MemAvailable:[ \t]*([0-9]{1,20})[ \t]*kB[ \t]*$", re.MULTILINE)
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2, as a container sees its own group


def detection_on() -> bool:
    """``VRAMPLAN_DETECT`` unset or anything but 0/no/false/off (`vramplan.machine.nvidia_smi` asks it too)."""
    return os.environ.get("VRAMPLAN_DETECT", "1").strip().lower() not in ("0", "no", "false", "off")


def read_bounded(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The file's first bytes (None past ``limit``), or None when it is not a regular file or cannot be read.
    Opened with O_NONBLOCK, so a FIFO without a writer returns at once (and is refused as not a regular file)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def parse_memtotal(text: bytes) -> int | None:
    """``MemTotal:  131932160 kB`` in bytes (the kernel's kB is KiB: fs/proc/meminfo.c shifts pages by
    PAGE_SHIFT - 10), or None: no such line, zero, or past `MAX_HOST_BYTES`."""
    found = _MEMTOTAL.search(text)
    if found is None:
        return None
    total = int(found.group(1)) * 1024
    return total if 0 < total <= MAX_HOST_BYTES else None


def host_memory_bytes(path: Path | None = None) -> int | None:
    """This machine's host memory (``MemTotal`` of ``path``, default `MEMINFO`), or None: detection off, no such
    file, or nothing that parses."""
    if not detection_on():
        return None
    data = read_bounded(MEMINFO if path is None else path)
    return None if data is None else parse_memtotal(data)


def note_this_machine(det: DetectedGpus | None, path: Path | None = None) -> int | None:
    """Tell core this machine's host memory for plans on its GPU (``det``, the detected GPUs; None: no GPU
    detected, nothing to tell). Returns the bytes registered, or None."""
    if det is None:
        return None
    total = host_memory_bytes(path)
    if total is not None:
        presets.register_machine_host(det.gpu_id, total)
    return total


def available_memory_bytes(meminfo: Path | None = None, cgroup: Path | None = None) -> int | None:
    """Host memory a new process can take now, or None when nothing parses: ``MemAvailable`` of /proc/meminfo (the
    kernel's estimate of what can be allocated without swapping: fs/proc/meminfo.c, ``si_available``), less where a
    cgroup v2 limit (a container's ``memory.max``, less its ``memory.current``) leaves less. Read whatever
    ``VRAMPLAN_DETECT`` says: `vramplan measure` checks a plan against it before building (a safety check, not a
    figure of the plan)."""
    data = read_bounded(MEMINFO if meminfo is None else meminfo)
    found = _MEMAVAILABLE.search(data) if data is not None else None
    if found is None:
        return None
    free = int(found.group(1)) * 1024
    group = CGROUP if cgroup is None else cgroup
    limit, used = read_bounded(group / "memory.max", 64), read_bounded(group / "memory.current", 64)
    if limit is not None and used is not None and limit.strip().isdigit() and used.strip().isdigit():
        free = min(free, max(0, int(limit) - int(used)))
    return free
