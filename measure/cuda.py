"""Every torch.cuda call of `vramplan.measure`: the device count, the allocator's figures (memory_allocated,
max_memory_allocated / max_memory_reserved and their reset), ``mem_get_info`` (what the driver, and so nvidia-smi,
sees as used), nvidia-smi's figure for this process, emptying the cache, and the out-of-memory error's type. The GPU
kit of bench/measure reads the GPU through these too."""

from __future__ import annotations

import gc
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch


def local_gpus() -> int:
    """CUDA devices this process can use (0 without a GPU or a CUDA build of torch)."""
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except RuntimeError:
        return 0


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), the CUDA caching allocator's failure."""
    return isinstance(exc, torch.cuda.OutOfMemoryError)


def used_bytes() -> tuple[int, int]:
    """(used, total) bytes of the current device as the driver reports them (``cudaMemGetInfo``)."""
    free, total = torch.cuda.mem_get_info()
    return int(total - free), int(total)


def free_bytes(index: int) -> int:
    """Free bytes of GPU ``index`` as the driver reports them (``cudaMemGetInfo``): what a new process can take."""
    free, _total = torch.cuda.mem_get_info(index)
    return int(free)


def nvidia_smi(*args: str) -> str | None:
    """The output of ``nvidia-smi ARGS --format=csv,noheader,nounits`` (None without nvidia-smi, or when it fails)."""
    try:
        return subprocess.run(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def nvidia_smi_process_bytes() -> int | None:
    """This process's GPU memory as nvidia-smi lists it (None without nvidia-smi, or when it lists no such pid)."""
    out = nvidia_smi("--query-compute-apps=pid,used_memory")
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()) and parts[1].isdigit():
            return int(parts[1]) * 2**20
    return None


def peak_bytes() -> tuple[int, int]:
    """The caching allocator's (max_memory_allocated, max_memory_reserved) since the last reset of its peaks."""
    return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())


@dataclass
class CudaMeter:
    """Per-phase peaks of the caching allocator: each phase starts with ``reset_peak_memory_stats`` and ends with a
    synchronize and the maxima; ``mem_get_info`` is read before the build and after every phase (the largest used
    figure is the process's peak as the driver sees it)."""

    before_used_bytes: int = 0
    total_bytes: int = 0
    max_used_bytes: int = 0
    phases: list[dict[str, Any]] = field(default_factory=list)
    process_source: str = ""  # where process_bytes came from (`RankFigures.process_source`)

    def start(self) -> None:
        torch.cuda.init()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.before_used_bytes, self.total_bytes = used_bytes()
        self.max_used_bytes = self.before_used_bytes

    @contextmanager
    def phase(self, step: int, name: str, micro_batch: int) -> Iterator[None]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            torch.cuda.synchronize()
            used, _ = used_bytes()
            self.max_used_bytes = max(self.max_used_bytes, used)
            peak, reserved_peak = peak_bytes()
            self.phases.append(
                {
                    "step": step,
                    "phase": name,
                    "micro_batch": micro_batch or None,
                    "start": start,
                    "peak": peak,
                    "reserved_peak": reserved_peak,
                    "end": int(torch.cuda.memory_allocated()),
                    "seconds": time.perf_counter() - t0,
                }
            )

    def allocated_bytes(self) -> int:
        return int(torch.cuda.memory_allocated())

    def process_bytes(self) -> int | None:
        """This process on the GPU: nvidia-smi's figure, else the driver's used bytes at their peak less before
        the build (which leaves out this process's CUDA context, created before the first reading)."""
        smi = nvidia_smi_process_bytes()
        self.process_source = "nvidia-smi" if smi is not None else "mem_get_info"
        return smi if smi is not None else self.max_used_bytes - self.before_used_bytes

    def stop(self) -> None:
        gc.collect()
        torch.cuda.empty_cache()


def reserved_bytes() -> int:
    """The caching allocator's reserved bytes now (torch.cuda.memory_reserved)."""
    return int(torch.cuda.memory_reserved())


def synchronize() -> None:
    torch.cuda.synchronize()


def empty_cache() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def set_device(index: int) -> None:
    """This process's GPU (a torchrun rank's LOCAL_RANK)."""
    torch.cuda.set_device(index)
