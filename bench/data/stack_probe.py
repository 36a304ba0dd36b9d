"""Shared probes of the tests/data/stacks scripts (sac_block, chunked_ce, opt_in_bwd, compile_block).

Allocator figures: PyTorch's CPU allocator's running total, read from ``torch.profiler(profile_memory=True)``
allocation events by `vramplan.measure.cpu` (the oracle's method, bench/measure/measure_step.py); each measured
region runs in a ``record_function`` range and `Trace` reads the total just before it (``start``), its maximum
inside (``peak``) and its value at its end (``end``). Figures are relative, so the counter's offset cancels.

Saved tensors: ``torch.autograd.graph.saved_tensors_hooks``, de-duplicated by untyped storage (a view counts its
whole storage), in the order first saved, each with its bytes, dtype, shape, the class of its ``grad_fn`` and
whether its storage is a parameter's.

Matmuls: `aten_matmuls` turns oneDNN off (``torch.backends.mkldnn``), so bf16 matmuls run ATen's own CPU kernels. On a
CPU with AVX512-BF16 oneDNN's bf16 ``aten::mm`` takes a workspace from PyTorch's allocator whose size grows with the
thread count (measured on 2026-12-03: 87,168 B at one thread, 173,824 B at two), a transient that the committed
files do not show (they were made where oneDNN's scratch stayed outside the allocator, as ../shared/oracle/README.md
says of the oracle's machine): with oneDNN on, the optimizer-in-backward peaks and the compiled chunked loss's
forward peak come out higher by it; every other figure is the same either way."""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vramplan.measure.cpu import CpuProfiler, PhaseFigures


class Trace:
    """One profiler session; `region(name)` marks a measured region, `fig(name)` gives its figures after `stop`."""

    def __init__(self) -> None:
        self.prof = CpuProfiler()
        self.names: list[str] = []
        self.figs: dict[str, PhaseFigures] = {}
        self.consistent = False

    def __enter__(self) -> Trace:
        self.prof.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.prof.stop()
        figures = self.prof.figures()
        assert figures is not None
        self.consistent = figures.consistent
        phases = [p for s in figures.steps for p in s.phases]
        self.figs = {p.phase: p for p in phases}

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        self.names.append(name)
        with self.prof.phase(0, name, 0):
            yield

    def fig(self, name: str) -> PhaseFigures:
        return self.figs[name]


@contextmanager
def aten_matmuls() -> Iterator[None]:
    """oneDNN off for the block (see the module's docstring)."""
    was = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = was


def tensor_record(t: torch.Tensor, param_ptrs: set[int]) -> dict[str, Any]:
    s = t.untyped_storage()
    return {
        "bytes": s.nbytes(),
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "producer": type(t.grad_fn).__name__ if t.grad_fn is not None else None,
        "param": s.data_ptr() in param_ptrs,
    }


@contextmanager
def saved_tensors(params: Any, out: list[dict[str, Any]]) -> Iterator[None]:
    """Appends to `out` one record per distinct storage autograd saves inside the block."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    seen: set[int] = set()
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in seen and s.nbytes():
            seen.add(s.data_ptr())
            keep.append(t)
            out.append(tensor_record(t, param_ptrs))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield
    keep.clear()


def hooks_bytes(records: list[dict[str, Any]], params: bool = False) -> int:
    return sum(r["bytes"] for r in records if params or not r["param"])


def environment() -> dict[str, str]:
    """The versions a rerun records (only in the script's report, not in the data files, which keep their keys)."""
    env = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("torchtune", "torchao", "transformers"):
        with contextlib.suppress(Exception):  # absent or failing to import: not recorded
            env[name] = __import__(name).__version__
    return env


def write_json(path: Path, data: dict[str, Any]) -> None:
    """One-space indented JSON without a final newline, as the committed stack files were written."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def out_path(doc: str, default: Path) -> Path:
    """A script's ``-o/--out`` (``default``: its tests/data file), with PyTorch pinned to the 2 threads every
    committed file was measured with."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=default)
    path: Path = ap.parse_args().out
    torch.set_num_threads(2)
    return path


def publish(path: Path, data: dict[str, Any]) -> None:
    """Write a script's figures (`write_json`) and say where, with the environment they were measured in."""
    write_json(path, data)
    print(f"wrote {path} ({environment()})")
